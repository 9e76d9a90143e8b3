"""A generate_until task's metrics: each metric_list entry once per filter pipeline, keyed as lm-eval keys them
(`exact_match,strict-match`). exact_match is 0/1 per document, so the gate pairs documents with McNemar's test;
bleu, chrf and ter (metrics/translation.py) are corpus scores, gated by the bootstrap that re-applies them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.metrics.exact_match import ExactMatch, exact_match_options
from pytest_modelbench.metrics.registry import HIGHER, LOWER, ONE_POINT, Margin, Metric
from pytest_modelbench.metrics.translation import CORPUS_METRICS, CorpusScore, sentence_statistics
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.requests import DocumentRequests

GENERATIVE_METRICS = ("exact_match", *CORPUS_METRICS)
# Corpus scores on sacrebleu's 0-100 scale: one point, the smallest BLEU change papers report.
CORPUS_MARGIN = Margin(absolute=1.0)
# lm-eval registers these for multiple_choice only: on generated text its sklearn aggregation fails.
_MULTIPLE_CHOICE_ONLY = ("f1", "mcc")


@dataclass(frozen=True)
class _FilteredExactMatch:
    """Per document: exact match of one pipeline's answer (from the document's answers by pipeline name)."""

    pipeline: str
    scorer: ExactMatch

    def __call__(self, doc: DocumentRequests, answers: Mapping[str, str]) -> float:
        return self.scorer.score(answers[self.pipeline], doc.gold)


@dataclass(frozen=True)
class _FilteredStatistics:
    """Per document: the sacrebleu statistics of one pipeline's answer against the reference."""

    pipeline: str
    metric: str

    def __call__(self, doc: DocumentRequests, answers: Mapping[str, str]) -> np.ndarray:
        return sentence_statistics(self.metric, doc.gold, answers[self.pipeline], doc.doc_id)


def generative_metrics(config: TaskConfig) -> tuple[Metric, ...]:
    metrics = []
    for i, spec in enumerate(config.metric_list):
        _check_known(spec.name, spec.options, config, f"metric_list[{i}]")
        if spec.name == "exact_match":
            scorer = exact_match_options(spec.options, config.source, f"metric_list[{i}]")
        elif spec.options:
            raise TaskConfigError(f"{config.source}: key 'metric_list[{i}].{sorted(spec.options, key=str)[0]}' is not "
                                  f"an option of {spec.name}")
        for pipeline in config.filters:
            name = f"{spec.name},{pipeline.name}"
            if spec.name == "exact_match":
                metrics.append(Metric(name, _FilteredExactMatch(pipeline.name, scorer), HIGHER, binary=True,
                                      margin=ONE_POINT))
            else:
                metrics.append(Metric(name, _FilteredStatistics(pipeline.name, spec.name),
                                      HIGHER if CORPUS_METRICS[spec.name] else LOWER, binary=False,
                                      margin=CORPUS_MARGIN, aggregate=CorpusScore(spec.name, name)))
    return tuple(metrics)


def _check_known(name: str, options: Mapping, config: TaskConfig, label: str) -> None:
    if options.get("hf_evaluate"):
        raise TaskConfigError(f"{config.source}: key '{label}.hf_evaluate': metrics of the Hugging Face evaluate "
                              f"library are not supported (metric '{name}')")
    if name in _MULTIPLE_CHOICE_ONLY:
        raise TaskConfigError(f"{config.source}: key '{label}': metric '{name}' is a multiple_choice metric in lm-eval "
                              "(its aggregation reads (gold, predicted choice) index pairs); a generate_until task "
                              f"cannot use it (known: {', '.join(GENERATIVE_METRICS)})")
    if name not in GENERATIVE_METRICS:
        raise TaskConfigError(f"{config.source}: unknown metric '{name}' in metric_list for a generate_until task "
                              f"(known: {', '.join(GENERATIVE_METRICS)})")


def corpus_aggregate(name: str) -> CorpusScore | None:
    """The aggregate of a generate_until metric key such as `bleu,none`; None for any other name."""
    base = base_metric_name(name)
    return CorpusScore(base, name) if base in CORPUS_METRICS and "," in name else None


def base_metric_name(name: str) -> str:
    """`exact_match` of `exact_match,strict-match`: the metric_list name a filtered metric comes from."""
    return name.partition(",")[0]
