"""A --snapshot-update killed before it ended (issue 50, 2): each baseline is whole, but the set may mix two
recordings. The next run says which baselines the killed update rewrote, until an update of the whole suites makes
the set one recording again (gate/storage.py, the update marks). The kill itself: tests/plugin/test_faults.py and
benchmarks/kill_during_snapshot_update.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.plugin.test_integrity import write_project


def run(pytester, *args: str):
    return pytester.runpytest("-p", "no:cacheprovider", "--backend=mybackend:make", "--model=m", *args)


def marks(folder) -> list[str]:
    return sorted(path.name for path in folder.glob(".update-in-progress.*"))


def test_the_run_after_a_killed_update_names_what_it_rewrote_until_a_whole_update(pytester, monkeypatch):
    write_project(pytester, monkeypatch, ("healthy", "flaky"))
    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    name_dir = pytester.path / "baselines" / "default"
    assert marks(name_dir) == []  # a finished update leaves no mark

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    started = time.time()
    (name_dir / f".update-in-progress.{dead}.json").write_text(json.dumps({"pid": int(dead), "started": started}))
    os.utime(name_dir / "toy" / "healthy.json", (started - 60, started - 60))  # before the killed update began
    os.utime(name_dir / "toy" / "flaky.json", (started + 1, started + 1))  # rewritten by it
    gated = run(pytester)
    gated.assert_outcomes(passed=2)
    gated.stdout.fnmatch_lines([f"baselines: the --snapshot-update of process {dead} (started *) did not finish: 1 "
                                "baseline(s) rewritten by it (baselines/default/toy/flaky.json), the others as they "
                                "were before it, so the set may mix two recordings; run --snapshot-update on the "
                                "whole suites to make it one*"])
    assert marks(name_dir) == [f".update-in-progress.{dead}.json"]  # a plain run keeps saying it

    run(pytester, "--snapshot-update", "-k", "flaky").assert_outcomes(passed=1)  # not the whole suite: kept
    assert marks(name_dir) == [f".update-in-progress.{dead}.json"]
    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    assert marks(name_dir) == []
    assert "did not finish" not in run(pytester).stdout.str()
