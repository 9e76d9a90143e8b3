"""Presenting gate results: the failure table (worst first), JUnit XML properties, terminal lines, markdown.

Every result travels as `item.user_properties` (so it reaches `--junitxml` and, under pytest-xdist, the
controller inside each test report); the terminal summary and `--md-report` are rebuilt from those properties.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from pytest_modelbench.gate.alpha_split import DEFAULT_WEIGHT
from pytest_modelbench.gate.baseline import BaselineRecord
from pytest_modelbench.gate.compare import Entry, TaskComparison
from pytest_modelbench.gate.noise_floor import NoiseWarning
from pytest_modelbench.gate.pooled import PooledEntry
from pytest_modelbench.gate.verdict import Verdict

if TYPE_CHECKING:
    from pytest_modelbench.gate.decision import SessionOutcome

PROPERTY_PREFIX = "modelbench.gate"
DOCUMENTS_PROPERTY = "modelbench.gate-documents"  # the most changed documents (only with --html-report)
SCORES_PROPERTY = "modelbench.gate-scores"  # a task's scores when it was scored but not compared
TABLE_HEADER = ("metric", "category", "n", "baseline", "candidate", "delta", "margin", "p-value", "MDE", "verdict")
MAX_TABLE_ROWS = 40
LEGEND = (
    "delta is oriented so that negative is worse (for an ideal-point metric: the distance from the ideal); "
    "an entry regresses when the data show it worse than the baseline by more than its margin; p-value: of "
    "\"not worse than the margin\", Holm-adjusted over the task's entries (improved entries: of \"not better than "
    "the margin\"); MDE = smallest regression the gate catches with 80% power"
)
COLUMNS_NOTE = (
    "how to read it: gate = the task's verdict against its baseline (a regression fails the task; pass, improved "
    "and inconclusive pass); detail = what moved, counted in entries (one per metric overall and per category, each "
    "compared with the baseline); alpha share = the false-block rate the task was tested at, and its share of the "
    "run's alpha (its weight over the gated tasks' total); caught at 80% = the smallest drop of each overall score "
    "that this run blocks 4 times in 5 (smaller drops may pass); false blocks = how often a model no worse than its "
    "baseline is blocked by chance"
)
SCORES_HEADER = ("metric", "category", "n", "this run", "baseline (other settings)")

# Task-level statuses, besides a comparison's verdict.
STATUS_COMPARED = "compared"
STATUS_CREATED = "created"
STATUS_UPDATED = "updated"
STATUS_MISSING = "missing"
STATUS_REBASELINE = "rebaseline-required"
STATUS_INVALID = "invalid"
STATUS_OFF = "off"
STATUS_POLICY = "policy-changed"  # --baseline-ref: the run's gate policy is not the ref's (gate/policy_file.py)


def format_number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def format_delta(value: float) -> str:
    return f"{value:+.4f}"


def format_p(value: float) -> str:
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def entry_row(entry: Entry) -> tuple[str, ...]:
    return (
        entry.metric, entry.label, str(entry.n), format_number(entry.baseline), format_number(entry.candidate),
        format_delta(entry.delta), format_number(entry.margin), format_p(entry.p_value), format_number(entry.mde),
        entry.verdict.value,
    )


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def comparison_table(entries: Sequence[Entry], max_rows: int = MAX_TABLE_ROWS) -> list[str]:
    rows = [entry_row(e) for e in entries[:max_rows]]
    lines = format_table(TABLE_HEADER, rows)
    if len(entries) > max_rows:
        rest = entries[max_rows:]
        counts = ", ".join(f"{sum(e.verdict is v for e in rest)} {v.value}" for v in Verdict if any(e.verdict is v for e in rest))
        lines.append(f"... {len(rest)} more rows ({counts})")
    return lines


def failure_message(comparison: TaskComparison, baseline_path: Any, baseline_name: str, model: str, baseline_model: str) -> str:
    regressed = comparison.regressed
    head = (
        f"task '{comparison.task}' regressed against baseline '{baseline_name}' ({baseline_path}): "
        f"{len(regressed)} of {len(comparison.entries)} entries worse by more than the margin "
        f"(candidate {model}, baseline recorded with {baseline_model})"
    )
    return "\n".join([head, "", *comparison_table(comparison.worst_first()), "", LEGEND])


def compare_hint(baseline_name: str) -> str:
    """What to do when the run's settings differ from the baseline's."""
    return (
        "To compare at these settings, record a baseline of their own from a trusted model, under another name: "
        "`pytest --snapshot-update --baseline-name=<new name>` with this run's options, then gate with "
        f"--baseline-name=<new name>. To make these settings baseline '{baseline_name}' instead, review the change "
        "and run with --snapshot-update."
    )


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


def score_rows_table(scores: Sequence[dict[str, Any]]) -> list[str]:
    rows = [
        (s["metric"], "(all)" if s["category"] is None else s["category"], str(s["n"]), format_number(s["value"]),
         "-" if s["baseline_n"] is None else f"{format_number(s['baseline'])} (n={s['baseline_n']})")
        for s in scores
    ]
    return format_table(SCORES_HEADER, rows)


def rebaseline_message(problems: Sequence[str], baseline_path: Any, baseline_name: str,
                       scores: Sequence[dict[str, Any]]) -> str:
    """The failure of a task whose baseline was recorded under other settings: the reason first (pytest's short
    summary shows the first line), this run's scores, and how to compare."""
    head = (
        f"re-baseline required: {'; '.join(problems)}. Not compared with baseline '{baseline_name}' "
        f"({baseline_path}): it was recorded under other settings, and comparing would report false regressions "
        "(the gate fails closed)."
    )
    return "\n".join([head, "", "This run's scores (not gated):", *score_rows_table(scores), "", compare_hint(baseline_name)])


