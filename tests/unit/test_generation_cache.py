"""Generated answers in the score cache: a warm re-run generates nothing, anything that changes an answer misses, an
interrupted run keeps what it generated, and a cache file of the version before generations were cached still works."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import textwrap
import warnings
from contextlib import closing

import pytest

from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.score_cache import ScoreCache, request_key
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.plugin.gate_project import _one_torch_thread  # noqa: F401 - fixture: 2 threads crawl on a shared box

PROMPTS = ["Question: What is the first step", "The quick brown fox", "প্রশ্ন: বাংলাদেশের", "He",
           "Many people live"]
SAMPLING = {"do_sample": True, "temperature": 0.8, "top_p": 0.95}


def task(tmp_path, name="gen", **generation_kwargs):
    rows = [{"question": prompt, "answer": "x"} for prompt in PROMPTS]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    kwargs = json.dumps({"until": [], "max_gen_toks": 5, **generation_kwargs})
    (tmp_path / f"{name}.yaml").write_text(textwrap.dedent(f"""
        task: {name}
        dataset_path: json
        dataset_kwargs:
          data_files: {{test: test.jsonl}}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{question}}}}"
        doc_to_target: answer
        generation_kwargs: {kwargs}
        """), encoding="utf-8")
    return prepare_task(load_task_config(tmp_path / f"{name}.yaml"))


def counting(loaded, monkeypatch) -> list[int]:
    """Rows of every `generate` call the model makes from now on."""
    calls: list[int] = []
    generate = loaded.model.generate
    monkeypatch.setattr(loaded.model, "generate", lambda **kw: calls.append(len(kw["input_ids"])) or generate(**kw))
    return calls


def answers(loaded, prepared, cache, **kwargs) -> list[str]:
    scorer = CausalLMScorer(loaded.model, loaded.tokenizer, cache=cache, fingerprint="files:tiny", **kwargs)
    return scorer.generate_task(prepared)


def rows_in(path) -> int:
    with closing(sqlite3.connect(path)) as connection:
        return connection.execute("SELECT COUNT(*) FROM generations").fetchone()[0]


@pytest.mark.parametrize("kwargs, batch_size", [({}, 1), ({}, 2), (SAMPLING, 1), (SAMPLING, 2)])
def test_a_warm_rerun_generates_nothing_and_gives_the_same_answers(tiny_loaded, tmp_path, monkeypatch, kwargs,
                                                                   batch_size):
    prepared, path = task(tmp_path, **kwargs), tmp_path / "scores.sqlite"
    uncached = answers(tiny_loaded, prepared, None, generation_batch_size=batch_size)
    assert answers(tiny_loaded, prepared, ScoreCache(path), generation_batch_size=batch_size) == uncached
    assert rows_in(path) == len(PROMPTS)
    calls = counting(tiny_loaded, monkeypatch)
    assert answers(tiny_loaded, prepared, ScoreCache(path), generation_batch_size=batch_size) == uncached
    assert calls == []


@pytest.mark.parametrize("change", ["max_gen_toks", "until", "temperature", "batch_size", "generation_config"])
def test_a_change_in_what_is_generated_misses(tiny_loaded, tmp_path, monkeypatch, change):
    path = tmp_path / "scores.sqlite"
    answers(tiny_loaded, task(tmp_path, **SAMPLING), ScoreCache(path))
    kwargs, scorer_kwargs = dict(SAMPLING), {}
    if change == "max_gen_toks":
        kwargs = {**SAMPLING, "max_gen_toks": None, "max_new_tokens": 3}  # the budget read counts, not the key
    elif change == "until":
        kwargs["until"] = ["\n"]
    elif change == "temperature":
        kwargs["temperature"] = 0.7
    elif change == "batch_size":
        scorer_kwargs = {"generation_batch_size": 2}
    else:
        monkeypatch.setattr(tiny_loaded.model.generation_config, "top_k", 5)
    calls = counting(tiny_loaded, monkeypatch)
    answers(tiny_loaded, task(tmp_path, **kwargs), ScoreCache(path), **scorer_kwargs)
    assert sum(calls) == len(PROMPTS)
    assert rows_in(path) == 2 * len(PROMPTS)


def test_greedy_answers_at_batch_size_1_are_shared_by_prompt(tiny_loaded, tmp_path, monkeypatch):
    """Another task (another name, fewer documents, another order) with the same prompts generates nothing."""
    path = tmp_path / "scores.sqlite"
    full = answers(tiny_loaded, task(tmp_path), ScoreCache(path))
    calls = counting(tiny_loaded, monkeypatch)
    other = task(tmp_path, name="other")
    subset = dataclasses.replace(other, documents=other.documents[::-1][:3])
    assert answers(tiny_loaded, subset, ScoreCache(path)) == full[::-1][:3]
    assert calls == []


def test_only_batches_with_a_missing_answer_are_generated(tiny_loaded, tmp_path, monkeypatch):
    prepared, path = task(tmp_path), tmp_path / "scores.sqlite"
    full = answers(tiny_loaded, prepared, ScoreCache(path), generation_batch_size=2)
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("DELETE FROM generations WHERE key = (SELECT MIN(key) FROM generations)")
    calls = counting(tiny_loaded, monkeypatch)
    assert answers(tiny_loaded, prepared, ScoreCache(path), generation_batch_size=2) == full
    assert len(calls) == 1 and calls[0] in (1, 2)  # five prompts: batches of 2, 2 and 1


def test_a_sampled_task_missing_one_answer_is_generated_whole_from_the_seed(tiny_loaded, tmp_path, monkeypatch):
    prepared, path = task(tmp_path, **SAMPLING), tmp_path / "scores.sqlite"
    full = answers(tiny_loaded, prepared, ScoreCache(path))
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("DELETE FROM generations WHERE key = (SELECT MIN(key) FROM generations)")
    calls = counting(tiny_loaded, monkeypatch)
    assert answers(tiny_loaded, prepared, ScoreCache(path)) == full
    assert sum(calls) == len(PROMPTS)


def test_an_interrupted_run_keeps_the_answers_it_generated(tiny_loaded, tmp_path, monkeypatch):
    prepared, path = task(tmp_path), tmp_path / "scores.sqlite"
    generate, calls = tiny_loaded.model.generate, []

    def interrupted_on_the_third_batch(**kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return generate(**kwargs)

    monkeypatch.setattr(tiny_loaded.model, "generate", interrupted_on_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        answers(tiny_loaded, prepared, ScoreCache(path))
    assert rows_in(path) == 2
    monkeypatch.setattr(tiny_loaded.model, "generate", generate)
    assert answers(tiny_loaded, prepared, ScoreCache(path)) == answers(tiny_loaded, prepared, None)


def test_a_cache_file_of_the_previous_version_is_used_and_gains_the_generations_table(tiny_loaded, tmp_path):
    path = tmp_path / "scores.sqlite"
    key = request_key("ns", "context", " continuation")
    with closing(sqlite3.connect(path)) as connection, connection:  # the previous version's schema, verbatim
        connection.execute("CREATE TABLE scores (key BLOB PRIMARY KEY, value REAL NOT NULL, created REAL NOT NULL)"
                           " WITHOUT ROWID")
        connection.execute("INSERT INTO scores VALUES (?, ?, ?)", (key, -1.25, 0.0))
    cache = ScoreCache(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get_many([key]) == {key: -1.25}
        answers(tiny_loaded, task(tmp_path), cache)
    assert cache.enabled and rows_in(path) == len(PROMPTS)


def test_a_generations_table_of_another_shape_is_another_programs_file(tiny_loaded, tmp_path):
    path = tmp_path / "scores.sqlite"
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE generations (key BLOB PRIMARY KEY, text TEXT)")
    before = path.read_bytes()
    cache = ScoreCache(path)
    with pytest.warns(UserWarning, match="score cache .* disabled for this run"):
        generated = answers(tiny_loaded, task(tmp_path), cache)
    assert generated == answers(tiny_loaded, task(tmp_path), None)
    assert not cache.enabled and path.read_bytes() == before
