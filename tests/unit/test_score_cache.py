"""The persistent score cache: keys, warm runs that compute nothing, misses when anything scored changes,
several processes at once, failures that never fail a run, and `--no-cache`."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets  # noqa: F401  pytester's in-process runs cannot import datasets a second time (see tests/plugin)
import pytest
import torch

from pytest_modelbench.scoring import score_cache
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.score_cache import ScoreCache, default_cache_path, request_key

REPO = Path(__file__).resolve().parents[2]
REQUESTS = [
    ("Question: Which gas?\nAnswer:", " Oxygen"),
    ("Question: Which gas?\nAnswer:", " Nitrogen gas"),
    ("", "He couldn't figure out the issue with the rope."),
    ("The quick bro", "wn fox"),
]


def rows_in(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT COUNT(*) FROM scores").fetchone()[0]


def scorer(loaded, cache, fingerprint="files:tiny", **kwargs) -> CausalLMScorer:
    kwargs = {"fast": True, **kwargs}
    return CausalLMScorer(loaded.model, loaded.tokenizer, cache=cache, fingerprint=fingerprint, **kwargs)


def refuse_to_score(*args, **kwargs):
    raise AssertionError("the model was run although every score was cached")


# --- the store ----------------------------------------------------------------------------------------------------


def test_put_and_get(tmp_path):
    cache = ScoreCache(tmp_path / "scores.sqlite")
    keys = [request_key("ns", "ctx", f" choice {i}") for i in range(3)]
    cache.put_many([(keys[0], -1.5), (keys[1], -2.25)])
    assert cache.get_many(keys) == {keys[0]: -1.5, keys[1]: -2.25}
    assert (cache.hits, cache.misses) == (2, 1)
    reopened = ScoreCache(tmp_path / "scores.sqlite")
    assert reopened.get_many(keys[:1]) == {keys[0]: -1.5}
    with sqlite3.connect(tmp_path / "scores.sqlite") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_keys_separate_namespace_context_and_continuation():
    assert request_key("ns", "a b", "c") != request_key("ns", "a", " bc")
    assert request_key("ns", "a", "b") != request_key("ns2", "a", "b")
    assert request_key("ns", "a", "b") == request_key("ns", "a", "b")


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_path() == tmp_path / "mine" / "scores.sqlite"
    monkeypatch.delenv("MODELBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "pytest-modelbench" / "scores.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / ".cache" / "pytest-modelbench" / "scores.sqlite"


def test_an_unusable_cache_warns_and_the_run_goes_on(tiny_loaded, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    cache = ScoreCache(blocker / "scores.sqlite")
    with pytest.warns(UserWarning, match="score cache .* disabled"):
        values = scorer(tiny_loaded, cache).loglikelihood(REQUESTS)
    # batch composition differs between the two runs, which moves float32 sums by ~1e-6
    assert values == pytest.approx(scorer(tiny_loaded, None).loglikelihood(REQUESTS), abs=1e-4)
    assert not cache.enabled


def test_several_processes_share_one_cache(tmp_path):
    path = tmp_path / "shared.sqlite"
    worker = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from pytest_modelbench.scoring.score_cache import ScoreCache, request_key
        me = int(sys.argv[1])
        cache = ScoreCache({str(path)!r})
        for round in range(20):
            cache.put_many([(request_key("ns", str(me), f"{{round}}-{{i}}"), me + i / 100) for i in range(25)])
            everyone = [request_key("ns", str(w), f"{{round}}-{{i}}") for w in range(4) for i in range(25)]
            cache.get_many(everyone)
        assert cache.enabled, "cache was disabled"
    """)
    processes = [subprocess.Popen([sys.executable, "-W", "error", "-c", worker, str(w)]) for w in range(4)]
    assert [p.wait(timeout=300) for p in processes] == [0, 0, 0, 0]
    assert rows_in(path) == 4 * 20 * 25
    cache = ScoreCache(path)
    assert cache.get_many([request_key("ns", "3", "19-24")]) == {request_key("ns", "3", "19-24"): 3.24}


# --- the scorer with a cache ---------------------------------------------------------------------------------------


def test_warm_run_scores_nothing_and_returns_the_same_values(tiny_loaded, tmp_path, monkeypatch):
    path = tmp_path / "scores.sqlite"
    cold = scorer(tiny_loaded, ScoreCache(path)).loglikelihood(REQUESTS)
    assert rows_in(path) == len(REQUESTS)
    monkeypatch.setattr(CausalLMScorer, "score_encoded", refuse_to_score)
    monkeypatch.setattr(type(tiny_loaded.tokenizer), "encode", refuse_to_score)  # no tokenization either
    assert scorer(tiny_loaded, ScoreCache(path)).loglikelihood(REQUESTS) == cold