# --------------------------------------------------------------------------- properties


def entry_key(entry_metric: str, category: str | None) -> str:
    return f"{PROPERTY_PREFIX}.{entry_metric}" + ("" if category is None else f"[{category}]")


def entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "metric": entry.metric, "category": entry.category, "n": entry.n, "baseline": entry.baseline,
        "candidate": entry.candidate, "delta": entry.delta, "margin": entry.margin, "p_value": entry.p_value,
        "mde": entry.mde, "standard_error": entry.standard_error, "verdict": entry.verdict.value, "test": entry.test, "direction": entry.direction,
    }


def properties(result: "GateResult") -> list[tuple[str, str]]:
    """(name, value) pairs for item.user_properties: one for the task, one per entry (JSON values)."""
    head = {
        "task": result.task, "status": result.status, "verdict": result.verdict, "baseline": result.baseline,
        "baseline_name": result.baseline_name, "note": result.note, "n_documents": result.n_documents,
        "alpha": result.alpha, "tasks": result.tasks, "weight": result.weight, "total_weight": result.total_weight,
        "baseline_provenance": result.baseline_provenance,
        "candidate_provenance": result.candidate_provenance, "baseline_ref": result.baseline_ref,
        "working_tree_differs": result.working_tree_differs, "pooling": result.pooling,
        "noise_warnings": result.noise_warnings, "noise_measured_with": result.noise_measured_with,
    }
    pairs = [(PROPERTY_PREFIX, json.dumps(head, ensure_ascii=False))]
    for entry in result.entries:
        pairs.append((entry_key(entry["metric"], entry["category"]), json.dumps(entry, ensure_ascii=False)))
    if result.changed_documents:
        pairs.append((DOCUMENTS_PROPERTY, json.dumps(result.changed_documents, ensure_ascii=False)))
    if result.scores:
        pairs.append((SCORES_PROPERTY, json.dumps(result.scores, ensure_ascii=False)))
    return pairs


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
    entries: list[dict[str, Any]] = field(default_factory=list)
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
    # category, with the stored baseline's where one could be read ({metric, category, n, value, baseline, baseline_n}).
    scores: list[dict[str, Any]] = field(default_factory=list)
    # Compared: the overall entries its suite's pooled entries pool (gate/pooled.py, PoolingStats.as_json).
    pooling: list[dict[str, Any]] = field(default_factory=list)
    # Entries whose margin is below the noise floor (gate/noise_floor.py, NoiseWarning.as_json), and how it was measured
    noise_warnings: list[dict[str, Any]] = field(default_factory=list)
    noise_measured_with: str = ""

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
    def from_properties(cls, user_properties: Iterable[tuple[str, Any]], nodeid: str = "", failed: bool = False) -> "GateResult | None":
        head, entries, documents, scores = None, [], [], []
        for name, value in user_properties:
            if name == PROPERTY_PREFIX:
                head = json.loads(value)
            elif name == DOCUMENTS_PROPERTY:
                documents = json.loads(value)
            elif name == SCORES_PROPERTY:
                scores = json.loads(value)
            elif isinstance(name, str) and name.startswith(PROPERTY_PREFIX + "."):
                entries.append(json.loads(value))
        if head is None:
            return None
        return cls(
            task=head["task"], status=head["status"], baseline=head["baseline"], baseline_name=head["baseline_name"],
            verdict=head.get("verdict"), note=head.get("note", ""), n_documents=head.get("n_documents", 0),
            entries=entries, nodeid=nodeid, failed=failed, alpha=head.get("alpha"), tasks=head.get("tasks", 1),
            weight=head.get("weight", DEFAULT_WEIGHT), total_weight=head.get("total_weight"),
            baseline_provenance=head.get("baseline_provenance"), candidate_provenance=head.get("candidate_provenance"),
            baseline_ref=head.get("baseline_ref"), working_tree_differs=head.get("working_tree_differs", False),
            changed_documents=documents, scores=scores, pooling=head.get("pooling", []),
            noise_warnings=head.get("noise_warnings", []), noise_measured_with=head.get("noise_measured_with", ""),
        )

    @property
    def outcome(self) -> str:
        """One word for tables: the verdict when compared, else the status."""
        return self.verdict if self.status == STATUS_COMPARED else self.status

    @property
    def level(self) -> float | None:
        """The false-block rate this task was tested at (alpha × weight / total_weight), when compared: its share of
        the run's bound."""
        return None if self.alpha is None else self.alpha * (self.weight / self.total_weight)  # as task_alpha's

    @property
    def alpha_share(self) -> str:
        """The level and the task's share of alpha for tables, '0.0125 (25%)'; '-' when not compared."""
        return "-" if self.level is None else f"{self.level:.3g} ({100 * self.weight / self.total_weight:.3g}%)"

    def as_json(self) -> dict[str, Any]:
        """The task's outcome in --results-json (schema: pytest_modelbench/schemas/results.schema.json)."""
        return {
            "status": self.outcome, "note": self.note, "baseline": self.baseline, "baseline_name": self.baseline_name,
            "baseline_provenance": self.baseline_provenance, "n_documents": self.n_documents, "alpha": self.alpha,
            "gated_tasks": self.tasks, "weight": self.weight, "total_weight": self.total_weight, "level": self.level,
            "entries": self.entries, "baseline_ref": self.baseline_ref,
            "working_tree_differs": self.working_tree_differs,
        }

    def entries_with(self, verdict: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["verdict"] == verdict]

    @property
    def power(self) -> str:
        """The smallest regression of each overall entry that the gate catches with 80% power."""
        return ", ".join(f"{e['metric']} {format_number(e['mde'])}" for e in self.entries if e["category"] is None)


