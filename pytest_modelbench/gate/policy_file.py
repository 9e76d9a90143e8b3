"""The gate policy as a recorded file beside the baselines, `<baselines dir>/<name>/gate-policy.json`, so that
--baseline-ref protects the whole gate and not only the baseline numbers.

A session's effective policy (`session_policy`) is everything besides the scores that decides its verdicts: per gated
item, its YAML `modelbench.gate` block as parsed (every key of it, so a key added to the block is covered without a
change here) and the tolerance the judge applies (the margin of each metric, alpha, the item's weight and the total
weight alpha is shared by, the number of tasks sharing it); the error control; the --gate-* options given; each
suite's pooled family (its weight and margin share). Its `tasks` are the session's task set. It depends on the task
YAMLs, the command line, the ini and the plugin's own defaults, never on the scores, so it is known once collection
finishes.

The file holds one entry per session, keyed by the suites the session gates (`session_key`): one baseline name may
serve several sessions (the shipped `default` baselines are gated as `suites/bias`, `suites/arc_gen`, ...).
--snapshot-update writes the session's entry (`recorded_text`). With --baseline-ref the run's policy is compared with
the entry recorded at the ref (`check_at_ref`): any difference, or no entry, fails the session's gated items before
anything is scored, naming what changed; when they agree the judge applies the tolerances read from the ref.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable, Mapping

from pytest_modelbench.errors import BaselineError
from pytest_modelbench.gate import pooled
from pytest_modelbench.gate.alpha_split import AlphaSplit
from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.policy import TOLERANCE_OPTIONS, GatePolicy
from pytest_modelbench.metrics.registry import Margin

FILE_NAME = "gate-policy.json"
FORMAT = "pytest-modelbench-gate-policy/1"
MAX_LINES = 12  # changes listed in a failure message; the rest are counted


class GatePolicyChanged(BaselineError):
    """The run's gate policy is not the one recorded at --baseline-ref (or none is recorded there); `note`: the
    gist, for a report's one-line detail."""

    def __init__(self, message: str, note: str):
        super().__init__(message)
        self.note = note


def session_key(task_keys: Iterable[str]) -> str:
    """The entry of a session gating these '<suite>/<task>' keys: its suites, sorted, comma-separated."""
    return ", ".join(sorted({key.split("/", 1)[0] for key in task_keys}))


def session_policy(policy: GatePolicy, split: AlphaSplit, items: Mapping[str, tuple[Any, Tolerance]]) -> dict[str, Any]:
    """The effective policy of one session as JSON. `items`: each gated item's key → (its YAML gate block as parsed,
    the tolerance the judge applies to it). Reused by a merge to check that its shards ran under one policy."""
    options = {option: policy.overrides[key] for option, key in TOLERANCE_OPTIONS.items() if key in policy.overrides}
    return {
        "error_control": policy.error_control,
        "gate_options": dict(sorted(options.items())),
        "pooled": {suite: {"weight": weight, "margin_share": pooled.MARGIN_SHARE}
                   for suite, weight in sorted(split.pooled.items())},
        "tasks": {key: {"gate_block": _plain(block), "tolerance": tolerance_json(tolerance)}
                  for key, (block, tolerance) in sorted(items.items())},
    }


def tolerance_json(tolerance: Tolerance) -> dict[str, Any]:
    """As a baseline file's `gate` block."""
    return {
        "absolute_margin": tolerance.absolute_margin, "relative_margin": tolerance.relative_margin,
        "alpha": tolerance.alpha, "tasks": tolerance.task_count, "weight": tolerance.weight,
        "total_weight": tolerance.total_weight,
        "metric_margins": {name: {"absolute": m.absolute, "relative": m.relative}
                           for name, m in sorted(tolerance.metric_margins.items())},
    }


