"""Where baselines live and the one way they are read and written.

A task's baseline is ``<baselines dir>/<baseline name>/<suite>/<task>.json``. It is read from the working tree, or
from a git ref (--baseline-ref); it is written only by `write_baseline` (atomically: a killed run leaves the old file
or the new one), which syrupy's extension calls under --snapshot-update (pytest_plugin/syrupy_extension.py). Unused baselines
are those of a suite folder whose task or group YAML is gone. Beside them, `<baselines dir>/<baseline name>/
gate-policy.json` records the gate policy of each session that gates them (gate/policy_file.py), written the same way.

A run that may write baselines marks the name's folder first (`begin_update`: a hidden `.update-in-progress.<pid>.json`
holding when it started) and removes its mark when it ends (`end_update`). A mark left by a process that no longer runs
is a --snapshot-update that was killed: each baseline is whole (old or new), but the set may mix two recordings, and
`unfinished_updates` says which files it rewrote, until a run that updates the whole suites clears the marks.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from pytest_modelbench.atomic_files import write_text_atomic
from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate import policy_file
from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.baseline_file import read_text
from pytest_modelbench.gate.policy import GatePolicy
from pytest_modelbench.tasks.config import is_task_file
from pytest_modelbench.tasks.groups import is_group_file
from pytest_modelbench.tasks.identity import TaskId, safe_file_stem, suite_of
from pytest_modelbench.tasks.yaml_loader import load_merged_yaml

YAML_SUFFIXES = (".yaml", ".yml")
UPDATE_MARK = ".update-in-progress."  # + the writing process's pid + ".json", in the baseline name's folder


def write_baseline(path: Path, text: str) -> None:
    write_text_atomic(path, text)


class BaselineStore:
    """The baselines of one policy's name, with paths shown relative to `root` (the pytest rootdir)."""

    def __init__(self, policy: GatePolicy, root: Path):
        self.policy = policy
        self.root = root

    @property
    def name_dir(self) -> Path:
        return self.policy.name_dir

    def path(self, identity: TaskId) -> Path:
        return self.name_dir / identity.suite / f"{identity.file_stem}.json"

    def display(self, path: Path | str) -> str:
        try:
            return Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def read(self, path: Path) -> tuple[str | None, bool]:
        """The stored baseline's text (from --baseline-ref, else the working tree), and whether the working tree's
        file differs from it (always False without a ref)."""
        working_tree = read_text(path)
        ref = self.policy.baseline_ref
        if ref is None:
            return working_tree, False
        stored = ref.read_text(path)
        return stored, stored != working_tree

    @property
    def policy_path(self) -> Path:
        return self.name_dir / policy_file.FILE_NAME

    def begin_update(self) -> None:
        """Mark the name's folder as being written by this process (module docstring); once per process. Best
        effort: where the mark cannot be written, neither can a baseline, and that write says so."""
        mark = self._update_mark(os.getpid())
        if not mark.exists():
            try:
                write_text_atomic(mark, json.dumps({"pid": os.getpid(), "started": time.time()}))
            except OSError:
                pass

    def end_update(self) -> None:
        self._update_mark(os.getpid()).unlink(missing_ok=True)

    def unfinished_updates(self) -> list[str]:
        """One line per mark of a process that no longer runs: an update killed before it ended, and the baselines
        it rewrote (their files changed after it started)."""
        lines = []
        for mark, pid, started in self._dead_marks():
            rewritten = sorted(self.display(path) for path in self.name_dir.rglob("*.json")
                               if not path.name.startswith(".") and path != self.policy_path
                               and path.stat().st_mtime >= started)
            when = datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds")
            head = f"baselines: the --snapshot-update of process {pid} (started {when}) did not finish"
            if not rewritten:
                lines.append(f"{head}, and wrote no baseline: the set is as it was before it ({self.display(mark)})")
                continue
            lines.append(f"{head}: {len(rewritten)} baseline(s) rewritten by it ({', '.join(rewritten[:5])}"
                         f"{', ...' if len(rewritten) > 5 else ''}), the others as they were before it, so the set may "
                         "mix two recordings; run --snapshot-update on the whole suites to make it one "
                         f"({self.display(mark)})")
        return lines

    def clear_unfinished_updates(self) -> None:
        """After an update of the whole suites: every baseline is of one recording again."""
        for mark, _, _ in self._dead_marks():
            mark.unlink(missing_ok=True)

    def _update_mark(self, pid: int) -> Path:
        return self.name_dir / f"{UPDATE_MARK}{pid}.json"

    def _dead_marks(self) -> list[tuple[Path, int, float]]:
        marks = []
        for mark in sorted(self.name_dir.glob(f"{UPDATE_MARK}*.json")):
            try:
                content = json.loads(mark.read_text(encoding="utf-8"))
                pid, started = int(content["pid"]), float(content["started"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written, or not ours: nothing to say
            if pid != os.getpid() and not _running(pid):
                marks.append((mark, pid, started))
        return marks

    def protected_tolerances(self, session: dict) -> dict[str, Tolerance]:
        """With --baseline-ref: the tolerances the policy file at the ref gives the session's items, when `session`
        (this run's effective policy) is the one recorded there; policy_file.GatePolicyChanged otherwise."""
        ref = self.policy.baseline_ref
        assert ref is not None
        return policy_file.check_at_ref(ref.read_text(self.policy_path), session, ref=ref.ref,
                                        shown=self.display(self.policy_path), baseline_name=self.policy.baseline_name)

    def record_policy(self, session: dict) -> str:
        """Write `session` (an effective policy) into the name's policy file, keeping the entries of other sessions
        whose suites still have baselines; returns the file as shown."""
        path = self.policy_path
        existing = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None

        def has_baselines(key: str) -> bool:
            return all(any((self.name_dir / suite).glob("*.json")) for suite in key.split(", "))

        write_text_atomic(path, policy_file.recorded_text(existing, self.policy.baseline_name, session, has_baselines))
        return self.display(path)

    def policy_recorded(self, session: dict) -> bool:
        """Whether the working tree's policy file has an entry for the session (--snapshot-update-new-only)."""
        path = self.policy_path
        if not path.is_file():
            return False
        try:
            sessions = policy_file.parse(path.read_text(encoding="utf-8", errors="replace"), self.display(path))
        except ModelbenchError:
            return False
        return policy_file.session_key(session["tasks"]) in sessions

    @property
    def missing(self) -> bool:
        """No baselines folder for the name, where the gate reads the working tree and writes nothing."""
        policy = self.policy
        return not (policy.score_only or policy.writes or policy.baseline_ref is not None or self.name_dir.is_dir())

    def missing_message(self) -> str:
        name = self.policy.baseline_name
        return (
            f"no baselines '{name}' ({self.display(self.name_dir)} does not exist): the gate has "
            "nothing to compare with. Record them from a trusted model with "
            f"`pytest --snapshot-update --baseline-name={name}` and this run's other options, or "
            "pass --score-only to score without a gate"
        )

    def fingerprint(self) -> str:
        """The baselines this session reads, in one digest: shards that read other baselines are not one session.
        At a git ref, the ref's commit; otherwise every baseline and policy file of the name's folder (paths and
        contents; not the hidden marks of updates in progress)."""
        ref = self.policy.baseline_ref
        if ref is not None:
            return f"git:{ref.commit}"
        digest = hashlib.sha256()
        if self.name_dir.is_dir():
            for path in sorted(p for p in self.name_dir.rglob("*.json") if not p.name.startswith(".")):
                digest.update(path.relative_to(self.name_dir).as_posix().encode("utf-8") + b"\x00")
                digest.update(hashlib.sha256(path.read_bytes()).digest())
        return "sha256:" + digest.hexdigest()[:16]

    def find_unused(self, suite_dirs: Iterable[Path], suite_roots: Sequence[Path]) -> list[str]:
        """Baselines of this name, in the folders of the given suites, whose task (or group) YAML is gone.

        Decided from the task YAMLs on disk, not from the selection: a task deselected with -k or -m keeps its
        baseline. A suite folder with a YAML that cannot be read is skipped (its tasks are unknown).
        """
        defined: dict[Path, set[str]] = {}
        bundles: dict[Path, set[str]] = {}  # file-stem prefixes of bundle members' baselines
        unknown: set[Path] = set()
        for suite_dir in sorted(suite_dirs):
            folder = self.name_dir / suite_of(suite_dir, suite_roots)
            names = defined.setdefault(folder, set())
            for yaml_path in sorted(suite_dir.iterdir()):
                if yaml_path.suffix not in YAML_SUFFIXES or not yaml_path.is_file():
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


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
