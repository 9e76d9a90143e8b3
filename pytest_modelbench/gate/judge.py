"""Judging one evaluated task against its stored baseline: the candidate record, the comparison, the outcome.

`judge_task` never raises for a gate outcome: it returns the task's `GateResult` and, when the task must fail, why
(`Judgement.failure`): a `Regression` (the comparison whose table the failure shows), a `RebaselineRequired` (what
differs, and this run's scores) or a `BaselineProblem` (a missing or corrupt baseline, in one line). The pytest
layer fails the task with the error outputs/failure_messages.py renders from it. Writing a baseline is the caller's
(`persist`, the pytest layer's --snapshot-update through syrupy); the judgement says what was written.

Outcomes (without --score-only):
  over its integrity limits              → `error` (the run, not the model; gate/integrity.py): fails with the counts
                                           and a few documents, judges nothing and writes nothing.
  PASS, IMPROVED, INCONCLUSIVE entries   → passes; improvements and inconclusive entries (with their minimum
                                           detectable effect) are reported, never failed on.
  any REGRESSED entry                    → fails with the category table, worst first.
  baseline missing                       → fails ("no baseline ..."), as syrupy does for a missing snapshot.
  baseline corrupt / hand-edited         → fails with an error naming the file; the file is left untouched.
  baseline not comparable                → fails with "re-baseline required", what changed, this run's scores
                                           and how to compare (another --baseline-name, or --snapshot-update).
With --snapshot-update the last three write the candidate's record instead, saying its anchors were reset (and the
task passes); a regressed or improved baseline is re-recorded with per-entry references (gate/ratchet.py): improved
entries raised, entries inside their band kept at their anchors, a regression lowered only where --accept-regression
names it, and a regression no acceptance names fails the task and writes nothing. A baseline whose entries all stay
inside the band is never rewritten. --snapshot-update-new-only writes missing baselines only. Nothing is written
from a run that left a document unscored (the task is `error`); a baseline not rewritten is judged as in a plain run.
--snapshot-update --noise-floor scores the task a second time (the runner's second backend), stores the noise floor
(gate/noise_floor.py) in the record and rewrites every baseline; a stored noise floor above an entry's margin is a
warning (`Judgement.warning`), never a failure. The candidate record's provenance is gate/provenance.py's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pytest_modelbench.gate.alpha_split import AlphaSplit
from pytest_modelbench.gate.baseline import (
    BaselineRecord, comparability_problems, rebaseline_problem, record_from_evaluation, with_clusters,
)
from pytest_modelbench.gate.baseline_file import dumps, parse_or_problem
from pytest_modelbench.gate.changed_documents import most_changed
from pytest_modelbench.gate.compare import TaskComparison, compare
from pytest_modelbench.gate.early_stop import EarlyStop, restricted
from pytest_modelbench.gate.integrity import (
    TaskIntegrity, comparable_candidate, examples, paired_baseline, recording_problem, run_problems, why_invalid,
)
from pytest_modelbench.gate.noise_floor import NoiseWarning, below_noise, binary_metrics, measure, warning_text
from pytest_modelbench.gate.policy import GatePolicy
from pytest_modelbench.gate.provenance import provenance, stored_provenance
from pytest_modelbench.gate.ratchet import RatchetUpdate, ratcheted, reset_record
from pytest_modelbench.gate.result import (
    STATUS_CREATED,
    STATUS_INVALID,
    STATUS_MISSING,
    STATUS_OFF,
    STATUS_REBASELINE,
    STATUS_UPDATED,
    GateResult,
    score_rows,
)
from pytest_modelbench.gate.storage import BaselineStore
from pytest_modelbench.tasks.identity import TaskId


# (baseline path, candidate text, stored text, outcome) → whether the candidate's record was written
Persist = Callable[[Path, str, "str | None", "GateOutcome | None"], bool]
# --noise-floor: the task scored a second time by the second backend → (its evaluation, how it was scored)
Rescore = Callable[[], "tuple[Any, str]"]


@dataclass(frozen=True)
class Regression:
    """A task with a regressed entry: its comparison, and what the failure names."""

    comparison: TaskComparison
    baseline_path: str
    baseline_name: str
    model: str
    baseline_model: str
    early_stop_note: str | None = None  # --early-stop: how the task was settled on the documents scored
    invalid_note: str | None = None  # the invalid_output entry regressed: how many answers no filter could parse


@dataclass(frozen=True)
class RebaselineRequired:
    """A task whose baseline was recorded under other settings: what differs, and this run's scores."""

    problems: tuple[str, ...]
    baseline_path: str
    baseline_name: str
    scores: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class BaselineProblem:
    """A task with no usable baseline (missing, corrupt, hand-edited): one line naming the file."""

    message: str