def _entry_label(entry: dict[str, Any]) -> str:
    return entry["metric"] + ("" if entry["category"] is None else f" [{entry['category']}]")


_OUTCOME_RANK = {
    STATUS_INVALID: 0, STATUS_REBASELINE: 0, STATUS_MISSING: 0, STATUS_POLICY: 0, Verdict.REGRESSED.value: 0,
    Verdict.INCONCLUSIVE.value: 1, STATUS_UPDATED: 2, STATUS_CREATED: 2, Verdict.IMPROVED.value: 3,
    Verdict.PASS.value: 4, STATUS_OFF: 5,
}


def sorted_results(results: Iterable[GateResult]) -> list[GateResult]:
    return sorted(results, key=lambda r: (_OUTCOME_RANK.get(r.outcome, 9), r.task))


def summary_counts(results: Sequence[GateResult]) -> str:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    order = sorted(counts, key=lambda o: _OUTCOME_RANK.get(o, 9))
    return ", ".join(f"{counts[o]} {o}" for o in order)


def _noise_detail(result: GateResult) -> str:
    count = len(result.noise_warnings)
    return f"{count} margin{'' if count == 1 else 's'} below the noise floor" if count else ""


def _detail(result: GateResult) -> str:
    if result.status != STATUS_COMPARED:
        note = "; ".join(part for part in (result.note, _noise_detail(result)) if part)
        overall = [s for s in result.scores if s["category"] is None]
        if not overall:
            return note
        scores = ", ".join(f"{s['metric']} {format_number(s['value'])} (n={s['n']})" for s in overall)
        return f"{note}; this run: {scores}"
    regressed = result.entries_with(Verdict.REGRESSED.value)
    improved = result.entries_with(Verdict.IMPROVED.value)
    inconclusive = result.entries_with(Verdict.INCONCLUSIVE.value)
    parts = []
    if regressed:
        e = regressed[0]
        parts.append(f"{len(regressed)} regressed, worst {_entry_label(e)} {format_delta(e['delta'])} (p={format_p(e['p_value'])})")
    if improved:
        e = improved[-1]  # the largest improvement (entries are worst first)
        parts.append(f"{len(improved)} improved, e.g. {_entry_label(e)} {format_delta(e['delta'])} (p={format_p(e['p_value'])})")
    if inconclusive:
        parts.append(
            f"{len(inconclusive)} inconclusive (largest MDE {format_number(max(x['mde'] for x in inconclusive))})"
        )
    if not parts:
        parts.append(f"{len(result.entries)} entries within the margin")
    if result.note:
        parts.append(result.note)
    if result.noise_warnings:
        parts.append(_noise_detail(result))
    return "; ".join(parts)


