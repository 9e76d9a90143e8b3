"""Where baselines live and the one way they are read and written.

A task's baseline is ``<baselines dir>/<baseline name>/<suite>/<task>.json``. It is read from the working tree, or
from a git ref (--baseline-ref); it is written only by `write_baseline` (atomically: a killed run leaves the old file
or the new one), which syrupy's extension calls under --snapshot-update (pytest_plugin/syrupy_extension.py). Unused baselines
are those of a suite folder whose task or group YAML is gone. Beside them, `<baselines dir>/<baseline name>/
gate-policy.json` records the gate policy of each session that gates them (gate/policy_file.py), written the same way.
"""

from __future__ import annotations

import hashlib
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
        At a git ref, the ref's commit; otherwise every file of the name's folder (paths and contents)."""
        ref = self.policy.baseline_ref
        if ref is not None:
            return f"git:{ref.commit}"
        digest = hashlib.sha256()
        if self.name_dir.is_dir():
            for path in sorted(self.name_dir.rglob("*.json")):
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
