"""A task's gate settings (its `Tolerance`): margins and alpha from the command line, the YAML and the metrics' own.

Margins. A margin given on the command line (--gate-margin, --gate-relative-margin, or both) replaces the margin of
every metric of every task, absolute and relative alike: the options not given count as 0, so `--gate-margin=0` is a
test against no change at all, and `--gate-margin=0.005` is a half-point margin even for a metric whose own margin is
relative (likelihood_diff's 10%). Without one, each margin key is taken from the most specific place that sets it:
the YAML's `modelbench.gate.metrics.<metric>`, the YAML's `modelbench.gate`, the metric's own margin (registry;
for a derived metric such as stereotype_preference, metrics/evidence.py).

Alpha. --gate-alpha, else the YAML's `modelbench.gate.alpha`, else 0.05; the task's share of it is the session's
(gate/alpha_split.py).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.metrics.evidence import derived_metrics
from pytest_modelbench.metrics.generative import base_metric_name
from pytest_modelbench.metrics.registry import LOWER, Margin, Metric
from pytest_modelbench.tasks.filters import INVALID_OUTPUT

DEFAULT_TOLERANCE = Tolerance(absolute_margin=0.01, relative_margin=0.0, alpha=0.05)
# The invalid_output entry (gate/integrity.py) of a generate_until task with a parsing filter: two points of its
# answers (docs/integrity.md, "The invalid-output entry").
INVALID_OUTPUT_METRIC = Metric(INVALID_OUTPUT, None, LOWER, binary=True, margin=Margin(absolute=0.02))
MARGIN_KEYS = {"absolute_margin": "absolute", "relative_margin": "relative"}  # gate key -> Margin field


def resolve_tolerance(task_config: Any, overrides: Mapping[str, float], metrics: Sequence[Metric]) -> Tolerance:
    """The task's Tolerance, all of alpha its own. `overrides`: the command line's gate keys (absolute_margin,
    relative_margin, alpha), already checked; `metrics`: the task's metrics as the metrics layer resolved them (a
    group's: its aggregates)."""
    yaml_gate = task_config.gate
    alpha = _first(overrides.get("alpha"), yaml_gate.alpha, DEFAULT_TOLERANCE.alpha)
    if _parses_answers(task_config):
        metrics = (*metrics, INVALID_OUTPUT_METRIC)
    if any(key in overrides for key in MARGIN_KEYS):
        every = Margin(**{field_name: overrides.get(key, 0.0) for key, field_name in MARGIN_KEYS.items()})
        return Tolerance(
            absolute_margin=every.absolute, relative_margin=every.relative, alpha=alpha,
            metric_margins={name: every for name in (*(m.name for m in metrics),
                                                     *(d.name for d in derived_metrics(m.name for m in metrics)))},
        )
    metric_margins = {}
    for metric in (*metrics, *derived_metrics(m.name for m in metrics)):
        yaml_metric = yaml_gate.metrics.get(base_metric_name(metric.name), {})
        metric_margins[metric.name] = Margin(**{
            field_name: _first(yaml_metric.get(key), getattr(yaml_gate, key), getattr(metric.margin, field_name))
            for key, field_name in MARGIN_KEYS.items()
        })
    return Tolerance(
        absolute_margin=_first(yaml_gate.absolute_margin, DEFAULT_TOLERANCE.absolute_margin),
        relative_margin=_first(yaml_gate.relative_margin, DEFAULT_TOLERANCE.relative_margin),
        alpha=alpha, metric_margins=metric_margins,
    )


def _parses_answers(task_config: Any) -> bool:
    """Whether the task has an invalid_output entry: a generate_until task with a parsing filter."""
    return (getattr(task_config, "output_type", None) == "generate_until"
            and any(pipeline.fallbacks for pipeline in getattr(task_config, "filters", ())))


def _first(*values: Any) -> float:
    return float(next(v for v in values if v is not None))