@dataclass(frozen=True)
class IntegrityFailure:
    """A task whose run is over its integrity limits (gate/integrity.py): why, what was counted, a few documents."""

    task: str
    problems: tuple[str, ...]
    summary: str
    examples: tuple[str, ...]


TaskFailure = Regression | RebaselineRequired | BaselineProblem | IntegrityFailure


@dataclass
class Judgement:
    """A task's judgement: its gate result and why the task fails, if it does, and what it warns with (an entry's
    verdict is verdict.EntryVerdict)."""

    result: GateResult
    failure: TaskFailure | None = None
    warning: str | None = None  # entries whose margin is below the measured noise floor (gate/noise_floor.py)
    # The candidate's record as the store writes it (dumps), when the task was scored in full, and its declared
    # clusters (which the text does not carry): the evidence a run record carries, from which a merge of shards
    # recomputes the task's result (gate/rejudge.py)
    candidate_text: str | None = None
    candidate_clusters: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class GateOutcome:
    """What the comparator found: a comparison, or the problem that prevents one."""

    comparison: TaskComparison | None
    problem: str | None = None
    kind: str = ""  # "invalid" (stored file unusable) | "rebaseline" (not comparable) | ""
    baseline: BaselineRecord | None = None  # the stored record, when compared or not comparable
    # the candidate's record as compared (without an invalid_output entry its baseline does not have); None: as given
    candidate: BaselineRecord | None = None

    def holds(self, *, include_improvements: bool) -> bool:
        """The stored baseline still describes the candidate (no rewrite needed)."""
        return self.comparison is not None and not self.comparison.out_of_band(
            include_improvements=include_improvements
        )


def gate_texts(
    candidate_text: str, baseline_text: str, documents: Sequence[Any] | None = None,
    aggregates: Mapping[str, Any] | None = None, unscored_keys: Sequence[str] = (),
    clusters: Sequence[str | None] = (),
) -> GateOutcome:
    """Parse both serialized records and apply the gate with the candidate's tolerance. Never raises for bad input.

    `documents` (the candidate's DocumentRequests) are needed by metrics with their own aggregate (StereoSet);
    `aggregates`: the scored metrics' aggregates by name (compare()).
    Without them such a record is not compared at all (the outcome says why): a comparison never leaves an entry out.
    `unscored_keys`: the documents the run could not score (within its integrity limits), left out of the baseline's
    side too (gate/integrity.py). `clusters`: the candidate's declared clusters, which its text does not carry.
    """
    candidate, problem = parse_or_problem(candidate_text)
    if candidate is None:
        return GateOutcome(None, f"the candidate record is not valid: {problem}", "invalid")
    candidate = with_clusters(candidate, clusters)
    baseline, problem = parse_or_problem(baseline_text)
    if baseline is None:
        return GateOutcome(None, problem, "invalid")
    baseline = paired_baseline(baseline, candidate, unscored_keys)
    candidate = comparable_candidate(baseline, candidate)
    problem = rebaseline_problem(baseline, candidate)
    if problem is not None:
        return GateOutcome(None, problem, "rebaseline", baseline=baseline)
    aggregated = [m.name for m in candidate.metrics if m.aggregate]
    if aggregated and documents is None:
        return GateOutcome(
            None, f"metrics {', '.join(aggregated)} are aggregates over the task's documents and can only be compared "
            "in the run that scored them", "invalid",
        )
    return GateOutcome(compare(baseline, candidate, candidate.tolerance, documents, aggregates),
                       baseline=baseline, candidate=candidate)


