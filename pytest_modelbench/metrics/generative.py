"""A generate_until task's metrics: each metric_list entry once per filter pipeline, keyed as lm-eval keys them
(`exact_match,strict-match`). exact_match is 0/1 per document, so the gate pairs documents with McNemar's test;
bleu, chrf and ter (metrics/translation.py) are corpus scores, gated by the bootstrap that re-applies them.

`pass@K` (any K, e.g. `metric: pass@1`), this plugin's metric over a sampled task's draws (`repeats` of them, n):
per document, of the pipeline's answers over the draws (a pipeline that does not end with take_first; one ending
with it has one answer, copied to every draw), `c` are right by exact_match (its options apply), and the value is
Chen et al. (2021)'s unbiased estimate of the chance that at least one of K draws is right, 1 - C(n-c, K) / C(n, K)
(K at most n). pass@1 is c/n, the mean accuracy over the draws (mean@n). It is a share, not 0/1, so the gate's
paired bootstrap tests it, and the sampling noise of each document's draws is inside the variance it sees.

`metric: !function module.fn` (--allow-task-code) is called as lm-eval 0.4.13 calls it (api/task.py
ConfigurableTask.process_results, generate_until): per document and pipeline, fn(references=[gold],
predictions=[answer], **options), the options being the entry's other keys; if that raises TypeError, fn([gold,
answer]) without them. With several references (a list target) each is scored alone and the document gets 1.0 if
any score is non-zero (a function named exact_match gets all of them at once, as lm-eval's exact_match does). The
metric is named by the function's __name__; a dict result holding only that name is read as its value. Each value
must be a number; the entry's `aggregation` (mean, median, perplexity or a !function; lm-eval has no default for an
unregistered name) and `higher_is_better` (needed unless lm-eval registers the name) say how it is reported and
gated: on its per-document values, like every other metric. The entry is checked when the YAML is read
(tasks/metric_list.py).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.metrics.exact_match import ExactMatch, exact_match_options
from pytest_modelbench.metrics.registry import HIGHER, LOWER, ONE_POINT, Direction, Margin, Metric
from pytest_modelbench.metrics.task_aggregation import TaskAggregation
from pytest_modelbench.metrics.translation import CORPUS_METRICS, CorpusScore, sentence_statistics
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.filters import Answers
from pytest_modelbench.tasks.metric_list import MetricSpec
from pytest_modelbench.tasks.requests import DocumentRequests
from pytest_modelbench.tasks.task_code import lm_eval_missing

GENERATIVE_METRICS = ("exact_match", *CORPUS_METRICS, "pass@K")
PASS_AT_K = re.compile(r"pass@([1-9][0-9]*)")
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


def pass_at_k(n: int, correct: int, k: int) -> float:
    """The unbiased estimate of pass@k from `n` draws of which `correct` are right (Chen et al. 2021, eq. 1)."""
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


@dataclass(frozen=True)
class _FilteredPassAtK:
    """Per document: pass@k over one pipeline's answers to the document's draws, each right by exact match."""

    pipeline: str
    scorer: ExactMatch
    k: int

    def __call__(self, doc: DocumentRequests, answers: Answers) -> float:
        samples = answers.samples[self.pipeline]
        return pass_at_k(len(samples), int(sum(self.scorer.score(answer, doc.gold) for answer in samples)), self.k)


@dataclass(frozen=True)
class _FilteredStatistics:
    """Per document: the sacrebleu statistics of one pipeline's answer against the reference."""

    pipeline: str
    metric: str

    def __call__(self, doc: DocumentRequests, answers: Mapping[str, str]) -> np.ndarray:
        return sentence_statistics(self.metric, doc.gold, answers[self.pipeline], doc.doc_id)


def generative_metrics(config: TaskConfig) -> tuple[Metric, ...]:
    names = [spec.name for spec in config.metric_list]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise TaskConfigError(f"{config.source}: key 'metric_list': two entries are metric '{duplicate}' (a !function "
                              "metric is named by its function's __name__, as in lm-eval)")
    metrics = []
    for i, spec in enumerate(config.metric_list):
        if spec.function is not None:
            metrics.extend(_function_metrics(spec, config))
            continue
        _check_known(spec.name, spec.options, config, f"metric_list[{i}]")
        sampled = PASS_AT_K.fullmatch(spec.name)
        if sampled is not None:
            k = _draws_for(int(sampled.group(1)), config, f"metric_list[{i}]")
        if spec.name == "exact_match" or sampled is not None:
            scorer = exact_match_options(spec.options, config.source, f"metric_list[{i}]", spec.name)
        elif spec.options:
            raise TaskConfigError(f"{config.source}: key 'metric_list[{i}].{sorted(spec.options, key=str)[0]}' is not "
                                  f"an option of {spec.name}")
        for pipeline in config.filters:
            name = f"{spec.name},{pipeline.name}"
            if spec.name == "exact_match":
                metrics.append(Metric(name, _FilteredExactMatch(pipeline.name, scorer), HIGHER, binary=True,
                                      margin=ONE_POINT))
            elif sampled is not None:
                metrics.append(Metric(name, _FilteredPassAtK(pipeline.name, scorer, k), HIGHER, binary=False,
                                      margin=ONE_POINT))
            else:
                metrics.append(Metric(name, _FilteredStatistics(pipeline.name, spec.name),
                                      HIGHER if CORPUS_METRICS[spec.name] else LOWER, binary=False,
                                      margin=CORPUS_MARGIN, aggregate=CorpusScore(spec.name, name)))
    return tuple(metrics)


# --- metric: !function --------------------------------------------------------------------------------------------