def noise_lines(results: Sequence[GateResult]) -> list[str]:
    """The entries whose margin is below the pipeline's measured noise (gate/noise_floor.py), by task."""
    lines = []
    for result in results:
        if not result.noise_warnings:
            continue
        lines += ["", f"{result.task}: margins below the pipeline's own noise (measured by scoring the baseline's "
                      f"checkpoint again with {result.noise_measured_with}); verdicts unchanged"]
        lines += [f"  noise floor   {NoiseWarning.from_json(raw).describe()}" for raw in result.noise_warnings]
    return lines


def false_block_bound(results: Sequence[GateResult]) -> float | None:
    """The run's false-block bound when nothing regressed past its margin: the sum of the compared tasks' levels
    (Bonferroni: it holds whatever alpha each task was given and whatever the dependence between tasks); None when
    no task was compared."""
    levels = [r.level for r in results if r.level is not None]
    return min(1.0, sum(levels)) if levels else None


def _levels_text(compared: Sequence[GateResult], rate: Callable[[GateResult], float]) -> str:
    """`rate` of each task, the most common one 'per task' and the others by task: '0.0125 per task, 0.125 for x'."""
    by_value: dict[float, list[str]] = {}
    for result in compared:
        by_value.setdefault(rate(result), []).append(result.task)
    common = max(by_value, key=lambda value: len(by_value[value]))
    others = [
        f"{value:.3g} for {', '.join(sorted(tasks))}" for value, tasks in sorted(by_value.items()) if value != common
    ]
    return ", ".join([f"{common:.3g} per task", *others])


