"""The gate's policy for one session: which baselines, which margins and alpha, how alpha is shared, and whether the
run may write baselines. Plain values in, checked once; the pytest layer builds it from its options
(pytest_plugin/gate_options.py) and a merge (outputs/record_merge.py) reads it back from the shards' records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate import pooled
from pytest_modelbench.gate.alpha_split import DEFAULT_WEIGHT, AlphaSplit
from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.baseline_ref import BaselineRef
from pytest_modelbench.gate.integrity import LIMIT_OPTIONS
from pytest_modelbench.gate.ratchet import ACCEPT_OPTION, AcceptanceError, AcceptedRegression, parse_acceptance
from pytest_modelbench.gate.settings import resolve_tolerance
from pytest_modelbench.tasks.gate_block import gate_value_problem

DEFAULT_BASELINE_NAME = "default"
ERROR_CONTROL = ("session", "task")  # whose false-block rate alpha bounds
# the command line's gate keys, by option (--gate-margin ...), checked as the YAML's gate block is
TOLERANCE_OPTIONS = {"--gate-margin": "absolute_margin", "--gate-relative-margin": "relative_margin",
                     "--gate-alpha": "alpha", **LIMIT_OPTIONS}
WEIGHTS_INI = "modelbench_gate_weights"


class GateOptionError(ModelbenchError):
    """Gate options that contradict each other or hold a value the gate cannot use; the message names the option."""


@dataclass(frozen=True)
class GatePolicy:
    baselines_dir: Path
    baseline_name: str = DEFAULT_BASELINE_NAME
    # absolute_margin, relative_margin, alpha; max_unscored, max_invalid (gate/integrity.py)
    overrides: Mapping[str, float] = field(default_factory=dict)
    error_control: str = "session"
    update: bool = False  # --snapshot-update: write missing and out-of-band baselines
    update_new_only: bool = False  # --snapshot-update-new-only: write missing ones only
    score_only: bool = False  # no gate at all
    baseline_ref: BaselineRef | None = None  # read the baselines from a git ref
    weights: Mapping[str, float] = field(default_factory=dict)  # the ini's task weights, by '<suite>/<task>' key
    early_stop: bool = False  # --early-stop: score in blocks, stop once settled (gate/early_stop.py)
    early_stop_verdicts: bool = False  # --early-stop-verdicts: stop only where every verdict is the full run's
    noise_floor: bool = False  # --noise-floor: score each task twice, store its noise floor (gate/noise_floor.py)
    # --baseline-ref: each gated item's tolerance as the ref's gate-policy.json records it, by key, set once this
    # run's policy is found to be that one (gate/policy_file.py); the judge applies these
    protected: Mapping[str, Tolerance] = field(default_factory=dict)
    # --accept-regression (with --accept-reason): the entries whose references --snapshot-update may lower
    accepted: tuple[AcceptedRegression, ...] = ()
    accept_reason: str = ""

    @property
    def name_dir(self) -> Path:
        return self.baselines_dir / self.baseline_name

    @property
    def writes(self) -> bool:
        return self.update or self.update_new_only

    def tolerance(self, task_config: Any, split: AlphaSplit, key: str, metrics: Sequence[Any]) -> Tolerance:
        """The gate settings of the task (or group) `key` (gate/settings.py), with its share of alpha in `split`; with
        --baseline-ref, the ref's (`protected`)."""
        if key in self.protected:
            return self.protected[key]
        return split.applied(resolve_tolerance(task_config, self.overrides, metrics), key)

    def alpha_split(self, yaml_weights: Mapping[str, float | None], collected: Iterable[str],
                    item_metrics: Mapping[str, Iterable[str]] | None = None,
                    known_suites: Iterable[str] | None = None) -> AlphaSplit:
        """How alpha is split over the gated items, `yaml_weights`: each one's YAML weight (None: not set) by key, the
        ini's overriding; `item_metrics`: each gated item's poolable metrics, which decide the suites with pooled
        entries (gate/pooled.py; their family weighs WEIGHT_SHARE of the suite's items unless the ini sets
        '<suite>/*'). GateOptionError for an ini weight that names no `collected` task (or pooled suite) of a suite
        collected (a typo would silently leave the task at weight 1); a suite not collected this run may keep its
        weights if it is one of `known_suites` (the project's suites, when the caller knows them)."""
        weights = {key: self.weights.get(key, DEFAULT_WEIGHT if weight is None else weight)
                   for key, weight in yaml_weights.items()}
        pooled_suites = pooled.pooled_suites({key: item_metrics.get(key, ()) for key in weights}
                                             if item_metrics else {})
        pooled_weights = {
            suite: self.weights.get(pooled.pooled_key(suite), pooled.WEIGHT_SHARE * sum(
                w for key, w in weights.items() if key.split("/", 1)[0] == suite))
            for suite in pooled_suites
        }
        pooled_weights = {suite: weight for suite, weight in pooled_weights.items() if weight > 0}
        known = set(collected) | {pooled.pooled_key(suite) for suite in pooled_suites}
        suites = {key.split("/", 1)[0] for key in collected}
        unknown = sorted(key for key in set(self.weights) - known if key.split("/", 1)[0] in suites)
        if known_suites is not None:
            everywhere = suites | set(known_suites)
            strays = sorted(key for key in self.weights if key.split("/", 1)[0] not in everywhere)
            if strays:
                raise GateOptionError(
                    f"{WEIGHTS_INI} names a suite that is in no modelbench_suites folder: {', '.join(strays)} "
                    f"(suites: {', '.join(sorted(everywhere)) or 'none'})"
                )
        if unknown:
            raise GateOptionError(
                f"{WEIGHTS_INI} names no collected task or pooled suite: {', '.join(unknown)} (keys are "
                "'<suite>/<task>', as in the summary and --results-json, or '<suite>/*' for a suite with pooled "
                "entries)"
            )
        return AlphaSplit(weights, self.error_control, pooled_weights)

    def as_json(self) -> dict[str, Any]:
        """What a run record holds of the policy: shards judged under other settings are not one session."""
        return {
            "baseline_name": self.baseline_name, "overrides": dict(sorted(self.overrides.items())),
            "error_control": self.error_control, "score_only": self.score_only,
            "baseline_ref": None if self.baseline_ref is None else self.baseline_ref.commit,
            "early_stop": self.early_stop, "early_stop_verdicts": self.early_stop_verdicts,
        }


