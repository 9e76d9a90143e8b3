"""scoring/replay.py: a task's recorded outputs, read back from the record's JSON, answer the same requests (every
output type), and only those: a changed target, a document the run did not score, another output type, or a
malformed record is a RescoreError naming the record, the task and the document or key."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import strategies as st

from pytest_modelbench.scoring.backend import BackendInfo, Unscored
from pytest_modelbench.scoring.replay import (
    RecordedOutputs, ReplayBackend, RescoreError, request_digests, task_key, task_outputs,
)
from pytest_modelbench.tasks.generation_settings import GenerationSettings
from pytest_modelbench.tasks.requests import DocumentRequests
from tests.unit.test_parser_properties import JSON_VALUES, _paths, run_property

ROOT = Path("/project")
INFO = BackendInfo("m", "weights:1", "causal", "float32", "cpu", {"add_bos_token": True})


def prepared(output_type: str, continuations=(" a", " b"), doc_ids=(0, 1, 2), until=("\n",), draws=1, seed=1234):
    """A task of `output_type`; with `draws` > 1 a sampled generate_until task of that many draws a document."""
    decoding = (("do_sample", True), ("temperature", 0.8)) if draws > 1 else (("do_sample", False),)
    config = SimpleNamespace(output_type=output_type, source=ROOT / "suites" / "s" / "t.yaml", task="t",
                             masked_protocol=None, generation=GenerationSettings(until, 16, decoding), repeats=draws,
                             draws=draws)
    rolling = output_type == "loglikelihood_rolling"
    documents = [DocumentRequests(i, "" if rolling else f"Q{i}:", (), () if rolling else tuple(continuations),
                                  f"text {i}", None, {}) for i in doc_ids]
    return SimpleNamespace(config=config, documents=documents, sampling_seed=seed)


def replay(task, loglikelihoods, generations=None, greedy=None) -> ReplayBackend:
    """A backend over a record holding `task`'s outputs, as read back from the record's JSON text."""
    raw = {"backend": INFO.__dict__, "tasks": {task_key(task.config, ROOT): [
        task_outputs(task, loglikelihoods, generations, greedy)]}}
    return ReplayBackend(RecordedOutputs.from_json(json.loads(json.dumps(raw)), "run.json"), ROOT)


def test_every_output_type_replays_what_was_recorded_and_the_recorded_backend():
    choices = prepared("multiple_choice")
    values = [[-1.25, -2.5], [-0.1, -3.0], [-7.0, -0.5]]
    assert replay(choices, values).score_task(choices) == [-1.25, -2.5, -0.1, -3.0, -7.0, -0.5]
    target = prepared("loglikelihood", continuations=(" yes",))
    backend = replay(target, [[-1.5], [-2.0], [-0.25]], greedy=[True, False, True])
    assert backend.loglikelihood_task(target) == [(-1.5, True), (-2.0, False), (-0.25, True)]
    text = prepared("loglikelihood_rolling")
    assert replay(text, [[-10.0], [-20.5], [-30.0]]).rolling_loglikelihood_task(text) == [-10.0, -20.5, -30.0]
    generation = prepared("generate_until")
    backend = replay(generation, [[], [], []], generations=["x", " y", "z\t"])
    assert backend.generate_task(generation) == ["x", " y", "z\t"]
    assert backend.describe() == INFO


def test_a_sampled_tasks_draws_replay_in_order_and_another_seed_or_draw_count_is_refused():
    """Issue 52: a document's draws are recorded as the list of them and replayed flat, draw by draw, as the front
    asks them; the seed and the number of draws are part of what was asked, so another of either is not replayed."""
    sampled = prepared("generate_until", draws=3, seed=7)
    draws = [["a", "b", "a"], ["c", "c", "d"], ["e", "f", "g"]]
    backend = replay(sampled, [[], [], []], generations=draws)
    assert backend.generate_task(sampled) == [draw for document in draws for draw in document]
    with pytest.raises(RescoreError, match="document 0: its requests differ from the ones recorded"):
        backend.generate_task(prepared("generate_until", draws=3, seed=8))
    with pytest.raises(RescoreError, match="document 0: its requests differ from the ones recorded"):
        backend.generate_task(prepared("generate_until", draws=4, seed=7))


def test_a_greedy_generation_request_is_digested_as_before_draws_existed():
    """Run records written before sampled draws existed replay: a greedy request's digest covers what it did then
    (context and settings), not the seed or draw number every request now carries."""
    from pytest_modelbench.scoring.replay import _digest

    task = prepared("generate_until", doc_ids=(0,))
    then = {"context": "Q0:", "settings": {"until": ["\n"], "max_gen_toks": 16, "decoding": [["do_sample", False]]}}
    assert request_digests(task) == [(_digest("Q0:"), _digest(then))]


def test_a_subset_of_the_recorded_documents_replays_theirs():  # --early-stop scores blocks of documents
    task = prepared("multiple_choice")
    backend = replay(task, [[-1.0, -2.0], [-3.0, -4.0], [-5.0, -6.0]])
    assert backend.score_task(prepared("multiple_choice", doc_ids=(2, 0))) == [-5.0, -6.0, -1.0, -2.0]


def test_a_document_the_recorded_run_left_unscored_is_replayed_unscored():
    """Its task's integrity limits then judge the re-scored run as they judged the recorded one (docs/integrity.md)."""
    scored = prepared("multiple_choice", doc_ids=(0, 2))  # the evaluation holds its scored documents only
    raw = {"backend": INFO.__dict__, "tasks": {task_key(scored.config, ROOT): [task_outputs(
        scored, [[-1.0, -2.0], [-5.0, -6.0]], None, None, unscored=[(1, "HTTP 500 after 5 tries")])]}}
    backend = ReplayBackend(RecordedOutputs.from_json(json.loads(json.dumps(raw)), "run.json"), ROOT)
    values = backend.score_task(prepared("multiple_choice"))
    assert values[:2] == [-1.0, -2.0] and values[4:] == [-5.0, -6.0]
    assert [v.reason for v in values[2:4]] == ["unscored in the run recorded in run.json: HTTP 500 after 5 tries"] * 2
    target = prepared("loglikelihood", continuations=(" yes",), doc_ids=(0,))
    raw["tasks"] = {task_key(target.config, ROOT): [task_outputs(target, [[-1.5]], None, [True], unscored=[(1, "x")])]}
    backend = ReplayBackend(RecordedOutputs.from_json(json.loads(json.dumps(raw)), "run.json"), ROOT)
    first, second = backend.loglikelihood_task(prepared("loglikelihood", continuations=(" yes",), doc_ids=(0, 1)))
    assert first == (-1.5, True) and isinstance(second, Unscored)
    raw["tasks"][task_key(target.config, ROOT)][0]["unscored"] = [[1]]
    with pytest.raises(RescoreError, match=r"unscored\[0\]' must be \[document id, why it is unscored\]"):
        RecordedOutputs.from_json(raw, "run.json")


