"""Baselines read from a git ref (--baseline-ref), so that a change cannot lower the bar it is judged by.

In CI a pull request could commit lowered baselines together with the checkpoint they bless; reading them from the
target branch instead (`git show REF:path`, in the repository holding the baselines folder) keeps the bar where the
branch put it. Fails closed: no git, no repository, a ref that is not a commit, a folder outside the repository are
errors before anything is scored, and a baseline missing at the ref fails its task.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pytest_modelbench.errors import BaselineError

OPTION = "--baseline-ref"
GIT_TIMEOUT_S = 60


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT_S, check=False,
        )
    except FileNotFoundError:
        raise BaselineError(f"{OPTION}: git is not installed (it reads the baselines from a git ref)") from None
    except subprocess.TimeoutExpired:
        raise BaselineError(f"{OPTION}: git {args[0]} in {repo} did not answer in {GIT_TIMEOUT_S} s") from None


def _message(completed: subprocess.CompletedProcess[bytes]) -> str:
    """git's last line of complaint, or its exit status."""
    lines = completed.stderr.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {completed.returncode}"


class BaselineRef:
    """The baselines of one git ref. Construction checks the repository and the ref (BaselineError if unusable)."""

    def __init__(self, ref: str, baselines_dir: Path):
        self.ref = ref
        folder = baselines_dir
        while not folder.is_dir():  # the folder may not exist in the working tree, only at the ref
            folder = folder.parent
        top = _git(folder, "rev-parse", "--show-toplevel")
        if top.returncode != 0:
            raise BaselineError(f"{OPTION} {ref}: {baselines_dir} is not in a git repository ({_message(top)})")
        self.repo = Path(top.stdout.decode("utf-8").strip()).resolve()
        try:
            baselines_dir.resolve().relative_to(self.repo)
        except ValueError:
            raise BaselineError(f"{OPTION} {ref}: {baselines_dir} is outside the git repository {self.repo}") from None
        commit = _git(self.repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        if commit.returncode != 0:
            raise BaselineError(f"{OPTION} {ref}: no such commit, branch or tag in the git repository {self.repo}")
        self.commit = commit.stdout.decode("ascii").strip()

    def read_text(self, path: Path) -> str | None:  # a baseline, or the gate policy file (gate/policy_file.py)
        """The file's text at the ref (undecodable bytes replaced, so they fail validation), or None if absent."""
        relative = path.resolve().relative_to(self.repo).as_posix()
        exists = _git(self.repo, "cat-file", "-e", f"{self.commit}:{relative}")
        if exists.returncode != 0:
            return None
        shown = _git(self.repo, "show", f"{self.commit}:{relative}")
        if shown.returncode != 0:
            raise BaselineError(f"{path}: cannot read it at git ref {self.ref} ({_message(shown)})")
        return shown.stdout.decode("utf-8", errors="replace")