def checked_overrides(values: Mapping[str, float | None]) -> dict[str, float]:
    """The command line's margins and alpha (by option name) as gate keys; GateOptionError names a bad one."""
    overrides = {}
    for option, value in values.items():
        if value is None:
            continue
        key = TOLERANCE_OPTIONS[option]
        problem = gate_value_problem(key, value)
        if problem:
            raise GateOptionError(f"{option} {problem}")
        overrides[key] = float(value)
    return overrides


def checked_weights(lines: Sequence[str]) -> dict[str, float]:
    """The ini's `<suite>/<task> = <weight>` lines as weights by task key (`<suite>/* = <weight>`: the suite's
    pooled family, 0 for none); GateOptionError names a bad line."""
    weights: dict[str, float] = {}
    for line in lines:
        key, equals, text = (part.strip() for part in line.partition("="))
        if not equals or "/" not in key:
            raise GateOptionError(f"{WEIGHTS_INI}: line {line!r} must read '<suite>/<task> = <weight>'")
        if key in weights:
            raise GateOptionError(f"{WEIGHTS_INI}: line {line!r} gives {key} a second weight")
        try:
            value: Any = float(text)
        except ValueError:
            value = text
        problem = gate_value_problem("weight", value)
        if problem and not (key.endswith(pooled.POOLED_SUFFIX) and value == 0):  # 0: no pooled entries
            raise GateOptionError(f"{WEIGHTS_INI}: the weight of {key} {problem}")
        weights[key] = value
    return weights


