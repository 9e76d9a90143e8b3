"""Atomic writes of baselines, results and reports."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from pytest_modelbench import atomic_files
from pytest_modelbench.atomic_files import write_text_atomic
from pytest_modelbench.gate.baseline_file import dumps, parse
from tests.fixtures.gate_records import make_record


def test_written_file_has_the_umask_permissions_not_the_temporary_files(tmp_path):
    previous = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "baseline.json", "{}\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "baseline.json").stat().st_mode) == 0o644


def test_atomic_write_leaves_no_temporary_files_and_survives_a_failed_write(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "probe.json"
    write_text_atomic(path, "first\n")
    assert path.read_text() == "first\n"

    def crash(src, dst):
        raise KeyboardInterrupt  # an interrupted update, after the temporary file was written

    monkeypatch.setattr(atomic_files.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(path, "second\n")
    assert path.read_text() == "first\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["probe.json"]


def _hammer(args):
    path, text, rounds = args
    for _ in range(rounds):
        write_text_atomic(Path(path), text)
    return True


def test_concurrent_writers_never_leave_a_partial_file(tmp_path):
    path = tmp_path / "probe.json"
    texts = [dumps(make_record({"acc": [i % 2] * 400})) for i in range(2)]
    write_text_atomic(path, texts[0])
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        pending = pool.map_async(_hammer, [(str(path), text, 60) for text in texts])
        seen = 0
        while not pending.ready():
            assert path.read_text() in texts  # every read sees one complete file
            parse(path.read_text(), path)
            seen += 1
        assert pending.get() == [True, True]
    assert seen > 0
    assert [p.name for p in tmp_path.iterdir()] == ["probe.json"]
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
