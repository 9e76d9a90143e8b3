"""The gate's command-line options and ini values, and the session's gate policy (gate/policy.py) made from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_modelbench.gate.policy import (
    DEFAULT_BASELINE_NAME,
    ERROR_CONTROL,
    TOLERANCE_OPTIONS,
    WEIGHTS_INI,
    GateOptionError,
    GatePolicy,
    checked_overrides,
    checked_policy,
    checked_weights,
)
from pytest_modelbench.gate.integrity import DEFAULT_MAX_INVALID, DEFAULT_MAX_UNSCORED
from pytest_modelbench.gate.settings import DEFAULT_TOLERANCE

DEFAULT_BASELINES_DIR = "baselines"


def add_options(parser: pytest.Parser, group: Any) -> None:
    group.addoption(
        "--baseline-name", default=None,
        help="baseline to gate against, by name, never by model id (also ini modelbench_baseline_name; "
        f"default: {DEFAULT_BASELINE_NAME})",
    )
    group.addoption(
        "--baselines-dir", default=None,
        help=f"folder holding <baseline-name>/<suite>/<task>.json (also ini modelbench_baselines_dir; default: {DEFAULT_BASELINES_DIR})",
    )
    group.addoption("--gate-margin", type=float, default=None,
                    help="absolute non-inferiority margin of every metric: replaces every margin of the YAML and "
                    "of the metrics, relative ones too (0 tests against no change; with --gate-relative-margin "
                    "the larger of the two)")
    group.addoption("--gate-relative-margin", type=float, default=None,
                    help="relative margin of every metric, a fraction of the baseline value: replaces every margin "
                    "of the YAML and of the metrics, absolute ones too (with --gate-margin the larger of the two)")
    group.addoption("--gate-alpha", type=float, default=None,
                    help="largest false-block rate when nothing regressed past its margin (overrides the YAML; "
                    f"default {DEFAULT_TOLERANCE.alpha})")
    group.addoption("--max-unscored", type=float, default=None, metavar="SHARE",
                    help="largest share of a task's documents (and of each category's) left unscored by failed "
                    f"requests before the task is in error (overrides the YAML; default {DEFAULT_MAX_UNSCORED:g}); "
                    "docs/integrity.md")
    group.addoption("--max-invalid", type=float, default=None, metavar="SHARE",
                    help="largest share of a generation task's answers no filter could parse before the task is in "
                    f"error (overrides the YAML; default {DEFAULT_MAX_INVALID:g}: no limit, the invalid_output entry "
                    "is gated instead)")
    group.addoption("--gate-error-control", choices=ERROR_CONTROL, default="session",
                    help="session (default): alpha bounds the false blocks of the whole run, split across the "
                    "gated tasks; task: alpha per task (more power per task, more false blocks per run)")
    group.addoption("--early-stop", action="store_true",
                    help="score each task's documents in a seeded random order in blocks and stop once its verdict "
                    "is settled (always-valid tests: the false-block rate is the full run's); off by default")
    group.addoption("--early-stop-verdicts", action="store_true",
                    help="with --early-stop: stop a task only where every verdict it reports (pass, inconclusive, "
                    "improved, not only whether it regressed) is the full run's; saves documents only on unchanged "
                    "checkpoints and clear regressions")
    group.addoption("--md-report", default=None, metavar="PATH", help="write the gate results as markdown to PATH")
    group.addoption("--html-report", default=None, metavar="PATH",
                    help="write the gate results as one self-contained HTML page (charts, tables, changed documents)")
    group.addoption("--baseline-ref", default=None, metavar="REF",
                    help="read the baselines from this git ref (e.g. origin/main) instead of the working tree; "
                    "the report names baseline files the working tree changed")
    group.addoption("--noise-floor", action="store_true",
                    help="with --snapshot-update: score each task a second time under another batch size (and, for a "
                    "local causal LM, the other scoring path), store each entry's flip rate and shift with the "
                    "baseline, and warn when a margin is below that noise (re-records every baseline of the run)")
    group.addoption("--accept-regression", action="append", default=[], metavar="SUITE/TASK:METRIC[:CATEGORY]",
                    help="with --snapshot-update and --accept-reason: lower this entry's reference to this run's "
                    "value although it regressed (the metric's overall entry, or one category); repeatable. Other "
                    "entries never move down: a regression not accepted fails and leaves the baseline as it was")
    group.addoption("--accept-reason", default=None, metavar="TEXT",
                    help="why the --accept-regression entries are accepted (recorded in the baseline with the date)")
    group.addoption("--score-only", action="store_true",
                    help="score and report without the baseline gate: no baseline is read or written and no gate "
                    "verdict is given (without it, a run with no baselines for --baseline-name fails)")
    parser.addini("modelbench_baseline_name", f"baseline name to gate against (default: {DEFAULT_BASELINE_NAME})", default="")
    parser.addini("modelbench_baselines_dir", "folder of baselines (relative to the ini file)", default="")
    parser.addini(WEIGHTS_INI, "lines '<suite>/<task> = <weight>': the task's share of alpha under "
                  "--gate-error-control=session (over the YAML's modelbench.gate.weight; default 1)", type="linelist")


def policy_from_options(config: pytest.Config) -> GatePolicy:
    """The session's gate policy from its options and ini values, checked once (a bad value is a usage error)."""
    option = config.option
    invocation_dir = Path(config.invocation_params.dir)
    cli = config.getoption("--baselines-dir")
    ini = config.getini("modelbench_baselines_dir")
    if cli:
        baselines_dir = (invocation_dir / cli).resolve()
    elif ini:
        baselines_dir = ((config.inipath.parent if config.inipath else config.rootpath) / ini).resolve()
    else:
        baselines_dir = (config.rootpath / DEFAULT_BASELINES_DIR).resolve()
    try:
        return checked_policy(
            baselines_dir=baselines_dir,
            baseline_name=(config.getoption("--baseline-name") or config.getini("modelbench_baseline_name")
                           or DEFAULT_BASELINE_NAME),
            overrides=checked_overrides({name: config.getoption(name) for name in TOLERANCE_OPTIONS}),
            error_control=config.getoption("--gate-error-control"),
            update=bool(getattr(option, "update_snapshots", False)),
            update_new_only=bool(getattr(option, "update_new_snapshots_only", False)),
            score_only=bool(config.getoption("--score-only")),
            baseline_ref=config.getoption("--baseline-ref"),
            reports=[name for name in ("--md-report", "--html-report") if config.getoption(name) is not None],
            weights=checked_weights(config.getini(WEIGHTS_INI)),
            early_stop=bool(config.getoption("--early-stop")),
            early_stop_verdicts=bool(config.getoption("--early-stop-verdicts")),
            noise_floor=bool(config.getoption("--noise-floor")),
            accepted=config.getoption("--accept-regression"),
            accept_reason=config.getoption("--accept-reason"),
        )
    except GateOptionError as exc:
        raise pytest.UsageError(str(exc)) from None
