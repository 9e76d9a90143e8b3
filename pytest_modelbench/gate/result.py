"""A task's gate result: what the judge found (gate/judge.py), in plain JSON-able fields, the currency between the
gate and the outputs that render it (outputs/). Under pytest-xdist and in a shard's run record it travels as the
item's user properties (outputs/result_properties.py) and is rebuilt from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from pytest_modelbench.gate.alpha_split import DEFAULT_WEIGHT
from pytest_modelbench.gate.baseline import BaselineRecord
from pytest_modelbench.gate.compare import Entry, TaskComparison
from pytest_modelbench.gate.verdict import Verdict

# Task-level statuses, besides a comparison's verdict.
STATUS_COMPARED = "compared"
STATUS_CREATED = "created"
STATUS_UPDATED = "updated"
STATUS_MISSING = "missing"
STATUS_REBASELINE = "rebaseline-required"
STATUS_INVALID = "invalid"
STATUS_OFF = "off"
STATUS_POLICY = "policy-changed"  # --baseline-ref: the run's gate policy is not the ref's (gate/policy_file.py)
STATUS_ERROR = "error"  # the run, not the model: over its integrity limits, not judged (gate/integrity.py)


def entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "metric": entry.metric, "category": entry.category, "n": entry.n, "baseline": entry.baseline,
        "candidate": entry.candidate, "delta": entry.delta, "margin": entry.margin, "p_value": entry.p_value,
        "mde": entry.mde, "standard_error": entry.standard_error, "verdict": entry.verdict.value, "test": entry.test, "direction": entry.direction,
    }


def score_rows(candidate: BaselineRecord, baseline: BaselineRecord | None) -> list[dict[str, Any]]:
    """The candidate's scores per metric, overall then per category, beside the stored baseline's where it has them."""
    rows = []
    for category, summaries in [(None, candidate.overall), *sorted(candidate.categories.items())]:
        stored = {} if baseline is None else baseline.overall if category is None else baseline.categories.get(category, {})
        for metric, summary in summaries.items():
            before = stored.get(metric)
            rows.append({
                "metric": metric, "category": category, "n": summary.n, "value": summary.value,
                "baseline": None if before is None else before.value, "baseline_n": None if before is None else before.n,
            })
    return rows


@dataclass
class GateResult:
    """A task's gate outcome in transportable form (rebuilt from user_properties on the xdist controller)."""

    task: str  # the task's '<suite>/<task>' key (tasks/identity.py)
    status: str
    baseline: str
    baseline_name: str
    verdict: str | None = None  # a Verdict value when compared
    note: str = ""
    n_documents: int = 0
    entries: list[dict[str, Any]] = field(default_factory=list)  # entry_json of each entry, worst first
    nodeid: str = ""
    failed: bool = False
    alpha: float | None = None  # the task's alpha (--gate-alpha, else its YAML's), when compared
    tasks: int = 1  # gated tasks sharing the session's false-block rate (1 under --gate-error-control=task)
    weight: float = DEFAULT_WEIGHT  # the task's weight (gate/alpha_split.py)
    total_weight: float | None = None  # the weights alpha was split by; None: every task weighs 1 (the total is tasks)
    baseline_provenance: dict[str, Any] | None = None  # the stored baseline's, when it could be read
    candidate_provenance: dict[str, Any] | None = None  # this run's, when the gate was on
    baseline_ref: str | None = None  # --baseline-ref: the git ref the baseline was read from
    working_tree_differs: bool = False  # with baseline_ref: the working tree's file is not the ref's
    changed_documents: list[dict[str, Any]] = field(default_factory=list)  # gate/changed_documents.py
    # Scored but not compared (re-baseline required, missing, invalid, created): this run's scores per metric and
    # category, with the stored baseline's where one could be read (score_rows).
    scores: list[dict[str, Any]] = field(default_factory=list)
    # Compared: the overall entries its suite's pooled entries pool (gate/pooled.py, PoolingStats.as_json).
    pooling: list[dict[str, Any]] = field(default_factory=list)
    # Entries whose margin is below the noise floor (gate/noise_floor.py, NoiseWarning.as_json), and how it was measured
    noise_warnings: list[dict[str, Any]] = field(default_factory=list)
    noise_measured_with: str = ""
    # --snapshot-update of a baseline: per entry, what its reference became and its change since its origin
    # (gate/ratchet.py), or that every anchor was reset
    references: list[str] = field(default_factory=list)
    # What the run could not score or parse (gate/integrity.py, TaskIntegrity.as_json); None: not counted
    integrity: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.total_weight is None:
            self.total_weight = float(self.tasks)

    @classmethod
    def from_comparison(cls, comparison: TaskComparison, **kwargs: Any) -> "GateResult":
        return cls(
            status=STATUS_COMPARED, verdict=comparison.verdict.value,
            n_documents=comparison.n_documents, entries=[entry_json(e) for e in comparison.worst_first()],
            alpha=comparison.tolerance.alpha, tasks=comparison.tolerance.task_count, weight=comparison.tolerance.weight,
            total_weight=comparison.tolerance.total_weight, pooling=[p.as_json() for p in comparison.pooling],
            **kwargs,
        )

    @classmethod
    def over_integrity_limits(cls, problems: Sequence[str], scored: int, **kwargs: Any) -> "GateResult":
        """A task whose run is over its integrity limits (gate/integrity.py, `problems`): in `error`, nothing of its
        quality judged; `scored`: its documents scored."""
        return cls(status=STATUS_ERROR, note=f"the run, not the model: {'; '.join(problems)}", n_documents=scored,
                   **kwargs)

    @property
    def outcome(self) -> str:
        """One word for tables: the verdict when compared, else the status."""
        return self.verdict if self.status == STATUS_COMPARED else self.status

    @property
    def level(self) -> float | None:
        """The false-block rate this task was tested at (alpha × weight / total_weight), when compared: its share of
        the run's bound."""
        return None if self.alpha is None else self.alpha * (self.weight / self.total_weight)  # as task_alpha's

    def as_json(self) -> dict[str, Any]:
        """The task's outcome in --results-json (schema: pytest_modelbench/schemas/results.schema.json)."""
        return {
            "status": self.outcome, "note": self.note, "baseline": self.baseline, "baseline_name": self.baseline_name,
            "baseline_provenance": self.baseline_provenance, "n_documents": self.n_documents, "alpha": self.alpha,
            "gated_tasks": self.tasks, "weight": self.weight, "total_weight": self.total_weight, "level": self.level,
            "entries": self.entries, "baseline_ref": self.baseline_ref,
            "working_tree_differs": self.working_tree_differs, "references": self.references,
            "integrity": self.integrity,
        }

    def entries_with(self, verdict: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["verdict"] == verdict]


_OUTCOME_RANK = {
    STATUS_ERROR: 0,
    STATUS_INVALID: 0, STATUS_REBASELINE: 0, STATUS_MISSING: 0, STATUS_POLICY: 0, Verdict.REGRESSED.value: 0,
    Verdict.INCONCLUSIVE.value: 1, STATUS_UPDATED: 2, STATUS_CREATED: 2, Verdict.IMPROVED.value: 3,
    Verdict.PASS.value: 4, STATUS_OFF: 5,
}


def outcome_rank(outcome: str) -> int:
    """How bad an outcome (GateResult.outcome) is: 0 failed, up to 5 not gated; 9 for one this version does not know."""
    return _OUTCOME_RANK.get(outcome, 9)


def sorted_results(results: Iterable[GateResult]) -> list[GateResult]:
    """Worst outcome first, then by task."""
    return sorted(results, key=lambda r: (outcome_rank(r.outcome), r.task))