def _weights_text(compared: Sequence[GateResult]) -> str:
    """The tasks' weights when they differ, the most common one as 'others': 'weighted: bias/crows 3, others 1'."""
    weights = {result.task: result.weight for result in compared}
    values = list(weights.values())
    if len(set(values)) < 2:
        return ""
    usual = max(set(values), key=lambda weight: (values.count(weight), weight == DEFAULT_WEIGHT))
    named = ", ".join(f"{task} {weight:g}" for task, weight in sorted(weights.items()) if weight != usual)
    return f"weighted: {named}, others {usual:g}"


def error_rate_line(results: Sequence[GateResult], pooled: Sequence[PooledEntry] = ()) -> str | None:
    """What the gate's blocks are worth: the false-block bound of the run (its tasks' and its pooled families'
    levels summed) and how it is shared."""
    compared = [r for r in results if r.alpha is not None]
    bound = false_block_bound(compared)
    if bound is None:
        return None
    pooled_levels = {e.suite: e.level for e in pooled}
    bound = min(1.0, bound + sum(pooled_levels.values()))
    pooled_text = "pooled: " + ", ".join(f"{suite} {level:.3g}" for suite, level in sorted(pooled_levels.items()))
    if all(r.tasks == 1 for r in compared) and len(results) > 1:
        unused = "; the tasks' weights are not used" if any(r.weight != DEFAULT_WEIGHT for r in compared) else ""
        return (
            f"false blocks: at most {_levels_text(compared, lambda r: r.alpha)} when nothing regressed past its "
            f"margin (--gate-error-control=task{unused}){'; ' + pooled_text if pooled_levels else ''}; up to "
            f"{bound:.4g} for the {len(compared)} compared task(s)"
            f"{f' and {len(pooled_levels)} pooled suite(s)' if pooled_levels else ''} together"
        )
    gated = max(r.tasks for r in compared)
    tasks = f"{gated} gated task(s)" if len(compared) == gated else f"{len(compared)} compared of {gated} gated tasks"
    shares = "; ".join(text for text in (_levels_text(compared, lambda r: r.level), _weights_text(compared),
                                         pooled_text if pooled_levels else "") if text)
    return (f"false blocks: at most {bound:.4g} for the {tasks} together when nothing regressed past its margin "
            f"({shares})")


def baseline_ref_lines(results: Sequence[GateResult]) -> list[str]:
    """With --baseline-ref: where the baselines came from, and each baseline file the working tree changed."""
    refs = sorted({r.baseline_ref for r in results if r.baseline_ref})
    if not refs:
        return []
    lines = [f"baselines read from git ref {', '.join(refs)}, not from the working tree"]
    lines += [
        f"working tree differs from {r.baseline_ref}: {r.baseline} (task {r.task}); the gate used the ref's file"
        for r in sorted(results, key=lambda r: r.baseline) if r.working_tree_differs
    ]
    return lines


def count_line(results: Sequence[GateResult], custom_tests: int = 0) -> str:
    """How many task items the gate saw and how they ended; the custom tests pytest counted besides them."""
    line = f"{len(results)} task(s): {summary_counts(results)}"
    if custom_tests:
        line += f"; {custom_tests} custom test(s) besides, not gated (pytest's totals count both)"
    return line


