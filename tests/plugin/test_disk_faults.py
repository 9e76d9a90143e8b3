"""A full disk at the end of a run (issue 50, 4), on a real tmpfs filled to the last block: the baselines
--snapshot-update rewrites, the results JSON, the reports and the run record each fail with one line naming the
file; every file is as it was (written by rename: atomic_files.py), no temporary file is left, and the exit status
says so (1: the baseline items fail; 15: a file of the run's record). Mounting a tmpfs needs root: skipped
elsewhere."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from pytest_modelbench.gate.decision import EXIT_STATUS_WRITE_FAILED
from tests.plugin.test_integrity import rows, write_project


def mount_tmpfs(folder: Path, size: str = "64k") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")


def fill(folder: Path) -> None:
    """Take every free block of the file system under `folder`."""
    with open(folder / ".filler", "wb", buffering=0) as handle:
        for chunk in (4096, 1):
            try:
                while True:
                    handle.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC


@pytest.fixture
def project(pytester, monkeypatch):
    write_project(pytester, monkeypatch, ("healthy", "flaky"))
    mounts = [pytester.path / "baselines", pytester.path / "out"]
    yield pytester, mounts
    for folder in mounts:
        subprocess.run(["umount", str(folder)], capture_output=True)


def run(pytester, *args: str):
    return pytester.runpytest("-p", "no:cacheprovider", "--backend=mybackend:make", "--model=m", *args)


def test_a_full_disk_under_snapshot_update_leaves_every_baseline_as_it_was(project):
    pytester, (baselines, _) = project
    mount_tmpfs(baselines)
    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    written = {path: path.read_bytes() for path in baselines.rglob("*.json")}
    assert len(written) == 3  # two baselines and the gate policy
    with open(pytester.path / "suites" / "toy" / "healthy.jsonl", "a", encoding="utf-8") as data:
        data.write(json.dumps({**rows("healthy", 21)[-1]}) + "\n")  # one more document: its baseline is rewritten
    fill(baselines)

    result = run(pytester, "--snapshot-update")
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "healthy.json: cannot write the baseline (No space left on device); it is left as it was, nothing " \
           "half-written" in output
    assert "Traceback" not in output
    assert {path: path.read_bytes() for path in baselines.rglob("*.json")} == written
    assert not [path for path in baselines.rglob("*") if path.name.endswith(".tmp")]


def test_a_full_disk_for_the_results_and_reports_says_which_file_and_keeps_the_earlier_ones(project):
    pytester, (baselines, out) = project
    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    mount_tmpfs(out, size="1m")
    files = ("--results-json=out/r.json", "--md-report=out/gate.md", "--html-report=out/gate.html",
             "--run-record=out/record.json")
    run(pytester, *files).assert_outcomes(passed=2)
    earlier = {path.name: path.read_bytes() for path in out.iterdir()}
    assert set(earlier) == {"r.json", "gate.md", "gate.html", "record.json"}
    (pytester.path / "failing.json").write_text(json.dumps(["flaky-3"]))  # another run: every file would change
    fill(out)

    result = run(pytester, "--no-cache", *files)
    assert result.ret == EXIT_STATUS_WRITE_FAILED
    output = result.stdout.str()
    for option, name in (("--results-json", "r.json"), ("--md-report", "gate.md"), ("--html-report", "gate.html"),
                         ("--run-record", "record.json")):
        assert f"modelbench: {option} {out / name}: cannot write the file (No space left on device); it is left as " \
               "it was, nothing half-written" in output
    assert "Traceback" not in output
    assert {path.name: path.read_bytes() for path in out.iterdir() if path.name != ".filler"} == earlier
