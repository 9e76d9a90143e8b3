"""The session's decision: every gated task's result, the unused baselines and the exit status.

Error control is fixed before anything is scored: every task is gated at its alpha × its weight / the weights of the
tasks gated in the session summed (gate/alpha_split.py; all of its alpha under --gate-error-control=task), so a task's
verdict does not depend on where it ran (one process, an xdist worker, a shard) and the session's false-block rate is
bounded by the union of the tasks' (docs/error-rates.md, "Error rates"); each suite's pooled entries are one more
family of that split, judged here from the tasks' results once all of them are in. The decision gathers the results and says
what the session as a whole gives; it renders nothing: the pytest layer and a merge of shards (outputs/record_merge.py)
both report it through outputs/session_reports.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pytest_modelbench.gate.early_stop_pooled import settle_pooled
from pytest_modelbench.gate.evidence.pooling import PoolingStats
from pytest_modelbench.gate.pooled import PooledEntry, suite_pooled_entries
from pytest_modelbench.gate.result import STATUS_COMPARED, STATUS_ERROR, GateResult, sorted_results
from pytest_modelbench.gate.verdict import Verdict

EXIT_STATUS_FAIL = 1  # pytest's "tests failed"; syrupy's for unused baselines
# Every failure is a task in `error` (gate/integrity.py: the run, not the model): a CI job can tell "re-run" from
# "the model got worse". Past pytest's own 0-5 and the merge's refusal (4, as pytest's usage error), and odd: syrupy's
# sessionfinish ORs pytest's status (1, the failed items) into the one set here, which 6 would turn into 7.
EXIT_STATUS_INTEGRITY = 7
# The session was stopped (SIGINT, SIGTERM) before every task was judged: neither a pass nor the model's failure. Not
# pytest's 2, which it also gives for collection errors; odd with bit 2 set, so that syrupy's OR of pytest's own
# status (2 when interrupted, 1) leaves it as it is.
EXIT_STATUS_INTERRUPTED = 11
# A file the run writes at its end (a baseline's gate policy, the results JSON, a report, a run record) could not be
# written: the session's record is incomplete. Odd with bits 1 and 2 set, for the same reason.
EXIT_STATUS_WRITE_FAILED = 15
# pytest's exit statuses that say more than "a test failed" (5, no tests collected, fails nothing here)
_PYTEST_STATUSES = {2: "interrupted", 3: "internal error", 4: "usage error"}
_NAMED = 3  # node ids named in a reason before "and N more"


@dataclass(frozen=True)
class SessionOutcome:
    """Whether the session passed and, if not, why: decided once by `SessionDecision.outcome`, read by the exit status
    and by every report's headline (terminal summary, --md-report, --html-report, --results-json, --junitxml)."""

    reasons: tuple[str, ...] = ()  # why it failed; none: it passed
    integrity_only: bool = False  # every failure is a task in `error` (the run, not the model)
    interrupted: bool = False  # stopped by a signal before every task was judged: `unfinished` were not
    unfinished: tuple[str, ...] = ()
    write_failed: bool = False  # a file the run writes at its end could not be written

    @property
    def failed(self) -> bool:
        return bool(self.reasons) or self.interrupted

    @property
    def exit_status(self) -> int:
        """0 passed; EXIT_STATUS_INTEGRITY (7) when only runs failed (tasks in `error`); else EXIT_STATUS_FAIL (a
        quality failure wins over an integrity one: the model got worse whatever else broke);
        EXIT_STATUS_INTERRUPTED (11) whatever was judged before a signal stopped the session; else
        EXIT_STATUS_WRITE_FAILED (15) when a file of the run's record could not be written."""
        if self.interrupted:
            return EXIT_STATUS_INTERRUPTED
        if self.write_failed:
            return EXIT_STATUS_WRITE_FAILED
        if not self.failed:
            return 0
        return EXIT_STATUS_INTEGRITY if self.integrity_only else EXIT_STATUS_FAIL

    @property
    def status(self) -> str:
        return "interrupted" if self.interrupted else "failed" if self.failed else "passed"

    def headline(self) -> str:
        return f"gate {self.status}" + (f": {'; '.join(self.reasons)}" if self.reasons else "")

    def as_json(self) -> dict[str, Any]:
        interrupted = {"unfinished": list(self.unfinished)} if self.interrupted else {}
        return {"status": self.status, "reasons": list(self.reasons), "exit_status": self.exit_status, **interrupted}


