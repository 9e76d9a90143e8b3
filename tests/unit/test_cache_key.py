"""The score cache's key covers everything that can change a number: the model folder's config files, the --model-args
that reach from_pretrained, the plain path's batch size; rows written under the earlier key scheme are never returned.
Each run goes through the runner, as a pytest session does, with two runs sharing one cache folder."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from pytest_modelbench.run.runner import BenchRunner, RunOptions
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.score_cache import (
    ScoreCache, request_key, tokenizer_fingerprint, weights_digest,
)

REQUESTS = [
    ("Question: Which gas?\nAnswer:", " Oxygen"),
    ("Question: Which gas?\nAnswer:", " Nitrogen gas"),
    ("", "He couldn't figure out the issue with the rope."),
    ("The quick bro", "wn fox"),
]


def scores(model: Path, cache_dir: Path, monkeypatch, cache: bool = True, **options) -> list[float]:
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(cache_dir))
    runner = BenchRunner(RunOptions(model=str(model), dtype="float32", cache=cache, **options))
    return runner.backend().loglikelihood(REQUESTS)


def rows_in(cache_dir: Path) -> int:
    with sqlite3.connect(cache_dir / "scores.sqlite") as connection:
        return connection.execute("SELECT COUNT(*) FROM scores").fetchone()[0]


def refuse_to_score(*args, **kwargs):
    raise AssertionError("the model was run although every score was cached")


@pytest.fixture
def model_copy(tiny_model, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_model, tmp_path / "model"))


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}, indent=2))


def test_a_changed_config_json_gives_fresh_numbers(model_copy, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    before = scores(model_copy, cache, monkeypatch)
    edit_json(model_copy / "config.json", rms_norm_eps=0.5)  # same weights, a different model
    after = scores(model_copy, cache, monkeypatch)
    fresh = scores(model_copy, cache, monkeypatch, cache=False)
    assert after == pytest.approx(fresh, abs=1e-5)
    assert all(abs(a - b) > 0.1 for a, b in zip(after, before))  # the edit moves every number


def test_a_changed_generation_config_misses(model_copy, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    scores(model_copy, cache, monkeypatch)
    edit_json(model_copy / "generation_config.json", repetition_penalty=1.3)
    scores(model_copy, cache, monkeypatch)
    assert rows_in(cache) == 2 * len(REQUESTS)


@pytest.mark.parametrize("model_args", ["rms_norm_eps=0.5", "attn_implementation=eager"])
def test_a_model_arg_that_reaches_from_pretrained_misses(tiny_model, tmp_path, monkeypatch, model_args):
    cache = tmp_path / "cache"
    scores(tiny_model, cache, monkeypatch)
    changed = scores(tiny_model, cache, monkeypatch, model_args=model_args)
    assert rows_in(cache) == 2 * len(REQUESTS)
    assert changed == pytest.approx(scores(tiny_model, cache, monkeypatch, cache=False, model_args=model_args),
                                    abs=1e-5)


def test_plain_scoring_batch_size_is_in_the_key(tiny_model, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    scores(tiny_model, cache, monkeypatch, shared_prefixes=False, batch_size=1)
    scores(tiny_model, cache, monkeypatch, shared_prefixes=False, batch_size=2)
    assert rows_in(cache) == 2 * len(REQUESTS)
    monkeypatch.setattr(CausalLMScorer, "score_encoded", refuse_to_score)
    scores(tiny_model, cache, monkeypatch, shared_prefixes=False, batch_size=2)  # the same batch size: all cached


def test_rows_of_the_earlier_key_scheme_are_never_returned(tiny_loaded, tmp_path):
    """A cache file of the version before the config, the loading --model-args, the library versions and the plain
    path's batch size were in the key: its rows (here planted with a wrong value) are misses, recomputed."""
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    earlier_namespace = json.dumps({
        "protocol": "causal-loglikelihood/1", "model": "files:tiny", "weights": weights_digest(model),
        "tokenizer": tokenizer_fingerprint(tokenizer), "dtype": "torch.float32", "device": "cpu", "max_length": 256,
        "prefix_token_id": tokenizer.bos_token_id, "add_bos_token": None, "path": "fast",
    }, sort_keys=True)
    path = tmp_path / "scores.sqlite"
    ScoreCache(path).put_many([(request_key(earlier_namespace, context, continuation), -1.0)
                               for context, continuation in REQUESTS])
    cached = CausalLMScorer(model, tokenizer, fast=True, cache=ScoreCache(path), fingerprint="files:tiny")
    values = cached.loglikelihood(REQUESTS)
    assert -1.0 not in values
    assert values == pytest.approx(CausalLMScorer(model, tokenizer, fast=True).loglikelihood(REQUESTS), abs=1e-4)