def terminal_lines(results: Sequence[GateResult], max_entries: int = 8, custom_tests: int = 0,
                   pooled: Sequence[PooledEntry] = ()) -> list[str]:
    results = sorted_results(results)
    lines = [count_line(results, custom_tests)]
    rate = error_rate_line(results, pooled)
    if rate:
        lines.append(rate)
    lines += baseline_ref_lines(results)
    rows = [(r.task, r.outcome, _detail(r), r.alpha_share, r.power) for r in results]
    lines += format_table(("task", "gate", "detail", "alpha share", "caught at 80%"), rows)
    lines.append(COLUMNS_NOTE)
    lines += noise_lines(results)
    rebaselines = [r for r in results if r.status == STATUS_REBASELINE]
    if rebaselines:
        lines += ["", f"{len(rebaselines)} task(s) not compared: their settings differ from the baseline's. "
                  + compare_hint(rebaselines[0].baseline_name)]
    for result in results:
        notable = [e for e in result.entries if e["verdict"] in (Verdict.INCONCLUSIVE.value, Verdict.IMPROVED.value)]
        if result.status != STATUS_COMPARED or not notable:
            continue
        lines.append("")
        lines.append(f"{result.task}: entries to look at")
        for e in notable[:max_entries]:
            if e["verdict"] == Verdict.INCONCLUSIVE.value:
                lines.append(
                    f"  inconclusive  {_entry_label(e)}: n={e['n']}, delta {format_delta(e['delta'])}, "
                    f"margin {format_number(e['margin'])}; a regression smaller than {format_number(e['mde'])} "
                    "would likely go unseen (passes)"
                )
            else:
                lines.append(
                    f"  improved      {_entry_label(e)}: {format_number(e['baseline'])} -> "
                    f"{format_number(e['candidate'])} (p={format_p(e['p_value'])}); "
                    "run --snapshot-update to raise the baseline"
                )
        if len(notable) > max_entries:
            lines.append(f"  ... {len(notable) - max_entries} more")
    return lines


POOLED_HEADER = ("suite (pooled)", "metric", "tasks", "n", "baseline", "candidate", "delta", "margin", "p-value",
                 "MDE", "level", "verdict")
POOLED_NOTE = (
    "pooled: the suite's metric over the paired documents of all its compared tasks (a document several tasks hold "
    "counted once, related documents tested as one cluster), against a margin of half the tasks' own: it sees a drop "
    "spread over every task, each inside its margin; level = its share of the run's alpha"
)

POOLED_EARLY_STOP_NOTE = (
    "n 'k of N': --early-stop scored k of the pooled tasks' N documents; the verdict is the full run's where they "
    "settle it, else theirs and never regressed (an early stop can miss a regression, never add a block)"
)


def pooled_rows(entries: Sequence[PooledEntry]) -> list[tuple[str, ...]]:
    return [
        (e.suite, e.metric, str(len(e.tasks)), f"{e.n:,} of {e.n + e.unscored:,}" if e.unscored else str(e.n),
         format_number(e.baseline), format_number(e.candidate),
         format_delta(e.delta), format_number(e.margin), format_p(e.p_value), format_number(e.mde),
         f"{e.level:.3g}", e.verdict.value)
        for e in entries
    ]


def pooled_lines(entries: Sequence[PooledEntry], by_merge: Sequence[str] = (), updating: bool = False,
                 problems: Sequence[str] = ()) -> list[str]:
    """The summary's lines for the suites' pooled entries; `by_merge`: suites whose pooled entries this shard leaves
    to the merge; `updating`: --snapshot-update, under which a regressed pooled entry does not fail; `problems`:
    why --early-stop could not settle a suite's pooled entries (the session fails)."""
    lines = []
    if by_merge:
        lines += ["", f"pooled entries of {', '.join(by_merge)}: judged when the shards' run records are merged "
                      "(python -m pytest_modelbench merge)"]
    if entries:
        lines += ["", *format_table(POOLED_HEADER, pooled_rows(entries)), POOLED_NOTE]
        if any(e.unscored for e in entries):
            lines.append(POOLED_EARLY_STOP_NOTE)
        regressed = [e for e in entries if e.verdict is Verdict.REGRESSED]
        named = f"{len(regressed)} pooled entr{'y' if len(regressed) == 1 else 'ies'} regressed " \
                f"({', '.join(f'{e.suite} {e.metric}' for e in regressed)})"
        if regressed and updating:
            suites = sorted({e.suite for e in regressed})
            lines.append(f"{named}: not failing under --snapshot-update, which re-records only tasks outside their own "
                         f"band; to accept the new level of {', '.join(suites)}, remove its baselines and record them "
                         "again")
        elif regressed:
            lines.append(f"the gate fails: {named}")
    lines += [f"the gate fails: {problem}" for problem in problems]
    return lines