def _named(nodeids: Sequence[str]) -> str:
    more = f" and {len(nodeids) - _NAMED} more" if len(nodeids) > _NAMED else ""
    return ", ".join(nodeids[:_NAMED]) + more


@dataclass
class SessionDecision:
    baseline_name: str
    score_only: bool = False
    results: list[GateResult] = field(default_factory=list)
    custom_tests: set[str] = field(default_factory=set)  # node ids of the tests run besides the task items
    unused: set[str] = field(default_factory=set)  # unused baselines (paths)
    deleted: list[str] = field(default_factory=list)  # unused baselines deleted under --snapshot-update
    display: Callable[[str], str] = str
    # The session's split of alpha (gate/alpha_split.py), once collection finished: each pooled suite's weight.
    pooled_weights: dict[str, float] = field(default_factory=dict)
    error_control: str = "session"
    pooled_by_merge: bool = False  # one shard of several: its suites' pooled entries are the merge's to judge
    # --early-stop: why a suite's pooled entries could not be settled (a stopped task failed to score on); fails
    pooled_problems: list[str] = field(default_factory=list)
    early_stop_verdicts: bool = False  # --early-stop-verdicts: a pooled entry settles only at its full-run verdict
    failed_tests: set[str] = field(default_factory=set)  # node ids of every test that failed in any phase
    collection_errors: list[str] = field(default_factory=list)  # node ids of the collectors that failed
    # --snapshot-update: unused baselines are deleted, not failed; a regressed pooled entry is reported and does not
    # fail (the update rewrites only the tasks out of their own band, so it could never accept a drop spread inside
    # every task's band). Not --snapshot-update-new-only, which rewrites nothing and so gates as a plain run does.
    update: bool = False
    warn_unused: bool = False  # --snapshot-warn-unused: unused baselines only warn
    pytest_status: int = 0  # pytest's exit status before the gate's own verdicts (a shard's, in a merge: the worst)
    interrupted_by: str | None = None  # the signal that stopped the session (SIGINT, SIGTERM) before it finished
    # the files of the run's record that could not be written, one line each (the pytest layer shares this list with
    # the code that writes them, so that every later report says so)
    write_failures: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # the gated tasks it stopped before judging

    @classmethod
    def under(cls, policy: Any, **session: Any) -> "SessionDecision":
        """The decision of a session run under `policy` (gate/policy.py, GatePolicy): what of the policy decides the
        outcome, taken from it the same way by every caller (the pytest layer, the merge); `session`: the rest."""
        return cls(policy.baseline_name, score_only=policy.score_only, error_control=policy.error_control,
                   early_stop_verdicts=policy.early_stop_verdicts, update=policy.update, **session)

    def pooled(self) -> list[PooledEntry]:
        """The pooled entries of every suite with a pooled family and two or more compared tasks (gate/pooled.py);
        where --early-stop left documents unscored, as early_stop_pooled.settle_pooled settles them."""
        return [entry for _, entries, _ in self._pooled_families() for entry in entries]

    def unsettled_pooled(self) -> list[str]:
        """The suites whose pooled entries --early-stop has not settled (gate/early_stop.py, "Pooled entries")."""
        return [suite for suite, _, unsettled in self._pooled_families() if unsettled]

    def replace_pooling(self, task: str, pooling: Sequence[PoolingStats]) -> None:
        """A task's pooling statistics for a pooled look of --early-stop: on the share of its documents it sees."""
        for result in self.results:
            if result.task == task:
                result.pooling = [stats.as_json() for stats in pooling]

    def _pooled_families(self) -> list[tuple[str, list[PooledEntry], list[str]]]:
        """(suite, its pooled entries, the metrics of those left unsettled) for each suite with pooled entries."""
        if self.pooled_by_merge or self.score_only:
            return []
        families = []
        for suite, weight in sorted(self.pooled_weights.items()):
            compared = [r for r in self.results if r.status == STATUS_COMPARED and r.pooling
                        and r.task.split("/", 1)[0] == suite]
            if not compared:
                continue
            entries, stats = suite_pooled_entries(suite, compared, weight, session_split=self.error_control == "session")
            regressed = {r.task for r in compared if r.verdict == Verdict.REGRESSED.value}
            entries, unsettled = settle_pooled(entries, stats, regressed, self.early_stop_verdicts)
            if entries:
                families.append((suite, entries, unsettled))
        return families

    @property
    def pooled_regressed(self) -> bool:
        """Whether a pooled entry fails the session."""
        return not self.update and any(entry.verdict is Verdict.REGRESSED for entry in self.pooled())

    def outcomes_json(self) -> dict[str, dict[str, Any]]:
        """Each gated task's outcome for --results-json, by its '<suite>/<task>' key."""
        return {result.task: result.as_json() for result in self.results}

    def pooled_json(self) -> list[dict[str, Any]]:
        """The pooled entries for --results-json."""
        return [entry.as_json() for entry in self.pooled()]

    def fails_on_unused(self) -> bool:
        return bool(self.unused) and not self.update and not self.warn_unused

    def outcome(self) -> SessionOutcome:
        """The session's pass or fail, and why: the one place it is decided. The exit status is 1 where it fails
        (pytest's own status where that says more) and every report heads with it."""
        failed_results = [r for r in self.results if r.failed]
        reasons = []
        if self.interrupted_by is not None:
            reasons.append(f"{self.interrupted_by} stopped the session before {len(self.unfinished)} gated task(s) "
                           "were judged" + (f": {_named(self.unfinished)}" if self.unfinished else "")
                           + "; what was scored is in the score cache, and a re-run scores only what is left")
        if failed_results:
            reasons.append(f"{len(failed_results)} task(s) failed: "
                           + _named([f"{r.task} ({r.outcome})" for r in sorted_results(failed_results)]))
        explained = {r.nodeid for r in failed_results}
        other_failures = sorted(self.failed_tests - explained)
        if other_failures:
            reasons.append(f"{len(other_failures)} test(s) failed: {_named(other_failures)}")
        if self.collection_errors:
            reasons.append(f"{len(self.collection_errors)} collection error(s): {_named(self.collection_errors)}")
        if self.fails_on_unused():
            reasons.append(f"{len(self.unused)} unused baseline(s)")
        if self.pooled_regressed:
            regressed = [e for e in self.pooled() if e.verdict is Verdict.REGRESSED]
            reasons.append(f"{len(regressed)} pooled entr{'y' if len(regressed) == 1 else 'ies'} regressed: "
                           + ", ".join(f"{e.suite} {e.metric}" for e in regressed))
        reasons += self.pooled_problems
        reasons += self.write_failures
        if self.pytest_status in _PYTEST_STATUSES and self.interrupted_by is None:
            reasons.append(f"pytest: {_PYTEST_STATUSES[self.pytest_status]} (exit status {self.pytest_status})")
        elif self.pytest_status == 1 and not reasons:
            reasons.append("pytest exit status 1 (a test or check failed)")
        errors = [r for r in failed_results if r.status == STATUS_ERROR]
        integrity_only = bool(errors) and len(reasons) == 1 and len(errors) == len(failed_results) \
            and not other_failures
        return SessionOutcome(tuple(reasons), integrity_only and not self.write_failures,
                              self.interrupted_by is not None, tuple(self.unfinished), bool(self.write_failures))

    def outcome_json(self) -> dict[str, Any]:
        """The session's outcome for --results-json and --junitxml."""
        return self.outcome().as_json()