def _tolerance(raw: Any) -> Tolerance:
    """A tolerance from `tolerance_json`'s form; ValueError names what is wrong."""
    def number(value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"'{where}' must be a number, got {value!r}")
        return float(value)

    if not isinstance(raw, dict) or not isinstance(raw.get("metric_margins"), dict):
        raise ValueError("'tolerance' must be an object with 'metric_margins'")
    margins = {}
    for name, margin in raw["metric_margins"].items():
        if not isinstance(margin, dict):
            raise ValueError(f"'metric_margins.{name}' must be an object")
        margins[name] = Margin(number(margin.get("absolute"), f"metric_margins.{name}.absolute"),
                               number(margin.get("relative"), f"metric_margins.{name}.relative"))
    tasks = raw.get("tasks")
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"'tasks' must be an integer >= 1, got {tasks!r}")
    return Tolerance(absolute_margin=number(raw.get("absolute_margin"), "absolute_margin"),
                     relative_margin=number(raw.get("relative_margin"), "relative_margin"),
                     alpha=number(raw.get("alpha"), "alpha"), task_count=tasks, weight=number(raw.get("weight"), "weight"),
                     total_weight=number(raw.get("total_weight"), "total_weight"), metric_margins=margins)


def _plain(value: Any) -> Any:
    """JSON's values of a parsed block (a dataclass such as tasks.config.GateTolerance, or a mapping)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def parse(text: str, shown: str) -> dict[str, dict[str, Any]]:
    """The sessions of a policy file's text, by key, each task's tolerance checked; a BaselineError names the file
    (`shown`) and what is wrong."""
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError(f"its 'format' must be {FORMAT!r}")
        sessions = document.get("sessions")
        if not isinstance(sessions, dict):
            raise ValueError("'sessions' must be an object")
        parsed = {}
        for key, session in sessions.items():
            if not isinstance(session, dict) or not isinstance(session.get("tasks"), dict):
                raise ValueError(f"session '{key}' must be an object with 'tasks'")
            for task, entry in session["tasks"].items():
                try:
                    _tolerance(entry.get("tolerance") if isinstance(entry, dict) else None)
                except ValueError as exc:
                    raise ValueError(f"session '{key}', task '{task}': {exc}") from None
            parsed[key] = session
        return parsed
    except ValueError as exc:  # json.JSONDecodeError included
        raise BaselineError(f"{shown}: not a readable gate policy file ({exc}); record it again with "
                            "pytest --snapshot-update") from None


def recorded_text(existing: str | None, baseline_name: str, session: Mapping[str, Any],
                  keep: Callable[[str], bool]) -> str:
    """The policy file with `session` recorded under its key, replacing that key's entry. `existing`: the file's
    text (None: absent; an unreadable one is replaced whole); `keep`: whether another session's entry stays (its
    suites still have baselines)."""
    try:
        sessions = parse(existing, "") if existing is not None else {}
    except BaselineError:
        sessions = {}
    key = session_key(session["tasks"])
    sessions = {k: v for k, v in sessions.items() if k != key and keep(k)}
    sessions[key] = dict(session)
    document = {"format": FORMAT, "baseline_name": baseline_name, "sessions": dict(sorted(sessions.items()))}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def check_at_ref(text: str | None, session: Mapping[str, Any], *, ref: str, shown: str,
                 baseline_name: str) -> dict[str, Tolerance]:
    """The tolerances the policy recorded at the ref gives this session's items (the judge applies them), when the
    run's policy (`session`) is the one recorded there; GatePolicyChanged otherwise, naming each difference and how
    to accept it. `text`: the policy file at the ref (None: absent); `shown`: its path for messages."""
    key = session_key(session["tasks"])
    record = (f"on the branch {ref} names, record it with `pytest --snapshot-update --collect-only "
              f"--baseline-name={baseline_name}` and this run's suites and gate options (it scores nothing and writes "
              f"{shown}; a full --snapshot-update run writes it too), and merge it after review")
    if text is None:
        raise GatePolicyChanged(
            f"no gate policy at git ref {ref} ({shown}): the ref's margins, alpha, weights and task set are "
            f"unrecorded, so this run cannot show it is judged by them (the gate fails closed). {record[0].upper()}"
            f"{record[1:]}; nothing was scored", f"no gate policy at git ref {ref}"
        )
    sessions = parse(text, f"{shown} at git ref {ref}")
    recorded = sessions.get(key)
    changes: list[str] = []
    if recorded is None:
        overlap = {k: len(set(s["tasks"]) & set(session["tasks"])) for k, s in sessions.items()}
        closest = max(sorted(overlap), key=lambda k: overlap[k], default=None)
        if closest is None or overlap[closest] == 0:
            recorded_keys = "; ".join(sorted(sessions)) or "none"
            changes = [f"no session gating suites '{key}' is recorded at {ref} (recorded: {recorded_keys})"]
        else:
            recorded = sessions[closest]
            changes = [f"suites gated: '{closest}' at {ref}, '{key}' in this run"]
    if recorded is not None:
        changes += policy_changes(recorded, session, ref)
    if changes:
        listed = changes[:MAX_LINES] + ([f"and {len(changes) - MAX_LINES} more"] if len(changes) > MAX_LINES else [])
        raise GatePolicyChanged(
            f"gate policy changed: this run's is not the one recorded at git ref {ref} ({shown}), so it would not "
            "be judged by the ref's gate; nothing was scored.\n" + "\n".join(f"  {line}" for line in listed)
            + f"\nTo accept the change: review it, merge it, then {record}.",
            f"gate policy changed since git ref {ref}: {changes[0]}" + (f" (and {len(changes) - 1} more)"
                                                                       if len(changes) > 1 else ""),
        )
    assert recorded is not None
    return {task: _tolerance(entry["tolerance"]) for task, entry in recorded["tasks"].items()}


def policy_changes(recorded: Mapping[str, Any], current: Mapping[str, Any], ref: str) -> list[str]:
    """Each difference between a session's policy recorded at `ref` and this run's, one line each: the task set
    first, then the session's settings, then the tasks' (one line for the tasks that changed alike)."""
    old_tasks, new_tasks = recorded.get("tasks", {}), current["tasks"]
    lines = [f"task {key}: in the gate policy at {ref}, not gated in this run (its YAML deleted or renamed, or "
             "deselected)" for key in sorted(set(old_tasks) - set(new_tasks))]
    lines += [f"task {key}: gated in this run, not in the gate policy at {ref}"
              for key in sorted(set(new_tasks) - set(old_tasks))]
    settings = ({k: v for k, v in recorded.items() if k != "tasks"}, {k: v for k, v in current.items() if k != "tasks"})
    lines += [f"{_label(path)} {_shown(old)} → {_shown(new)}" for path, old, new in _leaf_changes(*settings)]
    common = sorted(set(old_tasks) & set(new_tasks))
    alike: dict[tuple[tuple[str, ...], str, str], list[str]] = {}
    for key in common:
        for path, old, new in _leaf_changes(old_tasks[key], new_tasks[key]):
            alike.setdefault((path, _shown(old), _shown(new)), []).append(key)
    for (path, old, new), keys in alike.items():
        who = "every task" if len(keys) == len(common) > 1 else ", ".join(keys)
        lines.append(f"{who}: {_label(path)} {old} → {new}")
    return lines


def _leaves(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if isinstance(value, dict):
        found: dict[tuple[str, ...], Any] = {}
        for key, inner in value.items():
            found.update(_leaves(inner, (*path, str(key))))
        return found
    return {path: value}


def _leaf_changes(old: Any, new: Any) -> list[tuple[tuple[str, ...], Any, Any]]:
    before, after = _leaves(old), _leaves(new)
    return [(path, before.get(path), after.get(path)) for path in sorted(set(before) | set(after))
            if before.get(path) != after.get(path)]


def _label(path: tuple[str, ...]) -> str:
    if path[:2] == ("tolerance", "metric_margins") and len(path) == 4:
        return f"{'margin' if path[3] == 'absolute' else 'relative margin'} {path[2]}"
    if path[0] == "tolerance":
        return ".".join(path[1:])
    if path[0] == "gate_block":
        return "YAML modelbench.gate." + ".".join(path[1:])
    if path[0] == "error_control":
        return "--gate-error-control"
    if path[0] == "pooled":
        return f"pooled entries {pooled.pooled_key(path[1])} " + ".".join(path[2:])
    return " ".join(path[1:]) if path[0] == "gate_options" else ".".join(path)


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value, ensure_ascii=False)