def checked_policy(
    *, baselines_dir: Path, baseline_name: str, overrides: Mapping[str, float], error_control: str, update: bool,
    update_new_only: bool, score_only: bool, baseline_ref: str | None, reports: Sequence[str] = (),
    weights: Mapping[str, float] | None = None, early_stop: bool = False, early_stop_verdicts: bool = False,
    noise_floor: bool = False, accepted: Sequence[str] = (), accept_reason: str | None = None,
) -> GatePolicy:
    """The policy, or GateOptionError for options that cannot go together. `reports`: the gate-report options given
    (--md-report ...), which --score-only refuses."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", baseline_name):
        raise GateOptionError(
            f"--baseline-name must be a simple name (letters, digits, '.', '_', '-'), got {baseline_name!r}"
        )
    if error_control not in ERROR_CONTROL:
        raise GateOptionError(f"--gate-error-control must be one of {', '.join(ERROR_CONTROL)}, got {error_control!r}")
    ref = None
    if baseline_ref is not None:
        if update or update_new_only:
            raise GateOptionError(
                "--baseline-ref reads the baselines from git and cannot write them: drop --snapshot-update "
                "(record baselines on the branch the ref names)"
            )
        try:
            ref = BaselineRef(baseline_ref, baselines_dir)
        except ModelbenchError as exc:
            raise GateOptionError(str(exc)) from None
    if score_only:
        given = [option for option, value in (
            ("--snapshot-update", update), ("--snapshot-update-new-only", update_new_only),
            ("--baseline-ref", ref is not None), ("--noise-floor", noise_floor),
        ) if value] + list(reports)
        if given:
            raise GateOptionError(f"--score-only runs no gate: drop {' and '.join(given)}")
    if noise_floor and not update:
        raise GateOptionError(
            "--noise-floor measures the pipeline's noise while recording baselines and stores it in them: it needs "
            "--snapshot-update (it re-records every baseline of the run, scoring each task a second time)"
        )
    if early_stop and (update or update_new_only or score_only):
        given = "--score-only" if score_only else "--snapshot-update" + ("-new-only" if update_new_only else "")
        raise GateOptionError(
            f"--early-stop scores part of each task and cannot go with {given}: a baseline holds every document "
            "(and --score-only has no verdict to settle)"
        )
    if early_stop_verdicts and not early_stop:
        raise GateOptionError("--early-stop-verdicts says how --early-stop stops a task: give --early-stop too")
    acceptances = _checked_acceptances(accepted, accept_reason, update)
    return GatePolicy(
        baselines_dir=baselines_dir, baseline_name=baseline_name, overrides=dict(overrides),
        error_control=error_control, update=update, update_new_only=update_new_only, score_only=score_only,
        baseline_ref=ref, weights=dict(weights or {}), early_stop=early_stop,
        early_stop_verdicts=early_stop_verdicts, noise_floor=noise_floor, accepted=acceptances,
        accept_reason=accept_reason or "",
    )


def _checked_acceptances(values: Sequence[str], reason: str | None, update: bool) -> tuple[AcceptedRegression, ...]:
    """--accept-regression values (GateOptionError names a malformed one); they lower references only while
    --snapshot-update writes them, and only with a reason to record."""
    try:
        acceptances = tuple(parse_acceptance(value) for value in values)
    except AcceptanceError as exc:
        raise GateOptionError(str(exc)) from None
    if acceptances and not update:
        raise GateOptionError(f"{ACCEPT_OPTION} lowers references as --snapshot-update writes them: give "
                              "--snapshot-update too")
    if acceptances and not (reason or "").strip():
        raise GateOptionError(f"{ACCEPT_OPTION} needs --accept-reason=TEXT: why the regression is accepted is "
                              "recorded in the baseline with it")
    if reason is not None and not acceptances:
        raise GateOptionError(f"--accept-reason gives the reason of an {ACCEPT_OPTION}: name the accepted entries")
    return acceptances
