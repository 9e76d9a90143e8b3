"""generate_until and loglikelihood_rolling through the server backend, against real HTTP servers
(tests/fixtures/openai_server.py over the tiny model, in their own processes): the local path's answers and
rolling log-likelihoods, the decoding settings sent, the score cache keyed by the servers' identity, several
servers, and servers that drop the stop, truncate, overrun the budget or return text that is not their tokens."""

from __future__ import annotations

import dataclasses
import json
import textwrap
import time

import pytest

from pytest_modelbench.errors import ModelLoadError, ServerError, TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.score_cache import ScoreCache
from pytest_modelbench.scoring.server.scorer import connect
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.server_process import start_server
from tests.plugin.gate_project import _one_torch_thread  # noqa: F401 - fixture: 2 threads crawl on a shared box

PROMPTS = ["Question: What is the first step", "The quick brown fox", "প্রশ্ন: বাংলাদেশের", "He",
           "Many people live in", "Kysymys: Mikä on"]
TEXTS = ["The quick brown fox jumps over the lazy dog near the river bank.", "He couldn't figure out the rope.",
         "প্রশ্ন: বাংলাদেশের রাজধানী কোথায়?", "Many people live in Ethiopia."]


@pytest.fixture(scope="module")
def tiny_other_model(tmp_path_factory):
    from tests.fixtures.tiny_models import build_tiny_causal_lm

    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_other_gen") / "model", seed=1)


@pytest.fixture(scope="module")
def served(tiny_model):
    server = start_server(tiny_model, "org/ckpt")
    yield server
    server.kill()


@pytest.fixture
def healthy(served):
    served.set_fault("none")
    return served


def backend(tokenizer, *urls, **kwargs):
    kwargs = {"name": "org/ckpt", "timeout_s": 10.0, "retries": 1, **kwargs}
    return connect(list(urls), tokenizer=tokenizer, **kwargs)


def generative_task(tmp_path, name="gen", prompts=PROMPTS, **generation_kwargs):
    rows = [{"question": prompt, "answer": "x"} for prompt in prompts]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    kwargs = json.dumps({"until": [], "max_gen_toks": 6, **generation_kwargs})
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