_MD_SPECIAL = re.compile(r"[\\`*\[\]|!#~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_HTML_SPECIAL = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _md_escape(text: Any) -> str:
    """Text from task files and data (names, categories, paths) as literal markdown: no HTML, link, emphasis or
    table cell boundary passes through to a rendered pull-request comment. Intraword underscores stay as they are
    (task names read `crows_pairs_english`), since they start no emphasis."""
    text = re.sub(r"\s*[\r\n]+\s*", " ", str(text))
    text = "".join(_HTML_SPECIAL.get(char, char) for char in text)
    return _MD_SPECIAL.sub(lambda match: "\\" + match.group(0), text)


def markdown(results: Sequence[GateResult], baseline_name: str, outcome: SessionOutcome, unused: Sequence[str] = (),
             pooled: Sequence[PooledEntry] = ()) -> str:
    """`outcome`: the session's (gate/decision.py), which its exit status says too."""
    results = sorted_results(results)
    tasks = f"{len(results)} task(s): {summary_counts(results)}" if results else "no modelbench task ran"
    lines = ["## pytest-modelbench baseline gate", "",
             f"Baseline **{_md_escape(baseline_name)}** · gate **{outcome.status}** · {tasks}"]
    if outcome.reasons:
        lines += ["", *(f"- {_md_escape(reason)}" for reason in outcome.reasons)]
    if results:
        rate = error_rate_line(results, pooled)
        if rate:
            lines += ["", _md_escape(rate)]
        ref_lines = [_md_escape(line) for line in baseline_ref_lines(results)]
        if ref_lines:
            lines += ["", ref_lines[0], "", *(f"- {line}" for line in ref_lines[1:])]
        lines += ["", "| task | gate | detail | alpha share | caught at 80% |", "|---|---|---|---|---|"]
        lines += [
            "| " + " | ".join(_md_escape(c) for c in (r.task, r.outcome, _detail(r), r.alpha_share, r.power)) + " |"
            for r in results
        ]
        lines += ["", _md_escape(COLUMNS_NOTE)]
        if pooled:
            lines += ["", "| " + " | ".join(POOLED_HEADER) + " |", "|" + "---|" * len(POOLED_HEADER)]
            lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in pooled_rows(pooled)]
            lines += ["", _md_escape(POOLED_NOTE)]
        for result in results:
            if not result.entries or result.verdict == Verdict.PASS.value:
                continue
            heading = result.verdict if result.status == STATUS_COMPARED else f"{result.verdict}, {result.status}"
            lines += ["", f"### {_md_escape(result.task)}: {heading}", ""]
            lines.append("| " + " | ".join(TABLE_HEADER) + " |")
            lines.append("|" + "---|" * len(TABLE_HEADER))
            for e in result.entries[:MAX_TABLE_ROWS]:
                cells = (
                    e["metric"], "(all)" if e["category"] is None else e["category"], e["n"],
                    format_number(e["baseline"]), format_number(e["candidate"]), format_delta(e["delta"]),
                    format_number(e["margin"]), format_p(e["p_value"]), format_number(e["mde"]),
                )
                verdict = _md_escape(e["verdict"])
                verdict = f"**{verdict}**" if e["verdict"] == Verdict.REGRESSED.value else verdict
                lines.append("| " + " | ".join([*(_md_escape(c) for c in cells), verdict]) + " |")
            if len(result.entries) > MAX_TABLE_ROWS:
                lines.append(f"\n... {len(result.entries) - MAX_TABLE_ROWS} more rows")
        lines += ["", f"<sub>{LEGEND}</sub>"]
    if unused:
        lines += ["", f"Unused baselines ({len(unused)}): " + ", ".join(_md_escape(u) for u in unused)]
    return "\n".join(lines) + "\n"
