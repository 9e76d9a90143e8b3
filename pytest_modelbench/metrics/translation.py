"""generate_until `bleu`, `chrf` and `ter` as lm-eval 0.4.13 computes them: corpus scores of sacrebleu 2.6.0
(`corpus_bleu`, `corpus_chrf`, `corpus_ter` with their defaults) over every document's (reference, answer) pair,
one reference stream (lm-eval's `_sacreformat` of single references). BLEU and chrF are higher-is-better, TER
lower-is-better, all on sacrebleu's 0-100 scale.

sacrebleu's corpus score is computed from the sum of per-sentence statistics (n-gram matches and totals, character
n-gram counts, edits and reference lengths), so the per-document value stored here is that sentence's statistics
vector, and the task-level value is sacrebleu's score of their sum: exactly the corpus score, and cheap to re-apply
to resampled documents in the gate. The statistics come from sacrebleu's own `_extract_corpus_statistics` and the
score from its `_compute_score_from_stats`, the pair its significance tests use (pinned: sacrebleu==2.6.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric as SacrebleuMetric

from pytest_modelbench.errors import MetricError

# Whether higher is better, as lm-eval's metric registry says.
CORPUS_METRICS = {"bleu": True, "chrf": True, "ter": False}
_SCORERS: dict[str, SacrebleuMetric] = {"bleu": BLEU(), "chrf": CHRF(), "ter": TER()}


def sentence_statistics(metric: str, reference: str | tuple[str, ...], answer: str, doc_id: int) -> np.ndarray:
    """One document's sacrebleu statistics of `answer` against its reference."""
    if isinstance(reference, tuple):
        # lm-eval scores a list target as 1.0 per document (its any-match rule), which its corpus aggregation
        # cannot read: the task fails there.
        raise MetricError(f"document {doc_id}: metric '{metric}' needs one reference text per document, "
                          f"found {len(reference)}")
    return np.asarray(_SCORERS[metric]._extract_corpus_statistics([answer], [[reference]])[0], dtype=float)


@dataclass(frozen=True)
class CorpusScore:
    """The task-level value of the metric stored under `key` (e.g. `bleu,none`): the corpus score of its documents."""

    metric: str
    key: str

    def __call__(self, values: Mapping[str, np.ndarray], documents: Sequence) -> float:
        total = np.asarray(values[self.key]).sum(axis=0)
        return float(_SCORERS[self.metric]._compute_score_from_stats(total.tolist()).score)
