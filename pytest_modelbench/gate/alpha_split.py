"""How the session's alpha is split across its gated items: weighted Bonferroni.

Each gated item (a task, or a group gated as one) has a weight: its line in the ini's `modelbench_gate_weights`, else
its YAML's `modelbench.gate.weight` (a group's own block for a group item), else 1 (GatePolicy.alpha_split). Under
--gate-error-control=session an item is tested at its alpha × weight / W, W the sum of the weights of every gated
item collected (after -k/-m deselection, before a --shard split): the levels still sum to alpha, so the union bound
holds for the session whatever the weights, and W, like the count it replaces, is known when collection finishes on
every xdist worker and every shard, so each item still decides on its own. A suite's pooled entries (gate/pooled.py)
are one more family in W, with a weight of their own. Under =task every item (and every pooled family) is tested at
its own alpha and the weights are not used. See docs/error-rates.md, "Error rates".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.baseline import Tolerance

DEFAULT_WEIGHT = 1.0


class UnweighedItemError(ModelbenchError):
    """A gated item that the session's split of alpha does not weigh."""


@dataclass(frozen=True)
class AlphaSplit:
    weights: Mapping[str, float] = field(default_factory=dict)  # every gated item's weight, by '<suite>/<task>' key
    error_control: str = "session"
    # Each suite with pooled entries (gate/pooled.py): the weight of its pooled family, by suite.
    pooled: Mapping[str, float] = field(default_factory=dict)

    @property
    def total_weight(self) -> float:
        return sum(self.weights.values()) + sum(self.pooled.values())

    @property
    def task_count(self) -> int:
        """How many tasks share the session's alpha (1 under per-task control)."""
        return max(1, len(self.weights)) if self.error_control == "session" else 1

    def applied(self, tolerance: Tolerance, key: str) -> Tolerance:
        """`tolerance` with the task's share of alpha: its weight over the session's total, or all of it under
        per-task control (the weight is kept for the reports). Under session control a split that weighs items must
        weigh this one (UnweighedItemError): a level outside the total would break the bound the levels keep. An
        empty split (none made yet, nothing collected) gives the item all of alpha, a split of one."""
        if self.error_control == "session" and self.weights and key not in self.weights:
            raise UnweighedItemError(
                f"{key}: the session's split of alpha weighs {len(self.weights)} gated item(s) and not this one, so "
                "its level would lie outside the levels that sum to alpha; gate it in a session that collects it"
            )
        weight = self.weights.get(key, DEFAULT_WEIGHT)
        total = (self.total_weight or weight) if self.error_control == "session" else weight
        return replace(tolerance, task_count=self.task_count, weight=weight, total_weight=total)

    def as_json(self) -> dict[str, Any]:
        """What a run record holds of the split: shards that split alpha otherwise are not one session."""
        return {"tasks": self.task_count, "weights": {key: weight for key, weight in sorted(self.weights.items())
                                                 if weight != DEFAULT_WEIGHT},
                "pooled": dict(sorted(self.pooled.items()))}
