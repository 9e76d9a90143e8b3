"""A score-cache file that is corrupt, locked by another process, or another program's degrades to recomputing
with a warning, and is left as it was."""

from __future__ import annotations

import sqlite3
from contextlib import closing
import subprocess
import sys
import textwrap

import pytest

from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.score_cache import ScoreCache

REQUESTS = [("Question: Which gas?\nAnswer:", " Oxygen"), ("The quick bro", "wn fox"), ("", "Stones sink.")]


@pytest.fixture(scope="module")
def uncached(tiny_loaded) -> list[float]:
    return CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, fast=True).loglikelihood(REQUESTS)


def score_with(loaded, cache: ScoreCache) -> list[float]:
    scorer = CausalLMScorer(loaded.model, loaded.tokenizer, fast=True, cache=cache, fingerprint="files:tiny")
    with pytest.warns(UserWarning, match="score cache .* disabled for this run, scores are recomputed"):
        values = scorer.loglikelihood(REQUESTS)
    assert not cache.enabled
    return values


def filled_cache(tiny_loaded, tmp_path):
    path = tmp_path / "scores.sqlite"
    cache = ScoreCache(path)
    CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, fast=True, cache=cache,
                   fingerprint="files:tiny").loglikelihood(REQUESTS)
    cache.close()
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file, so damage reaches it
    return path


@pytest.mark.parametrize("damage", ["garbage", "pages", "truncated"])
def test_a_corrupt_cache_is_recomputed_with_a_warning_and_left_alone(tiny_loaded, tmp_path, uncached, damage):
    path = filled_cache(tiny_loaded, tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "garbage":
        data = bytearray(b"\x8f not a database " * 300)
    elif damage == "pages":  # the header survives, the schema and the table's pages do not
        data[100:] = bytes(range(256)) * ((len(data) - 100) // 256) + bytes((len(data) - 100) % 256)
    else:
        data = data[: len(data) // 3]
    path.write_bytes(bytes(data))
    values = score_with(tiny_loaded, ScoreCache(path))
    assert values == pytest.approx(uncached, abs=1e-4)
    assert path.read_bytes() == bytes(data)


@pytest.mark.parametrize("schema", [
    "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('mine')",
    "CREATE TABLE scores (key BLOB PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL);",
    "CREATE TABLE scores (name TEXT, points INTEGER); INSERT INTO scores VALUES ('ada', 3)",
])
def test_another_programs_file_is_not_used_nor_changed(tiny_loaded, tmp_path, uncached, schema):
    path = tmp_path / "scores.sqlite"
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.executescript(schema)
    before = path.read_bytes()
    assert score_with(tiny_loaded, ScoreCache(path)) == pytest.approx(uncached, abs=1e-4)
    assert path.read_bytes() == before


def test_a_cache_locked_by_another_process_is_waited_for_then_bypassed(tiny_loaded, tmp_path, uncached):
    path = filled_cache(tiny_loaded, tmp_path)
    with closing(sqlite3.connect(path)) as connection, connection:
        rows_before = connection.execute("SELECT key, value FROM scores ORDER BY key").fetchall()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys, time
        connection = sqlite3.connect({str(path)!r}, isolation_level=None)
        connection.execute("PRAGMA locking_mode = EXCLUSIVE")
        connection.execute("BEGIN EXCLUSIVE")
        print("locked", flush=True)
        sys.stdin.read()  # hold the lock until the test closes stdin
        connection.execute("ROLLBACK")
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        values = score_with(tiny_loaded, ScoreCache(path, lock_wait_s=1.0))
    finally:
        holder.communicate("", timeout=30)
    assert values == pytest.approx(uncached, abs=1e-4)
    with closing(sqlite3.connect(path)) as connection, connection:
        assert connection.execute("SELECT key, value FROM scores ORDER BY key").fetchall() == rows_before
