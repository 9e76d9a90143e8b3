"""The `modelbench.gate` block of a task or group YAML, checked when the YAML is read: the gate's tolerances as written
(the gate resolves them against its options and defaults, gate/)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.tasks.metric_list import derived_metric_names

_MARGIN_KEYS = {"absolute_margin", "relative_margin"}
_SHARE_KEYS = {"max_unscored", "max_invalid"}  # the integrity policy (gate/integrity.py): shares of the documents
_GATE_KEYS = _MARGIN_KEYS | _SHARE_KEYS | {"alpha", "weight", "metrics", "cluster"}
_METRIC_KEYS = _MARGIN_KEYS | {"ideal"}


@dataclass(frozen=True)
class GateTolerance:
    """The YAML's `modelbench.gate` block as written (values are checked where they are resolved, gate/)."""

    absolute_margin: float | None = None
    relative_margin: float | None = None
    alpha: float | None = None
    weight: float | None = None  # the task's weight in the session's split of alpha (gate/alpha_split.py)
    # What makes documents related: a field or a template (as doc_to_text) giving each document's cluster id, shared
    # across tasks (gate/pooled.py); None: each document is its own cluster.
    cluster: str | None = None
    # metric → {absolute_margin, relative_margin, ideal}; `ideal` only for a metric the task's own code computes
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The integrity policy (gate/integrity.py): the largest share of documents left unscored, and of answers no
    # filter could parse, before the task's outcome is `error`; None: the option's or the default
    max_unscored: float | None = None
    max_invalid: float | None = None

    def ideal(self, metric: str) -> float | None:
        """The YAML's ideal point for a task-code metric: the gate orients it by the distance from that point."""
        value = self.metrics.get(metric, {}).get("ideal")
        return None if value is None else float(value)


# Above 0.5 a candidate inside its margin would be blocked more often than not; below 1e-9 no test of a few
# thousand documents can ever block. Weights are relative, so a million to one is as uneven as a split gets.
ALPHA_RANGE = (1e-9, 0.5)
WEIGHT_RANGE = (1e-6, 1e6)


def gate_value_problem(key: str, value: Any) -> str | None:
    """What is wrong with a gate tolerance value (YAML `modelbench.gate`, a --gate-* option or an ini weight), if
    anything."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"must be a number, got {value!r}"
    if key == "alpha" and not ALPHA_RANGE[0] <= value <= ALPHA_RANGE[1]:
        return f"must lie between {ALPHA_RANGE[0]:g} and {ALPHA_RANGE[1]:g}, got {value!r}"
    if key == "weight" and not WEIGHT_RANGE[0] <= value <= WEIGHT_RANGE[1]:
        return f"must lie between {WEIGHT_RANGE[0]:g} and {WEIGHT_RANGE[1]:g}, got {value!r}"
    if key in _SHARE_KEYS and not 0 <= value <= 1:
        return f"must be a share of the documents, between 0 and 1, got {value!r}"
    if value < 0:
        return f"must be >= 0, got {value!r}"
    return None


def checked_gate_block(gate: Any, path: Path) -> dict[str, Any]:
    """A YAML's `modelbench.gate` block (a task's or a group's), its values checked; {} when absent."""
    gate = gate or {}
    if not isinstance(gate, dict) or set(gate) - _GATE_KEYS:
        raise TaskConfigError(f"{path}: key 'modelbench.gate' may only hold {sorted(_GATE_KEYS)}")
    for key, value in gate.items():
        if key == "cluster":
            problem = None if isinstance(value, str) and value.strip() else "must be a field name or a template"
        else:
            problem = None if key == "metrics" else gate_value_problem(key, value)
        if problem:
            raise TaskConfigError(f"{path}: key 'modelbench.gate.{key}' {problem}")
    return gate


def check_metric_block(block: Any, metric_names: set[str], task_code_metrics: set[str], path: Path,
                       in_group: bool = False) -> None:
    """`modelbench.gate.metrics`: margins for metrics the task scores (`metric_names`) or derives from them, and an
    ideal point for those its own code computes (`task_code_metrics`: process_results', a `metric: !function`): their
    direction is otherwise only lm-eval's higher_is_better, while a registered metric's comes from the registry.
    `in_group`: a group file's block (`metric_names`: its aggregate_metric_list), which sets no ideal point."""
    if block is None:
        return
    metric_names = metric_names | set(derived_metric_names(metric_names))
    if not isinstance(block, dict):
        raise TaskConfigError(f"{path}: key 'modelbench.gate.metrics' must map metric names to margins")
    for name, margins in block.items():
        if name not in metric_names:
            raise TaskConfigError(
                f"{path}: key 'modelbench.gate.metrics.{name}': no metric '{name}' in "
                f"{'aggregate_metric_list' if in_group else 'metric_list'} or derived from it "
                f"({', '.join(sorted(metric_names)) or 'none'})"
            )
        if not isinstance(margins, dict) or not margins or set(margins) - _METRIC_KEYS:
            raise TaskConfigError(
                f"{path}: key 'modelbench.gate.metrics.{name}' may only hold {sorted(_METRIC_KEYS)}"
            )
        for key, value in margins.items():
            if key == "ideal" and in_group:
                problem = (f"belongs in the task files that compute '{name}': a group's metric is gated in the "
                           "direction its tasks give it")
            elif key == "ideal":
                problem = _ideal_problem(name, value, task_code_metrics)
            else:
                problem = gate_value_problem(key, value)
            if problem:
                raise TaskConfigError(f"{path}: key 'modelbench.gate.metrics.{name}.{key}' {problem}")


def _ideal_problem(metric: str, value: Any, task_code_metrics: set[str]) -> str | None:
    if metric not in task_code_metrics:
        return (f"is for a metric the task's own code computes (process_results or a `metric: !function`); "
                f"'{metric}' has its direction from the metric registry")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"must be a number (the metric's best value), got {value!r}"
    return None