def candidate_record(identity: TaskId, evaluation: Any, runner: Any, *, policy: GatePolicy,
                     split: AlphaSplit) -> BaselineRecord:
    """The record this run would store for the task, from its evaluation."""
    return record_from_evaluation(
        evaluation, suite=identity.suite, baseline_name=policy.baseline_name,
        provenance=provenance(evaluation, runner),
        tolerance=policy.tolerance(evaluation.prepared.config, split, identity.key, evaluation.scores.metrics),
    )


def early_stop_for(identity: TaskId, runner: Any, *, policy: GatePolicy, store: BaselineStore,
                   split: AlphaSplit, one_process: bool) -> EarlyStop | None:
    """The task's early stopping (--early-stop, gate/early_stop.py) against its stored baseline; None when there is
    no readable baseline to look at: the task is then scored in full and its judgement says what is wrong.
    `one_process`: every task of the session runs here (no xdist worker, no shard), so a task of a suite with pooled
    entries may stop on its own verdict and score on later for them (EarlyStop's "suite")."""
    stored_text, _ = store.read(store.path(identity))
    baseline = parse_or_problem(stored_text)[0] if stored_text is not None else None
    if baseline is None:
        return None
    return EarlyStop(identity.key, baseline,
                     lambda evaluation: comparable_candidate(
                         baseline, candidate_record(identity, evaluation, runner, policy=policy, split=split)),
                     lambda evaluation: run_problems(evaluation, policy.overrides, recording=policy.noise_floor),
                     pooled=None if identity.suite not in split.pooled else "suite" if one_process else "task",
                     full_run_verdicts=policy.early_stop_verdicts)


def judge_task(identity: TaskId, evaluation: Any, runner: Any, *, policy: GatePolicy, store: BaselineStore,
               split: AlphaSplit, persist: Persist, changed_documents: bool = False,
               rescore: Rescore | None = None, early_stop: EarlyStop | None = None) -> Judgement:
    """Gate one evaluated task (see the module docstring for the outcomes). `split`: how the session's alpha is
    shared; `changed_documents`: list the most changed documents (for the HTML report); `rescore` (--noise-floor,
    with --snapshot-update): the task scored again by the second backend, whose comparison with this scoring is stored
    in the record as its noise floor (gate/noise_floor.py). Entries whose margin is below the noise floor (the stored
    baseline's, or the one just measured) are named in the result and in `Judgement.warning`. `early_stop`
    (--early-stop): the task's early stopping, whose settlement (when it stopped) is the task's comparison, on the
    documents it scored."""
    integrity: TaskIntegrity | None = getattr(evaluation, "integrity", None)
    counted = None if integrity is None else integrity.as_json()
    common = {"task": identity.key, "baseline": store.display(store.path(identity)),
              "baseline_name": policy.baseline_name, "integrity": counted}
    # only --noise-floor needs every document scored here: it re-records every baseline from a second scoring of each
    # (a run about to write one baseline is checked where it writes, `_judge`); --score-only keeps the limits too
    problems = run_problems(evaluation, policy.overrides, recording=policy.noise_floor)
    if problems:
        return _run_error(identity, integrity, problems, **common)
    if policy.score_only:
        return Judgement(GateResult(status=STATUS_OFF, note="--score-only: no gate ran", **common))
    candidate = candidate_record(identity, evaluation, runner, policy=policy, split=split)
    aggregates = evaluation.scores.aggregates()
    measured: TaskComparison | None = None
    if rescore is not None:
        second_evaluation, measured_with = rescore()
        second = record_from_evaluation(second_evaluation, suite=identity.suite, baseline_name=policy.baseline_name,
                                        provenance=candidate.provenance, tolerance=candidate.tolerance)
        floor, measured = measure(candidate, second, measured_with=measured_with,
                                  documents=second_evaluation.prepared.documents, aggregates=aggregates)
        candidate = dataclasses.replace(candidate, noise_floor=floor)
    stopped = early_stop if early_stop is not None and early_stop.settlement is not None else None
    judgement, outcome, written = _judge(identity, evaluation, candidate, aggregates, policy=policy, store=store,
                                         persist=persist, changed_documents=changed_documents, stopped=stopped)
    # The noise floor a warning is judged against: the one just written (its margins: this record's, which the next
    # gate applies), else the stored baseline's (the margins the gate just used).
    warnings: list[NoiseWarning] = []
    if measured is not None and written and candidate.noise_floor is not None:
        floor = candidate.noise_floor
        warnings = below_noise(measured.entries, floor, binary_metrics(candidate))
    elif outcome is not None and outcome.comparison is not None and outcome.baseline is not None \
            and outcome.baseline.noise_floor is not None:
        floor = outcome.baseline.noise_floor
        warnings = below_noise(outcome.comparison.entries, floor, binary_metrics(outcome.baseline))
    judgement.result.integrity = counted
    _say_why_invalid(judgement, counted)
    if warnings:
        judgement.result.noise_warnings = [w.as_json() for w in warnings]
        judgement.result.noise_measured_with = floor.measured_with
        judgement.warning = warning_text(identity.key, warnings, floor.measured_with)
    return judgement


