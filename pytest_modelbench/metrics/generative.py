"""A generate_until task's metrics: each metric_list entry once per filter pipeline, keyed as lm-eval keys them
(`exact_match,strict-match`), with per-document 0/1 values so the gate pairs documents (McNemar)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.metrics.exact_match import ExactMatch, exact_match_options
from pytest_modelbench.metrics.registry import HIGHER, ONE_POINT, Metric
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.requests import DocumentRequests

GENERATIVE_METRICS = ("exact_match",)


@dataclass(frozen=True)
class _FilteredExactMatch:
    """Per document: exact match of one pipeline's answer (from the document's answers by pipeline name)."""

    pipeline: str
    scorer: ExactMatch

    def __call__(self, doc: DocumentRequests, answers: Mapping[str, str]) -> float:
        return self.scorer.score(answers[self.pipeline], doc.gold)


def generative_metrics(config: TaskConfig) -> tuple[Metric, ...]:
    metrics = []
    for i, spec in enumerate(config.metric_list):
        if spec.name not in GENERATIVE_METRICS:
            raise TaskConfigError(
                f"{config.source}: unknown metric '{spec.name}' in metric_list for a generate_until task "
                f"(known: {', '.join(GENERATIVE_METRICS)})"
            )
        scorer = exact_match_options(spec.options, config.source, f"metric_list[{i}]")
        for pipeline in config.filters:
            metrics.append(Metric(f"{spec.name},{pipeline.name}", _FilteredExactMatch(pipeline.name, scorer), HIGHER,
                                  binary=True, margin=ONE_POINT))
    return tuple(metrics)


def base_metric_name(name: str) -> str:
    """`exact_match` of `exact_match,strict-match`: the metric_list name a filtered metric comes from."""
    return name.partition(",")[0]
