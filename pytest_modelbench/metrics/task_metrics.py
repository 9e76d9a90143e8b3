"""A task's metrics: its metric_list resolved into metrics, from the built-in ones (metrics/registry.py), a
generate_until task's (metrics/generative.py) or a process_results task's (metrics/process_results.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.metrics.generative import generative_metrics
from pytest_modelbench.metrics.process_results import process_results_metrics
from pytest_modelbench.metrics.registry import METRICS, Metric, known_metrics
from pytest_modelbench.metrics.task_aggregation import GOLD_AND_PREDICTION, TaskAggregation
from pytest_modelbench.tasks.config import TaskConfig


def resolve_metrics(config: TaskConfig) -> tuple[Metric, ...]:
    """The task's metric_list as metrics; an unknown name is an error naming the file."""
    if config.process_results is not None:
        return process_results_metrics(config)
    if config.output_type == "generate_until":
        return generative_metrics(config)
    known = known_metrics(config.output_type)
    unknown = [spec.name for spec in config.metric_list if spec.name not in known]
    if unknown:
        raise TaskConfigError(
            f"{config.source}: unknown metric '{unknown[0]}' in metric_list for a {config.output_type} task "
            f"(known: {', '.join(sorted(known))})"
        )
    names = {spec.name for spec in config.metric_list}
    for spec in config.metric_list:
        missing = [name for name in METRICS[spec.name].inputs if name not in names]
        if missing:
            raise TaskConfigError(
                f"{config.source}: metric '{spec.name}' is computed from {', '.join(METRICS[spec.name].inputs)}; "
                f"add {', '.join(repr(m) for m in missing)} to metric_list"
            )
    return tuple(_with_aggregation(known[spec.name], spec.aggregation) for spec in config.metric_list)


def _with_aggregation(metric: Metric, aggregation: Any) -> Metric:
    """A multiple_choice metric with the task's own `aggregation: !function` (metrics/task_aggregation.py)."""
    if not callable(aggregation):
        return metric
    return replace(metric, aggregate=TaskAggregation(metric.name, aggregation, metric.name in GOLD_AND_PREDICTION))
