"""What the plugin calls: gate options, one check per scored task item, and the session-level reporting.

plugin.py makes four calls: `add_options` (pytest_addoption), `configure` (pytest_configure; registers
`GateSession`, which holds the session hooks), `check_ready` (TaskItem.runtest, before scoring) and `check_item`
(TaskItem.runtest, after the evaluation).

It fails closed: without --score-only every task item is gated, and a baseline name with no baselines folder fails
each item before anything is scored, naming the command that records them. --score-only scores and reports without
reading or writing a baseline; the summary and --results-json say that no gate ran.

Error control: `GateSession` counts the task items collected (`pytest_collection_finish`) and every item is gated at
its alpha (--gate-alpha, else its YAML's) / that count (--gate-error-control=session, the default) or at its alpha
(=task); see docs/baseline-gate.md, "Error rates". Margins are resolved per metric by `gate/settings.py`.

Outcome of a task item (without --score-only):
  PASS, IMPROVED, INCONCLUSIVE entries   → the item passes; improvements and inconclusive entries (with their
                                           minimum detectable effect) are reported in the terminal summary
                                           and the markdown report, never failed on.
  any REGRESSED entry                    → the item fails with the category table, worst first.
  no baselines folder for the name       → fails before scoring ("no baselines 'default' ..."), see `check_ready`.
  baseline missing                       → fails ("no baseline ..."), as syrupy does for a missing snapshot.
  baseline corrupt / hand-edited         → fails with an error naming the file; the file is left untouched.
  baseline not comparable                → fails with "re-baseline required", what changed, this run's scores
                                           and how to compare (another --baseline-name, or --snapshot-update).
With --snapshot-update the last four write the candidate's record instead (and the item passes); a
baseline whose entries all stay inside the band is never rewritten. --snapshot-update-new-only writes
missing baselines only.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import platform
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_modelbench import cli_options
from pytest_modelbench.errors import BaselineError, ModelbenchError
from pytest_modelbench.tasks.config import gate_value_problem
from pytest_modelbench.tasks.generation_settings import SAMPLING_SEED
from pytest_modelbench.tasks.identity import TaskId, safe_file_stem, suite_of
from pytest_modelbench.atomic_files import write_text_atomic
from pytest_modelbench.gate.baseline import (
    Provenance,
    Tolerance,
    comparability_problems,
    dumps,
    read_text,
    record_from_evaluation,
)
from pytest_modelbench.gate.baseline_ref import BaselineRef
from pytest_modelbench.gate.changed_documents import most_changed
from pytest_modelbench.gate.html_report import html_page
from pytest_modelbench.gate.settings import DEFAULT_TOLERANCE, resolve_tolerance
from pytest_modelbench.gate.report import (
    STATUS_CREATED,
    STATUS_INVALID,
    STATUS_MISSING,
    STATUS_OFF,
    STATUS_REBASELINE,
    STATUS_UPDATED,
    GateResult,
    failure_message,
    markdown,
    properties,
    rebaseline_message,
    score_rows,
    terminal_lines,
)
from pytest_modelbench.gate.syrupy_extension import (
    BaselineExtension,
    BaselineSite,
    BaselineUpdateExtension,
    GateOutcome,
    gate_texts,
)

DEFAULT_BASELINE_NAME = "default"
DEFAULT_BASELINES_DIR = "baselines"
ERROR_CONTROL = ("session", "task")  # --gate-error-control: whose false-block rate alpha bounds
CAUSAL_PROTOCOL = "causal-lm loglikelihood, lm-eval 0.4.13 request rules"
MASKED_PROTOCOL = "masked-lm pseudo-log-likelihood"
GENERATION_PROTOCOL = "causal-lm greedy generation, lm-eval 0.4.13 generate_until rules"
PACKAGES = ("pytest-modelbench", "torch", "transformers", "tokenizers", "datasets", "numpy")
EXIT_STATUS_FAIL_UNUSED = 1  # as syrupy
_UNUSED_OUTPUT_KEY = "modelbench_gate_unused"
_YAML_SUFFIXES = (".yaml", ".yml")
GATED_ITEMS = ("TaskItem", "GroupItem")  # plugin.py's items that are gated: a task, a group (each one task here)


class GateFailure(ModelbenchError):
    """A task regressed against its baseline; the message holds the category table."""


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
    group.addoption("--gate-error-control", choices=ERROR_CONTROL, default="session",
                    help="session (default): alpha bounds the false blocks of the whole run, split across the "
                    "gated tasks; task: alpha per task (more power per task, more false blocks per run)")
    group.addoption("--md-report", default=None, metavar="PATH", help="write the gate results as markdown to PATH")
    group.addoption("--html-report", default=None, metavar="PATH",
                    help="write the gate results as one self-contained HTML page (charts, tables, changed documents)")
    group.addoption("--baseline-ref", default=None, metavar="REF",
                    help="read the baselines from this git ref (e.g. origin/main) instead of the working tree; "
                    "the report names baseline files the working tree changed")
    group.addoption("--score-only", action="store_true",
                    help="score and report without the baseline gate: no baseline is read or written and no gate "
                    "verdict is given (without it, a run with no baselines for --baseline-name fails)")
    parser.addini("modelbench_baseline_name", f"baseline name to gate against (default: {DEFAULT_BASELINE_NAME})", default="")
    parser.addini("modelbench_baselines_dir", "folder of baselines (relative to the ini file)", default="")


def configure(config: pytest.Config) -> "GateSession":
    session = GateSession(config)
    config.stash[GATE_KEY] = session
    config.pluginmanager.register(session, "modelbench-gate")
    return session


def check_ready(item: pytest.Item) -> None:
    """Fail a task item before it is scored when the gate has no baselines to compare it with."""
    session = item.config.stash.get(GATE_KEY, None)
    if session is not None:
        session.check_ready(item)


def check_item(item: pytest.Item, evaluation: Any, runner: Any) -> None:
    """Gate one evaluated task item against its baseline (see the module docstring for the outcomes)."""
    session = item.config.stash.get(GATE_KEY, None)
    if session is not None:
        session.check(item, evaluation, runner)


def _check_cli_tolerance(config: pytest.Config) -> dict[str, float]:
    overrides = {}
    for option, key in (("--gate-margin", "absolute_margin"), ("--gate-relative-margin", "relative_margin"),
                        ("--gate-alpha", "alpha")):
        value = config.getoption(option)
        if value is None:
            continue
        problem = gate_value_problem(key, value)
        if problem:
            raise pytest.UsageError(f"{option} {problem}")
        overrides[key] = float(value)
    return overrides


def _package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def scoring_protocol(evaluation: Any, backend: Any, batch_size: int | str) -> str:
    """How the numbers were produced; a baseline scored under another protocol is not comparable.

    An explicit `scoring_protocol` carried by the evaluation wins; otherwise what was run (causal log-likelihood,
    masked pseudo-log-likelihood with the task's masked protocol, greedy generation, or sampled generation with its
    settings, seed and batch size), the scorer's knobs from --model-args (add_bos_token, prefix_token_id, max_length)
    and the prompt format (--apply-chat-template, ...).
    """
    explicit = getattr(evaluation, "scoring_protocol", None) or getattr(evaluation.prepared, "scoring_protocol", None)
    if explicit:
        return str(explicit)
    leaves = getattr(evaluation, "leaves", None)
    if leaves is not None:  # a group (metrics/group_scores.py): its tasks' protocols, each once
        return " | ".join(dict.fromkeys(scoring_protocol(leaf, backend, batch_size) for leaf in leaves))
    generated = getattr(evaluation, "generations", None) is not None
    if generated and evaluation.prepared.config.generation.sampling:
        # The seed and the batch size choose the draw, so a run reproduces its baseline's answers only with both.
        settings = evaluation.prepared.config.generation.label()
        if str(getattr(backend, "device", "")).startswith("server"):  # the server's sampler: other draws than torch's
            base = (f"causal-lm sampled generation on a server ({settings}; seed {SAMPLING_SEED} per request), "
                    "lm-eval 0.4.13 generate_until rules")
        else:
            base = (f"causal-lm sampled generation ({settings}; torch seed {SAMPLING_SEED} per task, batch size "
                    f"{batch_size}), lm-eval 0.4.13 generate_until rules")
    elif generated:
        base = GENERATION_PROTOCOL
    elif getattr(backend, "model_type", "causal") == "masked":
        masked = getattr(evaluation.prepared.config, "masked_protocol", None) or "pll"
        base = f"{MASKED_PROTOCOL} ({masked})"
    else:
        base = CAUSAL_PROTOCOL
    knobs = "".join(f"; {k}={v}" for k, v in sorted((getattr(backend, "scorer_kwargs", None) or {}).items()))
    prompt = getattr(evaluation.prepared, "prompt_label", "")  # chat template, system instruction
    return base + knobs + (f"; {prompt}" if prompt else "")


class GateSession:
    """Per-session gate state and hooks (registered as a plugin by `configure`)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.overrides = _check_cli_tolerance(config)
        invocation_dir = Path(config.invocation_params.dir)
        self.md_report = cli_options.output_path("--md-report", config.getoption("--md-report"), invocation_dir)
        self.html_report = cli_options.output_path("--html-report", config.getoption("--html-report"), invocation_dir)
        self.baseline_name = (config.getoption("--baseline-name") or config.getini("modelbench_baseline_name")
                              or DEFAULT_BASELINE_NAME)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.baseline_name):
            raise pytest.UsageError(
                f"--baseline-name must be a simple name (letters, digits, '.', '_', '-'), got {self.baseline_name!r}"
            )
        self.baselines_dir = self._baselines_dir()
        option = config.option
        self.update = bool(getattr(option, "update_snapshots", False))
        self.update_new_only = bool(getattr(option, "update_new_snapshots_only", False))
        self.warn_unused = bool(getattr(option, "warn_unused_snapshots", False))
        self.disable_unused = bool(getattr(option, "disable_unused_snapshots", False))
        self.no_cleanup = bool(getattr(option, "no_cleanup", False))
        self.baseline_ref = self._baseline_ref()
        self.score_only = self._score_only()
        self.suite_roots = [Path(p) for p in config.getini("modelbench_suites")]
        self.suite_dirs: set[Path] = set()
        self.error_control = config.getoption("--gate-error-control")
        self.gated_tasks = 1  # tasks sharing alpha; counted when collection finishes
        self.results: list[GateResult] = []
        self.custom_tests: set[str] = set()  # node ids of the tests run besides the task items
        self.unused: set[str] = set()
        self.deleted: list[str] = []

    # ------------------------------------------------------------------ paths

    def _baselines_dir(self) -> Path:
        config = self.config
        cli = config.getoption("--baselines-dir")
        if cli:
            return (Path(config.invocation_params.dir) / cli).resolve()
        ini = config.getini("modelbench_baselines_dir")
        if ini:
            base = config.inipath.parent if config.inipath else config.rootpath
            return (base / ini).resolve()
        return (config.rootpath / DEFAULT_BASELINES_DIR).resolve()

    def _score_only(self) -> bool:
        """--score-only, refused with the options that read or write baselines or report a gate verdict."""
        if not self.config.getoption("--score-only"):
            return False
        given = [option for option, value in (
            ("--snapshot-update", self.update), ("--snapshot-update-new-only", self.update_new_only),
            ("--baseline-ref", self.baseline_ref is not None), ("--md-report", self.md_report is not None),
            ("--html-report", self.html_report is not None),
        ) if value]
        if given:
            raise pytest.UsageError(f"--score-only runs no gate: drop {' and '.join(given)}")
        return True

    def _baseline_ref(self) -> BaselineRef | None:
        ref = self.config.getoption("--baseline-ref")
        if ref is None:
            return None
        if self.update or self.update_new_only:
            raise pytest.UsageError(
                "--baseline-ref reads the baselines from git and cannot write them: drop --snapshot-update "
                "(record baselines on the branch the ref names)"
            )
        try:
            return BaselineRef(ref, self.baselines_dir)
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None

    def read_stored(self, path: Path) -> tuple[str | None, bool]:
        """The stored baseline's text (from --baseline-ref, else the working tree), and whether the working tree's
        file differs from it (always False without a ref)."""
        working_tree = read_text(path)
        if self.baseline_ref is None:
            return working_tree, False
        stored = self.baseline_ref.read_text(path)
        return stored, stored != working_tree

    @property
    def name_dir(self) -> Path:
        return self.baselines_dir / self.baseline_name

    def baseline_path(self, identity: TaskId) -> Path:
        return self.name_dir / identity.suite / f"{identity.file_stem}.json"

    def display(self, path: Path | str) -> str:
        try:
            return Path(path).relative_to(self.config.rootpath).as_posix()
        except ValueError:
            return str(path)

    # ------------------------------------------------------------------ one item

    def tolerance(self, task_config: Any, metrics: Any = None) -> Tolerance:
        """The task's (or group's) gate settings (gate/settings.py)."""
        tasks = self.gated_tasks if self.error_control == "session" else 1
        return resolve_tolerance(task_config, self.overrides, tasks, metrics)

    def provenance(self, evaluation: Any, runner: Any) -> Provenance:
        backend = runner.backend().describe()
        options = runner.options
        prepared = evaluation.prepared
        dtype = backend.dtype
        requested = str(options.dtype)
        batch_size = runner.batch_size_for(prepared.config.output_type)
        return Provenance(
            model=str(backend.name or options.model),
            model_fingerprint=str(backend.fingerprint),
            task_config_hash=prepared.config.config_hash,
            data_fingerprint=prepared.data_fingerprint,
            limit=prepared.limit,
            num_fewshot=int(prepared.num_fewshot),
            scoring_protocol=scoring_protocol(evaluation, backend, batch_size),
            dtype=(dtype or requested) if requested in ("auto", dtype) or not dtype else f"{requested} ({dtype})",
            batch_size=batch_size,
            device=backend.device,
            packages=_package_versions(),
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )

    @property
    def baselines_missing(self) -> bool:
        """No baselines folder for the name, where the gate reads the working tree and writes nothing."""
        return not (self.score_only or self.update or self.update_new_only or self.baseline_ref is not None
                    or self.name_dir.is_dir())

    def missing_baselines_message(self) -> str:
        return (
            f"no baselines '{self.baseline_name}' ({self.display(self.name_dir)} does not exist): the gate has "
            "nothing to compare with. Record them from a trusted model with "
            f"`pytest --snapshot-update --baseline-name={self.baseline_name}` and this run's other options, or "
            "pass --score-only to score without a gate"
        )

    def check_ready(self, item: pytest.Item) -> None:
        if not self.baselines_missing:
            return
        identity: TaskId = item.task_id  # type: ignore[attr-defined]
        self._record(item, GateResult(task=identity.key, status=STATUS_MISSING,
                                      baseline=self.display(self.baseline_path(identity)),
                                      baseline_name=self.baseline_name, note="no baselines of this name"))
        raise BaselineError(self.missing_baselines_message())

    def check(self, item: pytest.Item, evaluation: Any, runner: Any) -> None:
        task_config = evaluation.prepared.config
        identity: TaskId = item.task_id  # type: ignore[attr-defined]
        path = self.baseline_path(identity)
        shown = self.display(path)
        common: dict[str, Any] = {"task": identity.key, "baseline": shown, "baseline_name": self.baseline_name}
        if self.score_only:
            self._record(item, GateResult(status=STATUS_OFF, note="--score-only: no gate ran", **common))
            return
        candidate = record_from_evaluation(
            evaluation, suite=identity.suite, baseline_name=self.baseline_name,
            provenance=self.provenance(evaluation, runner), tolerance=self.tolerance(task_config, evaluation.scores.metrics),
        )
        candidate_text = dumps(candidate)
        stored_text, common["working_tree_differs"] = self.read_stored(path)
        common["baseline_provenance"] = _stored_provenance(stored_text)
        common["candidate_provenance"] = dataclasses.asdict(candidate.provenance)
        common["baseline_ref"] = None if self.baseline_ref is None else self.baseline_ref.ref
        aggregates = {m.name: m.aggregate for m in evaluation.scores.metrics if m.aggregate is not None}
        outcome = (gate_texts(candidate_text, stored_text, evaluation.prepared.documents, aggregates)
                   if stored_text is not None else None)
        written = self._persist(item, path, candidate_text, stored_text, outcome)
        task = task_config.task
        if outcome is None or outcome.comparison is None:  # scored but not compared: the report shows the scores
            common["scores"] = score_rows(candidate, None if outcome is None else outcome.baseline)

        if outcome is None:
            if written:
                self._record(item, GateResult(status=STATUS_CREATED, note=f"baseline written to {shown}", **common))
                return
            at_ref = "" if self.baseline_ref is None else f" at git ref {self.baseline_ref.ref}"
            self._record(item, GateResult(status=STATUS_MISSING, note=f"no baseline{at_ref}", **common))
            raise BaselineError(
                f"{path}: no baseline '{self.baseline_name}' for task '{task}'{at_ref}; record one from a trusted "
                "model with pytest --snapshot-update"
            )
        if outcome.comparison is None:
            if written:
                self._record(item, GateResult(status=STATUS_UPDATED, note=f"re-recorded ({_first_clause(outcome.problem)})", **common))
                return
            if outcome.kind == "rebaseline" and outcome.baseline is not None:
                self._record(item, GateResult(status=STATUS_REBASELINE, note=_first_clause(outcome.problem), **common))
                problems = comparability_problems(outcome.baseline, candidate)
                raise BaselineError(rebaseline_message(problems, shown, self.baseline_name, common["scores"]))
            self._record(item, GateResult(status=STATUS_INVALID, note=_first_clause(outcome.problem), **common))
            raise BaselineError(f"{path}: {outcome.problem}")

        comparison = outcome.comparison
        result = GateResult.from_comparison(comparison, **common)
        if self.html_report is not None and outcome.baseline is not None:
            result.changed_documents = most_changed(outcome.baseline, candidate, evaluation.prepared.documents)
        if written:
            result.status = STATUS_UPDATED
            result.note = (
                f"re-recorded: {len(comparison.regressed)} regressed, {len(comparison.improved)} improved entries"
            )
            self._record(item, result)
            return
        self._record(item, result)
        if comparison.regressed:
            stored_model = str((common["baseline_provenance"] or {}).get("model", "?"))
            raise GateFailure(
                failure_message(comparison, shown, self.baseline_name, candidate.provenance.model, stored_model)
            )

    def _persist(self, item: pytest.Item, path: Path, candidate_text: str, stored_text: str | None,
                 outcome: GateOutcome | None) -> bool:
        """Write the candidate record when updating and the stored one is missing or out of band; True if written.

        Goes through syrupy (so its summary counts the baseline and its update options apply) when syrupy runs.
        """
        syrupy_session = getattr(item.config, "_syrupy", None)
        if syrupy_session is not None:
            from syrupy.assertion import SnapshotAssertion
            from syrupy.location import PyTestLocation

            assertion = SnapshotAssertion(
                session=syrupy_session,
                extension_class=BaselineUpdateExtension if self.update else BaselineExtension,
                test_location=PyTestLocation(BaselineSite(item, path)),  # type: ignore[arg-type]
                update_snapshots=self.update,
                update_new_snapshots_only=self.update_new_only,
            )
            if stored_text is not None and outcome is not None:
                assertion.extension.decided = (candidate_text, stored_text, outcome)
            assertion == candidate_text  # noqa: B015 - syrupy's comparison: records use, writes when updating
            result = assertion.executions[0]
            if result.exception is not None:
                raise BaselineError(f"{path}: cannot check or write baseline: {result.exception}") from result.exception
            return bool(result.created or result.updated)
        holds = outcome is not None and outcome.holds(include_improvements=self.update)
        if (self.update and not holds) or (self.update_new_only and stored_text is None):
            write_text_atomic(path, candidate_text)
            return True
        return False

    def _record(self, item: pytest.Item, result: GateResult) -> None:
        item.user_properties.extend(properties(result))

    # ------------------------------------------------------------------ hooks

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Every xdist worker collects the same selected items, so each one splits alpha over the same count and an
        # item can be gated on its own, wherever it runs.
        self.gated_tasks = max(1, sum(type(item).__name__ in GATED_ITEMS for item in session.items))

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if item.path is not None and item.path.suffix in _YAML_SUFFIXES and hasattr(item, "runtest"):
            if type(item).__name__ in GATED_ITEMS:
                self.suite_dirs.add(Path(item.path).parent.resolve())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup" and not report.passed or report.when == "call":
            if Path(report.nodeid.split("::")[0]).suffix not in _YAML_SUFFIXES:
                self.custom_tests.add(report.nodeid)  # pytest's totals count these beside the task items
        if report.when != "call":
            return
        result = GateResult.from_properties(report.user_properties, report.nodeid, failed=report.failed)
        if result is not None:
            result.failed = report.failed
            self.results.append(result)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.unused.update(output.get(_UNUSED_OUTPUT_KEY, ()))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.config
        is_worker = hasattr(config, "workerinput")
        distributing = config.pluginmanager.has_plugin("dsession")
        if not self.score_only and not self.disable_unused and not distributing:
            self.unused.update(self.find_unused())
        if is_worker:
            config.workeroutput[_UNUSED_OUTPUT_KEY] = sorted(self.unused)  # type: ignore[attr-defined]
            return
        if self.unused and self.update and not self.no_cleanup:
            for path in sorted(self.unused):
                Path(path).unlink(missing_ok=True)
                self.deleted.append(path)
        elif self.unused and not self.update and not self.warn_unused:
            session.exitstatus = int(session.exitstatus) | EXIT_STATUS_FAIL_UNUSED
        unused = [self.display(u) for u in sorted(self.unused)]
        if self.md_report is not None:
            cli_options.write_output(session, "--md-report", self.md_report, markdown(self.results, self.baseline_name, unused))
        if self.html_report is not None:
            cli_options.write_output(
                session, "--html-report", self.html_report, html_page(self.results, self.baseline_name, unused)
            )

    @pytest.hookimpl(trylast=True)  # after the scores and syrupy's snapshot summary
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):
            return
        if self.score_only:
            if self.results:
                terminalreporter.section("modelbench gate: not run (--score-only)")
                terminalreporter.write_line(
                    f"no gate ran: the scores of {len(self.results)} task(s) were compared with no baseline; "
                    "they pass no release gate"
                )
            return
        lines: list[str] = []
        if self.results and self.baselines_missing:
            lines.append(self.missing_baselines_message())
        if self.results:
            lines += terminal_lines(self.results, custom_tests=len(self.custom_tests))
        lines += self._unused_lines()
        if not lines:
            return
        terminalreporter.section(f"modelbench gate (baseline '{self.baseline_name}')")
        for line in lines:
            terminalreporter.write_line(line)

    def _unused_lines(self) -> list[str]:
        if not self.unused:
            return []
        count = len(self.unused)
        noun = "baseline" if count == 1 else "baselines"
        if self.deleted:
            lines = [f"{count} unused {noun} deleted."]
            lines += [f"Deleted {Path(p).stem} ({self.display(p)})" for p in sorted(self.deleted)]
            return lines
        lines = [f"{count} {noun} unused."]
        lines += [f"Unused {Path(p).stem} ({self.display(p)})" for p in sorted(self.unused)]
        if not self.update:
            lines.append("Re-run pytest with --snapshot-update to delete unused baselines.")
        return lines

    # ------------------------------------------------------------------ unused baselines

    def find_unused(self) -> list[str]:
        """Baselines of this name, in the folders of the suites collected this session, whose task (or group) YAML is
        gone.

        Decided from the task YAMLs on disk, not from the selection: a task deselected with -k or -m keeps its
        baseline. A suite folder with a YAML that cannot be read is skipped (its tasks are unknown).
        """
        from pytest_modelbench.tasks.config import is_task_file
        from pytest_modelbench.tasks.groups import is_group_file
        from pytest_modelbench.tasks.yaml_loader import load_merged_yaml

        defined: dict[Path, set[str]] = {}
        bundles: dict[Path, set[str]] = {}  # file-stem prefixes of bundle members' baselines
        unknown: set[Path] = set()
        for suite_dir in sorted(self.suite_dirs):
            folder = self.name_dir / suite_of(suite_dir, self.suite_roots)
            names = defined.setdefault(folder, set())
            for yaml_path in sorted(suite_dir.iterdir()):
                if yaml_path.suffix not in _YAML_SUFFIXES or not yaml_path.is_file():
                    continue
                key = "task" if is_task_file(yaml_path) else "group" if is_group_file(yaml_path) else None
                if key is None:
                    continue
                try:
                    name = load_merged_yaml(yaml_path).get(key)
                except ModelbenchError:
                    unknown.add(folder)
                    continue
                if isinstance(name, str):
                    names.add(safe_file_stem(name))
                    if key == "group":  # a bundle's members are gated as <group>::<member>
                        bundles.setdefault(folder, set()).add(safe_file_stem(f"{name}::"))
        unused = []
        for folder, names in defined.items():
            if folder in unknown or not folder.is_dir():
                continue
            unused += [str(p) for p in sorted(folder.glob("*.json")) if p.is_file() and p.stem not in names
                       and not p.stem.startswith(tuple(bundles.get(folder, ())))]
        return unused


GATE_KEY = pytest.StashKey[GateSession]()


def _first_clause(problem: str | None) -> str:
    text = str(problem or "")
    return text.split(". ")[0].split("; restore")[0]


def _stored_provenance(stored_text: str | None) -> dict[str, Any] | None:
    """The stored baseline's provenance as written, for reports; None when there is none to read."""
    import json

    try:
        provenance = json.loads(stored_text or "null")["provenance"]
    except Exception:
        return None
    return provenance if isinstance(provenance, dict) else None


def outcomes_json(config: pytest.Config) -> dict[str, dict[str, Any]]:
    """Each gated task's outcome for --results-json, by its '<suite>/<task>' key."""
    session = config.stash.get(GATE_KEY, None)
    return {} if session is None else {result.task: result.as_json() for result in session.results}