def _function_metrics(spec: MetricSpec, config: TaskConfig) -> list[Metric]:
    ideal = config.gate.ideal(spec.name)
    direction = Direction("ideal", ideal) if ideal is not None else HIGHER if spec.higher_is_better else LOWER
    margin = Margin(relative=0.02) if spec.aggregation == "perplexity" else ONE_POINT
    metrics = []
    for pipeline in config.filters:
        key = f"{spec.name},{pipeline.name}"
        aggregate = None if spec.aggregation == "mean" else TaskAggregation(key, spec.aggregation)
        metrics.append(Metric(key, _FilteredFunction(pipeline.name, spec.name, spec.function, spec.options),
                              direction, binary=False, margin=margin, aggregate=aggregate))
    return metrics


@dataclass(frozen=True)
class _FilteredFunction:
    """Per document: a `metric: !function` on one pipeline's answer, called with lm-eval's arguments."""

    pipeline: str
    name: str
    function: Any  # a resolved !function (tasks/task_code.py TaskFunction)
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, doc: DocumentRequests, answers: Mapping[str, str]) -> float:
        answer = answers[self.pipeline]
        where = (f"document {doc.doc_id}, filter '{self.pipeline}': metric '{self.name}' "
                 f"(!function {self.function.dotted_name})")
        if not isinstance(doc.gold, tuple):
            return self._value(self._call(doc.gold, answer, where), where)
        references = list(doc.gold)
        if self.name == "exact_match":  # lm-eval's own exact_match branch, taken by any metric of that name
            result = self._keywords(references, [answer] * len(references), where)
            value = self._value(result, where)
            return 1.0 if value > 0.0 else 0.0
        scores = [self._value(self._call(reference, answer, where), where) for reference in references]
        return 1.0 if any(scores) else 0.0

    def _call(self, reference: Any, answer: str, where: str) -> Any:
        try:
            return self.function.function(references=[reference], predictions=[answer], **self.options)
        except TypeError:  # lm-eval's fallback: a metric of one [reference, prediction] item, without the options
            pass
        except Exception as exc:  # the task's own code: named, never a traceback
            raise DocumentError(f"{where}: {_failure(exc)}") from None
        try:
            return self.function.function([reference, answer])
        except Exception as exc:
            raise DocumentError(f"{where}: called as fn(references=..., predictions=...) and then as fn([reference, "
                                f"prediction]): {_failure(exc)}") from None

    def _keywords(self, references: list, predictions: list, where: str) -> Any:
        try:
            return self.function.function(references=references, predictions=predictions, **self.options)
        except Exception as exc:
            raise DocumentError(f"{where}: {_failure(exc)}") from None

    def _value(self, result: Any, where: str) -> float:
        if isinstance(result, Mapping):
            if set(result) != {self.name}:
                raise DocumentError(f"{where} returned the metrics {sorted(map(str, result))}; only a value of its own "
                                    f"metric '{self.name}' is supported (lm-eval reports each key of a dict as a "
                                    "metric of its own, which needs them in metric_list)")
            result = result[self.name]
        if not isinstance(result, numbers.Real):
            hint = (" (per-document items for a !function aggregation, lm-eval's passthrough metrics, are not "
                    "supported yet)") if isinstance(result, (list, tuple)) else ""
            raise DocumentError(f"{where} returned {type(result).__name__} {result!r:.80}, not a number{hint}")
        if not math.isfinite(result):
            raise DocumentError(f"{where} returned {result!r}; a metric value must be a finite number")
        return float(result)


def _failure(exc: Exception) -> str:
    return lm_eval_missing(exc) or f"raised {type(exc).__name__}: {exc}"


def _check_known(name: str, options: Mapping, config: TaskConfig, label: str) -> None:
    if options.get("hf_evaluate"):
        raise TaskConfigError(f"{config.source}: key '{label}.hf_evaluate': metrics of the Hugging Face evaluate "
                              f"library are not supported (metric '{name}')")
    if name in _MULTIPLE_CHOICE_ONLY:
        raise TaskConfigError(f"{config.source}: key '{label}': metric '{name}' is a multiple_choice metric in lm-eval "
                              "(its aggregation reads (gold, predicted choice) index pairs); a generate_until task "
                              f"cannot use it (known: {', '.join(GENERATIVE_METRICS)})")
    if name not in GENERATIVE_METRICS and PASS_AT_K.fullmatch(name) is None:
        raise TaskConfigError(f"{config.source}: unknown metric '{name}' in metric_list for a generate_until task "
                              f"(known: {', '.join(GENERATIVE_METRICS)})")


def _draws_for(k: int, config: TaskConfig, label: str) -> int:
    """pass@k's k, refused above the document's number of draws (the task's repeats when it samples, else 1)."""
    if k > config.draws:
        why = (f"the task samples {config.draws} draws a document (repeats)" if config.generation.sampling
               else "the task decodes greedily, one answer a document (sample with generation_kwargs do_sample: "
                    "true and repeats: n)")
        raise TaskConfigError(f"{config.source}: key '{label}': metric 'pass@{k}' needs at least {k} draws a "
                              f"document, and {why}")
    return k


def corpus_aggregate(name: str) -> CorpusScore | None:
    """The aggregate of a generate_until metric key such as `bleu,none`; None for any other name."""
    base = base_metric_name(name)
    return CorpusScore(base, name) if base in CORPUS_METRICS and "," in name else None


def base_metric_name(name: str) -> str:
    """`exact_match` of `exact_match,strict-match`: the metric_list name a filtered metric comes from."""
    return name.partition(",")[0]