def _run_error(identity: TaskId, run: TaskIntegrity, problems: Sequence[str], **common: Any) -> Judgement:
    """The run, not the model: nothing of the task's quality is judged, nothing written."""
    return Judgement(GateResult.over_integrity_limits(problems, run.scored, **common),
                     IntegrityFailure(identity.key, tuple(problems), run.summary(), tuple(examples(run))))


def _say_why_invalid(judgement: Judgement, counted: Mapping[str, Any] | None) -> None:
    """A regressed invalid_output entry's failure and note say how many answers no filter could parse, with one."""
    failure = judgement.failure
    note = why_invalid(failure.comparison.regressed, counted) if isinstance(failure, Regression) else None
    if note is None:
        return
    judgement.failure = dataclasses.replace(failure, invalid_note=note)
    judgement.result.note = "; ".join(filter(None, [judgement.result.note, note]))


def _judge(identity: TaskId, evaluation: Any, candidate: BaselineRecord, aggregates: Mapping[str, Any], *,
           policy: GatePolicy, store: BaselineStore, persist: Persist, changed_documents: bool,
           stopped: EarlyStop | None) -> tuple[Judgement, GateOutcome | None, bool]:
    """The candidate record against the stored baseline: the judgement, the gate's outcome (None: no baseline) and
    whether the candidate's record was written. `stopped`: an early stop that settled the task: the outcome is its
    settlement's comparison, on the documents scored."""
    path = store.path(identity)
    shown = store.display(path)
    integrity: TaskIntegrity | None = getattr(evaluation, "integrity", None)
    common: dict[str, Any] = {"task": identity.key, "baseline": shown, "baseline_name": policy.baseline_name}
    candidate_text = dumps(candidate)
    stored_text, common["working_tree_differs"] = store.read(path)
    common["baseline_provenance"] = stored_provenance(stored_text)
    common["candidate_provenance"] = dataclasses.asdict(candidate.provenance)
    common["baseline_ref"] = None if policy.baseline_ref is None else policy.baseline_ref.ref
    if stopped is not None:
        outcome = GateOutcome(stopped.settlement.comparison,
                              baseline=restricted(stopped.baseline, candidate.doc_keys))
        common["note"] = stopped.settlement.note
    else:
        unscored = getattr(integrity, "unscored_keys", ())
        outcome = (gate_texts(candidate_text, stored_text, evaluation.prepared.documents, aggregates, unscored,
                              candidate.doc_clusters)
                   if stored_text is not None else None)
    compared = candidate if outcome is None or outcome.candidate is None else outcome.candidate
    update = _update(identity, compared, outcome, policy) if stored_text is not None and stopped is None else None
    writes = policy.writes if stored_text is None else update is not None and update.record is not None
    if writes and integrity is not None and integrity.unscored:
        return _run_error(identity, integrity, [recording_problem(integrity)], task=identity.key, baseline=shown,
                          baseline_name=policy.baseline_name), None, False
    if update is not None and update.record is None:
        written = False  # an unaccepted regression: the baseline stays as it was, every reference with it
    else:
        written = persist(path, candidate_text if update is None else dumps(update.record), stored_text, outcome)
    judgement = _decide(candidate, outcome, written, evaluation, common, path, shown, policy, changed_documents)
    if update is not None and (written or update.blocked):
        judgement.result.note = "; ".join([judgement.result.note, *_blocked_note(update)]).lstrip("; ")
        judgement.result.references = list(update.lines) if written else []
    if stopped is None:
        judgement.candidate_text, judgement.candidate_clusters = candidate_text, candidate.doc_clusters
    if stopped is not None and isinstance(judgement.failure, Regression):
        judgement.failure = dataclasses.replace(judgement.failure, early_stop_note=stopped.settlement.note)
    return judgement, outcome, written


