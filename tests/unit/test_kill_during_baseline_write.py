"""`kill -9` at random moments of baseline writing never leaves a torn baseline: each file is the old or the new one.

A forked child rewrites several baselines in a loop through the storage syrupy calls under --snapshot-update
(`BaselineExtension.write_snapshot_collection`), alternating two versions of each; the test SIGKILLs it after a
random delay, then reads every file back with the baseline parser. Repeated KILLS times.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

from syrupy.data import Snapshot, SnapshotCollection

from pytest_modelbench.gate.baseline_file import dumps, parse
from pytest_modelbench.pytest_plugin.syrupy_extension import BaselineExtension
from tests.fixtures.gate_records import make_record

KILLS = 60
FILES = 4


def rewrite_forever(paths: list[Path], versions: list[list[str]], first: int, started) -> None:
    """Rewrite the files in turn from file `first` on, each time with its other version, until killed."""
    started.set()
    for turn in range(first, 10**9):
        path, texts = paths[turn % len(paths)], versions[turn % len(paths)]
        collection = SnapshotCollection(location=str(path))
        collection.add(Snapshot(name=path.stem, data=texts[1 - texts.index(path.read_text())]))
        BaselineExtension.write_snapshot_collection(snapshot_collection=collection)


def test_kill_9_at_random_moments_never_tears_a_baseline(tmp_path):
    rnd = random.Random(13)
    paths = [tmp_path / "baselines" / "default" / "suite" / f"task_{i}.json" for i in range(FILES)]
    # two versions of each file of different lengths, so a torn write could not pass for either
    versions = [[dumps(make_record({"acc": [v] * (300 + 200 * v)}, task=f"task_{i}")) for v in (0, 1)]
                for i in range(FILES)]
    for path, texts in zip(paths, versions):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(texts[0])

    context = multiprocessing.get_context("fork")
    killed_mid_loop = 0
    seen_versions = set()
    for _ in range(KILLS):
        started = context.Event()
        child = context.Process(target=rewrite_forever, args=(paths, versions, rnd.randrange(FILES), started))
        child.start()
        assert started.wait(10)
        time.sleep(rnd.uniform(0, 0.04))
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        killed_mid_loop += child.exitcode == -signal.SIGKILL
        for path, texts in zip(paths, versions):
            text = path.read_text()
            assert text in texts, f"{path.name} is neither the old nor the new baseline"
            assert parse(text, path).task == path.stem
            seen_versions.add((path.name, texts.index(text)))

    assert killed_mid_loop == KILLS
    assert len(seen_versions) == 2 * FILES  # every file was rewritten, and the kills landed at different points
    leftovers = [p.name for p in paths[0].parent.iterdir() if p not in paths]
    # a killed writer can leave its hidden temporary file behind, never a file syrupy would read as a baseline
    assert all(name.startswith(".") and name.endswith(".tmp") for name in leftovers)
    assert not any(BaselineExtension().is_snapshot_location(location=name) for name in leftovers)