def test_only_new_requests_are_scored(tiny_loaded, tmp_path):
    path = tmp_path / "scores.sqlite"
    scorer(tiny_loaded, ScoreCache(path)).loglikelihood(REQUESTS[:2])
    seen = []
    warm = scorer(tiny_loaded, ScoreCache(path))
    original = warm.score_encoded
    warm.score_encoded = lambda encoded, on_done=None: seen.append(len(encoded)) or original(encoded, on_done)
    values = warm.loglikelihood(REQUESTS)
    assert seen == [2]
    # batch composition differs between the two runs, which moves float32 sums by ~1e-6
    assert values == pytest.approx(scorer(tiny_loaded, None).loglikelihood(REQUESTS), abs=1e-4)
    assert rows_in(path) == len(REQUESTS)


@pytest.mark.parametrize("change", ["fingerprint", "max_length", "prefix_token_id", "path"])
def test_a_change_in_what_is_scored_misses(tiny_loaded, tmp_path, change):
    path = tmp_path / "scores.sqlite"
    scorer(tiny_loaded, ScoreCache(path)).loglikelihood(REQUESTS)
    kwargs = {
        "fingerprint": {"fingerprint": "files:other"}, "max_length": {"max_length": 100},
        "prefix_token_id": {"prefix_token_id": 0}, "path": {"fast": False},
    }[change]
    scorer(tiny_loaded, ScoreCache(path), **kwargs).loglikelihood(REQUESTS)
    assert rows_in(path) == 2 * len(REQUESTS)


def test_weights_edited_in_memory_miss(tiny_model, tmp_path):
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    loaded = load_model(resolve_model_source(str(tiny_model)), dtype="float32")
    path = tmp_path / "scores.sqlite"
    before = scorer(loaded, ScoreCache(path), fingerprint=loaded.fingerprint).loglikelihood(REQUESTS)
    with torch.no_grad():
        loaded.model.get_output_embeddings().weight[5, 3] += 0.5  # same files, different weights
    after = scorer(loaded, ScoreCache(path), fingerprint=loaded.fingerprint).loglikelihood(REQUESTS)
    assert rows_in(path) == 2 * len(REQUESTS)
    assert after != before


@pytest.mark.parametrize("fingerprint", [None, "hub:org/model@unknown"])
def test_without_a_model_identity_nothing_is_cached(tiny_loaded, tmp_path, fingerprint):
    path = tmp_path / "scores.sqlite"
    scorer(tiny_loaded, ScoreCache(path), fingerprint=fingerprint).loglikelihood(REQUESTS)
    assert not path.exists()


def test_namespace_names_everything_scored(tiny_loaded):
    settings = json.loads(scorer(tiny_loaded, ScoreCache(Path("unused")))._cache_namespace())
    assert set(settings) == {
        "protocol", "libraries", "model", "weights", "config", "tokenizer", "dtype", "device", "max_length",
        "prefix_token_id", "add_bos_token", "path", "batch_size",
    }
    assert set(settings["libraries"]) == {"torch", "transformers", "tokenizers"}
    assert settings["protocol"] == score_cache.PROTOCOL_VERSION


# --- pytest: a re-run computes nothing; --no-cache bypasses the cache ----------------------------------------------


@pytest.fixture
def arc_suite(pytester):
    shutil.copytree(REPO / "suites" / "arc_mt", pytester.path / "arc_mt")
    return pytester.path / "arc_mt"


def test_rerun_uses_the_cache_and_no_cache_bypasses_it(pytester, tiny_model, data_mirror, arc_suite, monkeypatch,
                                                       tmp_path):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(tmp_path / "cache"))
    args = [f"--model={tiny_model}", f"--data-dir={data_mirror}", "--limit=3", "--score-only", "arc_mt", "-k", "fi"]
    first = tmp_path / "first.json"
    pytester.runpytest(*args, f"--results-json={first}").assert_outcomes(passed=1)
    assert rows_in(tmp_path / "cache" / "scores.sqlite") > 0

    monkeypatch.setattr(CausalLMScorer, "score_encoded", refuse_to_score)
    second = tmp_path / "second.json"
    pytester.runpytest(*args, f"--results-json={second}").assert_outcomes(passed=1)
    assert json.loads(second.read_text())["results"] == json.loads(first.read_text())["results"]

    result = pytester.runpytest(*args, "--no-cache")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the model was run although every score was cached*"])