def rolling_task(tmp_path):
    (tmp_path / "ppl.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    (tmp_path / "ppl.yaml").write_text(textwrap.dedent("""
        task: ppl
        dataset_path: json
        dataset_kwargs:
          data_files: {test: ppl.jsonl}
        test_split: test
        output_type: loglikelihood_rolling
        doc_to_target: text
        """), encoding="utf-8")
    return prepare_task(load_task_config(tmp_path / "ppl.yaml"))


def local_answers(tiny_loaded, prepared, max_length):
    return CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, max_length=max_length).generate_task(prepared)


def stop_from_a_free_answer(tiny_loaded, tmp_path) -> str:
    """A stop sequence taken from the middle of the first free-running answer, so that the stop is actually hit."""
    free = local_answers(tiny_loaded, generative_task(tmp_path / "free", max_gen_toks=12), 256)
    assert all(free)  # the test would be vacuous if the model only produced end-of-sequence
    return free[0][3:5]


# --- the local path's answers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_size", [1, 4])
def test_greedy_answers_are_the_local_paths_with_stops_and_budget(tiny_loaded, healthy, tmp_path, batch_size):
    (tmp_path / "free").mkdir()
    stop = stop_from_a_free_answer(tiny_loaded, tmp_path)
    prepared = generative_task(tmp_path, until=[stop, "০"], max_gen_toks=12)
    remote = backend(tiny_loaded.tokenizer, healthy.url, batch_size=batch_size)
    expected = local_answers(tiny_loaded, prepared, remote.max_length)
    before = healthy.stats()["generations"]
    assert remote.generate_task(prepared) == expected
    assert healthy.stats()["generations"] - before == len(PROMPTS) + 4  # and the generation probe's 4 texts
    assert expected[0] == expected[0].split(stop)[0] and len(set(expected)) > 1
    sent = healthy.last()
    assert sent["stop"] == [stop, "০", tiny_loaded.tokenizer.eos_token]  # lm-eval's: until plus the EOS text
    assert sent["max_tokens"] == 12 and sent["temperature"] == 0.0 and "seed" not in sent
    assert isinstance(sent["prompt"][0], list)  # token ids, never text


def test_contexts_longer_than_the_server_window_are_cut_as_the_local_path_cuts_them(tiny_loaded, tiny_model, tmp_path):
    server = start_server(tiny_model, "org/ckpt", max_model_len=14)  # max_length 12: contexts keep 12 - 6 = 6 tokens
    try:
        prepared = generative_task(tmp_path)
        remote = backend(tiny_loaded.tokenizer, server.url)
        assert remote.max_length == 12
        assert max(len(tiny_loaded.tokenizer.encode(p)) for p in PROMPTS) > 6
        assert remote.generate_task(prepared) == local_answers(tiny_loaded, prepared, 12)
        assert all(len(prompt) <= 6 for prompt in server.last()["prompt"])
    finally:
        server.kill()


def test_rolling_loglikelihoods_are_the_local_paths_over_the_same_windows(tiny_loaded, healthy, tmp_path):
    prepared = rolling_task(tmp_path)
    remote = backend(tiny_loaded.tokenizer, healthy.url, batch_size=3, scorer_kwargs={"max_length": 5})
    assert remote.max_length == 5  # most texts span several windows
    local = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, max_length=5)
    before = healthy.stats()["prompts"]
    values = remote.rolling_loglikelihood_task(prepared)
    assert healthy.stats()["prompts"] - before > 2 * len(TEXTS)
    assert values == pytest.approx(local.rolling_loglikelihood_task(prepared), abs=1e-4)
    scores = evaluate_task(prepared, remote).scores.overall
    assert scores["word_perplexity"].value == pytest.approx(evaluate_task(prepared, local).scores.overall[
        "word_perplexity"].value, rel=1e-5)


def test_a_warm_rerun_sends_nothing_and_a_sampled_task_sends_its_settings_and_seed(tiny_loaded, healthy, tmp_path):
    cache = tmp_path / "cache" / "scores.sqlite"
    greedy = generative_task(tmp_path)
    first = backend(tiny_loaded.tokenizer, healthy.url, cache=ScoreCache(cache)).generate_task(greedy)
    before = healthy.stats()["generations"]
    again = backend(tiny_loaded.tokenizer, healthy.url, cache=ScoreCache(cache))
    assert again.generate_task(greedy) == first
    assert healthy.stats()["generations"] == before + 4  # the generation probe's 4 texts only
    (tmp_path / "sampled").mkdir()
    sampled = generative_task(tmp_path / "sampled", name="sampled", do_sample=True, temperature=0.8, top_p=0.95)
    drawn = again.generate_task(sampled)
    sent = healthy.last()
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["seed"]) == (0.8, 0.95, 50, 1234)
    assert backend(tiny_loaded.tokenizer, healthy.url).generate_task(sampled) == drawn  # seeded per request


def test_a_setting_a_server_cannot_take_is_refused_with_the_task_named(tiny_loaded, healthy, tmp_path):
    prepared = generative_task(tmp_path, num_beams=2)
    with pytest.raises(TaskConfigError, match=r"gen.yaml: task 'gen': generation_kwargs.num_beams = 2 cannot be sent "
                                              r"to a scoring server"):
        evaluate_task(prepared, backend(tiny_loaded.tokenizer, healthy.url))


def test_loglikelihood_tasks_are_still_refused_by_name(tiny_loaded, healthy):
    from types import SimpleNamespace

    prepared = SimpleNamespace(config=SimpleNamespace(source="t.yaml", task="t", output_type="loglikelihood"))
    with pytest.raises(ModelLoadError, match="t.yaml: task 't': loglikelihood tasks are not supported by the scoring "
                                             "server"):
        backend(tiny_loaded.tokenizer, healthy.url).loglikelihood_task(prepared)


# --- servers that do not do what was asked --------------------------------------------------------------------------

@pytest.mark.parametrize(("fault", "message"), [
    ("drop_stop", r"document \d+: generated past the stop sequence '.*' \(it is in the text before the last of \d+ "
                  r"tokens\): it did not take the task's stops"),
    ("short_generation", r"document \d+: the generation ends after \d+ of 12 tokens with no stop sequence or "
                         r"end-of-sequence token \(finish_reason 'length'\): truncated"),
    ("wrong_text", r"document \d+: returned the text 'Z.*' for token ids that decode to '.*': its text is not its "
                   r"tokens"),
    ("text_tokens", r"returned a generation with token '<\d+>' where generated token ids were asked for"),
    ("over_budget", r"generated 14 tokens where at most 12 were asked for \(max_tokens\)"),
])
def test_a_server_that_does_not_honour_the_request_is_a_named_error_and_nothing_is_cached(
        tiny_loaded, served, tmp_path, fault, message):
    (tmp_path / "free").mkdir()
    stop = stop_from_a_free_answer(tiny_loaded, tmp_path)
    prepared = generative_task(tmp_path, until=[stop], max_gen_toks=12)
    cache = ScoreCache(tmp_path / "scores.sqlite")
    # one request for every document: a request with one wrong answer is refused whole (answers of requests that
    # passed every check are right answers and are cached)
    scorer = backend(tiny_loaded.tokenizer, served.url, cache=cache, batch_size=len(PROMPTS))
    scorer.generation_identity()  # probed while the server behaves
    served.set_fault(fault)
    try:
        with pytest.raises(ServerError, match=message) as error:
            evaluate_task(prepared, scorer)
    finally:
        served.set_fault("none")
    assert f"server {served.url}" in str(error.value)
    if fault not in ("text_tokens", "over_budget"):  # those are refused by the client, before a document is known
        assert "gen.yaml: task 'gen'" in str(error.value)
    assert cache.writes == 0


# --- identity and several servers -----------------------------------------------------------------------------------

def test_another_checkpoint_behind_the_same_url_and_name_is_generated_again(
        tiny_loaded, tiny_model, tiny_other_model, tmp_path):
    cache_path = tmp_path / "cache" / "scores.sqlite"
    prepared = generative_task(tmp_path, max_gen_toks=8)
    first = start_server(tiny_model, "org/ckpt")
    port = first.port
    try:
        original = backend(tiny_loaded.tokenizer, first.url, cache=ScoreCache(cache_path)).generate_task(prepared)
    finally:
        first.kill()
    swapped = start_server(tiny_other_model, "org/ckpt", port=port)  # same URL, same name, other weights
    try:
        answers = backend(tiny_loaded.tokenizer, swapped.url, cache=ScoreCache(cache_path)).generate_task(prepared)
        assert swapped.stats()["generations"] == len(PROMPTS) + 4  # every document generated, plus the probe's 4
        assert answers != original
    finally:
        swapped.kill()
    restarted = start_server(tiny_model, "org/ckpt", port=port)  # the first checkpoint again: its answers are reused
    try:
        again = backend(tiny_loaded.tokenizer, restarted.url, cache=ScoreCache(cache_path)).generate_task(prepared)
        assert again == original
        assert restarted.stats()["generations"] == 4  # the generation probe only
    finally:
        restarted.kill()


def test_generations_move_off_a_hung_server_and_are_retried_on_a_flaky_one(tiny_loaded, tiny_model, healthy, tmp_path):
    prepared = generative_task(tmp_path, max_gen_toks=4)
    expected = local_answers(tiny_loaded, prepared, 254)
    stuck = start_server(tiny_model, "replica/ckpt")  # the same checkpoint under another name
    try:
        scorer = backend(tiny_loaded.tokenizer, healthy.url, stuck.url, timeout_s=120.0, concurrency=2)
        scorer.generation_identity()
        stuck.set_fault("hang")
        started = time.monotonic()
        assert scorer.generate_task(prepared) == expected
        assert time.monotonic() - started < 60
    finally:
        stuck.kill()
    healthy.set_fault("flaky")  # every other request answers 503
    try:
        assert backend(tiny_loaded.tokenizer, healthy.url, concurrency=1, retries=2).generate_task(
            prepared) == expected
    finally:
        healthy.set_fault("none")


def test_servers_that_generate_differently_are_refused(tiny_loaded, healthy, monkeypatch):
    """Same weights by the log-probability probe, but one server generates otherwise (its generation config, say)."""
    from pytest_modelbench.scoring.server.client import CompletionsServer, Generated

    scorer = backend(tiny_loaded.tokenizer, healthy.url, healthy.url)
    original = CompletionsServer.generate
    calls = []

    def second_differs(self, model, prompts, **kwargs):
        generated = original(self, model, prompts, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            generated = [Generated(g.ids[:-1] + (0,), g.text, g.finish_reason, g.server) for g in generated]
        return generated

    monkeypatch.setattr(CompletionsServer, "generate", second_differs)
    with pytest.raises(ServerError, match="generate differently after the identity probe"):
        scorer.generation_identity()


def test_a_sampled_task_with_repeats_draws_each_document_under_a_seed_per_draw_on_a_server(
        tiny_loaded, healthy, tmp_path):
    """A server seeds every prompt of a request alike: a document's draws go out under seeds of their own (the run's
    seed plus the draw's number), so they differ, and a second run draws them again."""
    sampled = generative_task(tmp_path, name="sampled", do_sample=True, temperature=1.0)
    (tmp_path / "sampled.yaml").write_text((tmp_path / "sampled.yaml").read_text() + "repeats: 3\n")
    prepared = prepare_task(load_task_config(tmp_path / "sampled.yaml"), sampling_seed=40)
    remote = backend(tiny_loaded.tokenizer, healthy.url)
    drawn = remote.generate_task(prepared)
    assert len(drawn) == 3 * len(PROMPTS) and len(sampled.documents) == len(PROMPTS)
    per_document = [drawn[3 * d:3 * d + 3] for d in range(len(PROMPTS))]
    assert any(len(set(draws)) > 1 for draws in per_document)  # one seed for all three would draw them alike
    assert healthy.last()["seed"] == 42  # the last draw: 40 + 2
    assert backend(tiny_loaded.tokenizer, healthy.url).generate_task(prepared) == drawn


def test_a_served_sampled_run_is_compared_with_a_local_one_and_its_draw_is_recorded_apart():
    """Issue 52: a server's sampler and torch's draw from the same distribution, and the gate's paired test sees that
    noise: the protocol (what is compared) names what is sampled, the provenance's `sampling` which draw it was."""
    from types import SimpleNamespace

    from pytest_modelbench.gate.provenance import sampling_draw, scoring_protocol
    from pytest_modelbench.scoring.backend import BackendInfo

    generation = SimpleNamespace(sampling=True, label=lambda: "do_sample=True, temperature=0.8")
    config = SimpleNamespace(generation=generation, draws=5)
    evaluation = SimpleNamespace(generations=["x"], prepared=SimpleNamespace(config=config, sampling_seed=7))
    local_backend = BackendInfo("m", "f", "causal", "float32", "cpu")
    served_backend = BackendInfo("m", "f", "causal", "", "server http://a:8000/v1 (serving m)")
    local, served = (scoring_protocol(evaluation, backend) for backend in (local_backend, served_backend))
    assert local == served == ("causal-lm sampled generation (do_sample=True, temperature=0.8; 5 draw(s) a "
                               "document), lm-eval 0.4.13 generate_until rules")
    assert sampling_draw(evaluation, local_backend, 4) == "torch seed 7 per task, batch size 4"
    assert sampling_draw(evaluation, served_backend, 4) == "server sampler, seed 7 per request (plus the draw's number)"


def test_retries_are_counted_and_requests_that_still_fail_are_unscored_never_cached(tiny_loaded, healthy, tmp_path):
    """Integrity before quality (docs/integrity.md) on a server: 503s retried are counted and the answers are the
    healthy server's; 500s past the retries leave their documents unscored (the gate's `error`), cache nothing, and
    the re-run generates exactly those."""
    from pytest_modelbench.gate.integrity import IntegrityLimits, integrity_problems

    prepared = generative_task(tmp_path, max_gen_toks=4)
    expected = local_answers(tiny_loaded, prepared, 254)
    cache = ScoreCache(tmp_path / "scores.sqlite")
    scorer = backend(tiny_loaded.tokenizer, healthy.url, concurrency=1, retries=2, cache=cache)
    half = dataclasses.replace(prepared, documents=prepared.documents[:3])
    healthy.set_fault("flaky")  # every other request answers 503: each retried once, then answered
    try:
        transient = evaluate_task(half, scorer)
        healthy.set_fault("error")  # every request answers 500: the rest cannot be scored
        permanent = evaluate_task(prepared, scorer)
    finally:
        healthy.set_fault("none")
    assert transient.integrity.retried >= 2 and transient.integrity.unscored == ()
    assert transient.generations == expected[:3]
    assert permanent.generations == expected[:3]  # the first three from the cache, the rest unscored
    assert [p.doc_id for p in permanent.integrity.unscored] == [3, 4, 5]
    assert "HTTP 500: injected failure" in permanent.integrity.unscored[0].problem
    assert integrity_problems(permanent.integrity, IntegrityLimits(), recording=False) == [
        "3 of 6 documents unscored (50.0%, limit 1.0%)"]
    generated_before = healthy.stats()["generations"]
    rerun = evaluate_task(prepared, scorer)
    assert rerun.generations == expected and rerun.integrity.unscored == ()
    assert healthy.stats()["generations"] - generated_before == 3  # nothing of the failed requests was cached