def _update(identity: TaskId, candidate: BaselineRecord, outcome: GateOutcome | None,
            policy: GatePolicy) -> RatchetUpdate | None:
    """Under --snapshot-update, what the stored baseline becomes (gate/ratchet.py): the compared references
    ratcheted, or a re-baseline's record that says its anchors were reset; None: the candidate's record as it is."""
    if not policy.update or outcome is None:
        return None
    when = candidate.provenance.created
    if outcome.comparison is None:
        why = _first_clause(outcome.problem)
        return RatchetUpdate(reset_record(candidate, when=when, why=why), (),
                             ("every anchor reset (recorded in the baseline)",))
    if outcome.baseline is None or not (outcome.comparison.out_of_band(include_improvements=True)
                                        or policy.noise_floor):
        return None
    return ratcheted(outcome.baseline, candidate, outcome.comparison, policy.accepted, task=identity.key, when=when,
                     why=policy.accept_reason)


def _blocked_note(update: RatchetUpdate) -> list[str]:
    if not update.blocked:
        return []
    named = ", ".join(f"{e.metric} [{e.label}]" for e in update.blocked)
    return [f"not re-recorded: regressed entries no --accept-regression names: {named} (the baseline, every "
            "reference in it, is left as it was)"]


def _decide(candidate: BaselineRecord, outcome: GateOutcome | None, written: bool, evaluation: Any,
            common: dict[str, Any], path: Path, shown: str, policy: GatePolicy, changed_documents: bool) -> Judgement:
    """The task's judgement from the gate's outcome and whether the candidate's record was written."""
    task = evaluation.prepared.config.task
    with_floor = " with its noise floor" if written and candidate.noise_floor is not None else ""
    if outcome is None or outcome.comparison is None:  # scored but not compared: the report shows the scores
        common["scores"] = score_rows(candidate, None if outcome is None else outcome.baseline)

    if outcome is None:
        if written:
            return Judgement(GateResult(status=STATUS_CREATED, note=f"baseline written to {shown}{with_floor}",
                                        **common))
        at_ref = "" if policy.baseline_ref is None else f" at git ref {policy.baseline_ref.ref}"
        return Judgement(
            GateResult(status=STATUS_MISSING, note=f"no baseline{at_ref}", **common),
            BaselineProblem(f"{path}: no baseline '{policy.baseline_name}' for task '{task}'{at_ref}; record one "
                            "from a trusted model with pytest --snapshot-update"),
        )
    if outcome.comparison is None:
        if written:
            return Judgement(GateResult(status=STATUS_UPDATED,
                                        note=f"re-recorded{with_floor} ({_first_clause(outcome.problem)})", **common))
        if outcome.kind == "rebaseline" and outcome.baseline is not None:
            problems = comparability_problems(outcome.baseline, candidate)
            return Judgement(
                GateResult(status=STATUS_REBASELINE, note=_first_clause(outcome.problem), **common),
                RebaselineRequired(tuple(problems), shown, policy.baseline_name, tuple(common["scores"])),
            )
        return Judgement(GateResult(status=STATUS_INVALID, note=_first_clause(outcome.problem), **common),
                         BaselineProblem(f"{path}: {outcome.problem}"))

    comparison = outcome.comparison
    result = GateResult.from_comparison(comparison, **common)
    if changed_documents and outcome.baseline is not None:
        result.changed_documents = most_changed(outcome.baseline, candidate, evaluation.prepared.documents)
    if written:
        result.status = STATUS_UPDATED
        result.note = (f"re-recorded{with_floor}: {len(comparison.regressed)} regressed, {len(comparison.improved)} "
                       "improved entries")
        return Judgement(result)
    if not comparison.regressed:
        return Judgement(result)
    stored_model = str((common["baseline_provenance"] or {}).get("model", "?"))
    return Judgement(result, Regression(comparison, shown, policy.baseline_name, candidate.provenance.model,
                                        stored_model))


def _first_clause(problem: str | None) -> str:
    text = str(problem or "")
    return text.split(". ")[0].split("; restore")[0]