@pytest.mark.parametrize(("changed", "message"), [
    (dict(continuations=(" a", " c")), "document 0: its requests differ from the ones recorded in run.json"),
    (dict(doc_ids=(0, 1, 2, 3)), "document 3: not scored in the run recorded in run.json (it scored 3 documents"),
])
def test_requests_that_differ_from_the_recorded_ones_are_refused_naming_the_document(changed, message):
    backend = replay(prepared("multiple_choice"), [[-1.0, -2.0]] * 3)
    with pytest.raises(RescoreError) as caught:
        backend.score_task(prepared("multiple_choice", **changed))
    assert str(caught.value).startswith(f"{ROOT}/suites/s/t.yaml: task 't', {message}")


def test_changed_generation_settings_or_output_type_or_another_task_are_refused():
    backend = replay(prepared("generate_until"), [[]] * 3, generations=["a", "b", "c"])
    with pytest.raises(RescoreError, match="document 0: its requests differ .*generation settings"):
        backend.generate_task(prepared("generate_until", until=("\n\n",)))
    with pytest.raises(RescoreError, match="output_type: multiple_choice now, generate_until in run.json"):
        backend.score_task(prepared("multiple_choice"))
    other = prepared("generate_until")
    other.config.task = "u"
    with pytest.raises(RescoreError, match=r"task 'u': not scored in the recorded run \(no outputs under "
                                           r"'suites/s/t.yaml::u'\)"):
        backend.generate_task(other)


@pytest.mark.parametrize(("raw", "key"), [
    (None, "outputs"),
    ({"backend": {"name": "m"}, "tasks": {}}, "outputs.backend"),
    ({"backend": INFO.__dict__, "tasks": []}, "outputs.tasks"),
    ({"backend": INFO.__dict__, "tasks": {"k": [{"output_type": "ranking", "documents": []}]}},
     "outputs.tasks['k'][0]"),
    ({"backend": INFO.__dict__,
      "tasks": {"k": [{"output_type": "loglikelihood", "documents": [[0, "p", "r", -1.0]]}]}},
     "outputs.tasks['k'][0].documents[0]"),
])
def test_malformed_outputs_are_one_error_naming_the_record_and_key(raw, key):
    with pytest.raises(RescoreError) as caught:
        RecordedOutputs.from_json(raw, "run.json")
    assert str(caught.value).startswith("run.json: ") and f"'{key}'" in str(caught.value)


def test_two_shards_outputs_joined_answer_both_shards_tasks():
    first, second = prepared("multiple_choice"), prepared("multiple_choice")
    second.config.task = "u"
    records = [RecordedOutputs.from_json({"backend": INFO.__dict__, "tasks": {task_key(task.config, ROOT): [
        task_outputs(task, [[-1.0 - k, -2.0]] * 3, None, None)]}}, f"shard-{k}.json")
        for k, task in enumerate((first, second), start=1)]
    backend = ReplayBackend(records[0].joined(records[1], "shard-2.json"), ROOT)
    assert backend.score_task(first) == [-2.0, -2.0] * 3 and backend.score_task(second) == [-3.0, -2.0] * 3


def test_outputs_of_two_backends_are_not_joined():
    first = RecordedOutputs(INFO, {})
    other = RecordedOutputs(BackendInfo("m", "weights:2", "causal", "float32", "cpu"), {})
    with pytest.raises(RescoreError, match="shard-2.json: its outputs are from another backend"):
        first.joined(other, "shard-2.json")


def test_recorded_outputs_with_any_value_anywhere_are_read_or_refused_by_name():
    """A record's outputs with any one value replaced by any JSON value read, or are a RescoreError naming the
    record: never another error (a sealed record is ours, but its reader is the last line against a damaged one)."""
    task = prepared("loglikelihood", continuations=(" yes",))
    outputs = {"backend": INFO.__dict__, "tasks": {task_key(task.config, ROOT): [
        task_outputs(task, [[-1.5], [-2.0], [-0.25]], None, [True, False, True])]}}
    outputs = json.loads(json.dumps(outputs))
    paths = [path for path in _paths(outputs) if path]

    def check(drawn):
        index, value = drawn
        changed = json.loads(json.dumps(outputs))
        *parents, last = paths[index % len(paths)]
        holder = changed
        for step in parents:
            holder = holder[step]
        holder[last] = value
        try:
            RecordedOutputs.from_json(changed, "run.json")
        except RescoreError as exc:
            assert str(exc).startswith("run.json: ")

    run_property(1000, st.tuples(st.integers(min_value=0), JSON_VALUES), check)
