"""The checkout itself: what a fresh clone needs so that the README's commands run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tracked_symlinks(repo: Path) -> list[str]:
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-s", "-z"], capture_output=True, check=True, text=True
    ).stdout
    links = []
    for entry in filter(None, listing.split("\0")):
        mode, _, _, path = entry.split(maxsplit=3)
        if mode == "120000":
            links.append(path)
    return links


def _escapes(repo: Path, link: str) -> bool:
    target = os.readlink(repo / link)
    resolved = Path(os.path.normpath((repo / link).parent / target))
    return not resolved.is_relative_to(repo)


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_no_tracked_symlink_points_outside_the_repository():
    escaping = [link for link in _tracked_symlinks(REPO) if _escapes(REPO, link)]
    assert not escaping, f"tracked symbolic links that point outside the repository (dangling on a fresh clone): {escaping}"


def test_the_symlink_check_sees_a_committed_link_out_of_the_repository(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".venv-vllm").symlink_to("/tmp/vllm-probe")
    (tmp_path / "inside").symlink_to("README.md")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    links = _tracked_symlinks(tmp_path)
    assert sorted(links) == [".venv-vllm", "inside"]
    assert [link for link in links if _escapes(tmp_path, link)] == [".venv-vllm"]


def _prepare(directory: Path) -> subprocess.CompletedProcess:
    script = f'source "{REPO}/scripts/venv-dir.sh"; prepare_venv_dir "$1"'
    return subprocess.run(["bash", "-c", script, "prepare", str(directory)], capture_output=True, text=True, check=True)


def test_setup_replaces_a_dangling_venv_link_without_touching_its_target(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    venv = tmp_path / ".venv-vllm"
    venv.symlink_to(tmp_path / "missing")
    _prepare(venv)
    assert not venv.exists() and not venv.is_symlink()
    venv.symlink_to(target)
    result = _prepare(venv)
    assert not venv.is_symlink() and not venv.exists()
    assert (target / "keep.txt").read_text() == "kept"
    assert "symbolic link" in result.stderr


def test_setup_moves_a_foreign_folder_aside_instead_of_deleting_it(tmp_path):
    venv = tmp_path / ".venv-vllm"
    venv.mkdir()
    (venv / "notes.txt").write_text("mine")
    (tmp_path / ".venv-vllm.moved-aside-1").mkdir()
    result = _prepare(venv)
    assert not venv.exists()
    assert (tmp_path / ".venv-vllm.moved-aside-2" / "notes.txt").read_text() == "mine"
    assert ".venv-vllm.moved-aside-2" in result.stderr


def test_setup_keeps_a_working_venv(tmp_path):
    venv = tmp_path / ".venv"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "marker").write_text("x")
    result = _prepare(venv)
    assert (venv / "marker").exists() and result.stderr == ""


def test_the_packages_listed_in_pyproject_are_the_trees_packages_and_the_shipped_suites():
    """pyproject.toml lists its packages (the mapped suites/ folder is invisible to packages.find): a package
    added to the tree and not to the list would be missing from the wheel."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    in_tree = {".".join(path.parent.relative_to(REPO).parts)
               for path in (REPO / "pytest_modelbench").rglob("__init__.py")}
    assert set(settings["packages"]) == in_tree | {"pytest_modelbench.suites"}
    assert settings["package-dir"] == {"pytest_modelbench.suites": "suites"}
