"""The server backend against real HTTP servers (tests/fixtures/openai_server.py, tiny models, in their own
processes): the same log-likelihoods as the local path, several servers, faults, and the identity that keeps a
different checkpoint behind the same URL and name from reusing cached scores."""

from __future__ import annotations

import socket

import pytest

from pytest_modelbench.errors import ModelbenchError, ServerError
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.score_cache import ScoreCache
from pytest_modelbench.scoring.server.scorer import connect
from tests.fixtures.server_process import start_server

REQUESTS = [
    ("Question: What is the first step of the process? Answer:", " erosion of rocks"),
    ("Question: What is the first step of the process? Answer:", " the lazy dog"),
    ("The quick brown fox", " jumps over the lazy dog"),
    ("", "Many people live in Ethiopia."),
    ("প্রশ্ন: বাংলাদেশের রাজধানী কোথায়? উত্তর:", " ঢাকা।"),
    ("He couldn't figure out the issue with the rope, but", " he tried not to get too down on himself."),
]


@pytest.fixture(scope="module")
def tiny_other_model(tmp_path_factory):
    """The tiny model's architecture and tokenizer with other weights: "a different checkpoint"."""
    from tests.fixtures.tiny_models import build_tiny_causal_lm

    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_other") / "model", seed=1)


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
    kwargs = {"name": "org/ckpt", "timeout_s": 10.0, "retries": 2, **kwargs}
    return connect(list(urls), tokenizer=tokenizer, **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_server_scores_what_the_local_path_scores(tiny_loaded, healthy):
    local = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer).loglikelihood(REQUESTS)
    for batch_size in (1, 4):
        remote = backend(tiny_loaded.tokenizer, healthy.url, batch_size=batch_size).loglikelihood(REQUESTS)
        assert remote == pytest.approx(local, abs=1e-5)


def test_requests_longer_than_the_server_window_keep_their_last_tokens(tiny_loaded, healthy):
    """The server's max_model_len is 256: a 300-token context is cut on the left, as the local path cuts it."""
    long_context = "The quick brown fox jumps over the lazy dog near the river bank in the morning. " * 20
    request = [(long_context, " the lazy dog")]
    remote = backend(tiny_loaded.tokenizer, healthy.url)
    local = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, max_length=remote.prompt_limit - 1)
    assert len(local.encoder.encode(long_context)) > remote.prompt_limit
    assert remote.loglikelihood(request) == pytest.approx(local.loglikelihood(request), abs=1e-5)


def test_work_moves_off_a_dead_server_and_spreads_over_live_ones(tiny_loaded, tiny_model, healthy):
    second = start_server(tiny_model, "replica/ckpt")  # the same checkpoint, served under another name
    try:
        scorer = backend(tiny_loaded.tokenizer, healthy.url, second.url, concurrency=4)
        before = [healthy.stats()["prompts"], second.stats()["prompts"]]
        values = scorer.loglikelihood(REQUESTS * 4)
        after = [healthy.stats()["prompts"], second.stats()["prompts"]]
        assert all(b > a for a, b in zip(before, after))  # both took work
        second.kill()  # dies between calls: the other server takes all of the next call's work
        again = scorer.loglikelihood(list(reversed(REQUESTS * 4)))
        assert again == pytest.approx(list(reversed(values)), abs=1e-5)
    finally:
        second.kill()


def test_transient_failures_are_retried(tiny_loaded, served):
    # one request in flight: with the server failing every other request, each retry then succeeds
    scorer = backend(tiny_loaded.tokenizer, served.url, concurrency=1)
    served.set_fault("flaky")  # every other request answers 503
    try:
        assert len(scorer.loglikelihood(REQUESTS)) == len(REQUESTS)
    finally:
        served.set_fault("none")


@pytest.mark.parametrize(("fault", "message"), [
    ("error", r"no scoring server could answer: .*HTTP 500: injected failure"),
    ("hang", r"no scoring server could answer: .*no answer within 1 s"),
    ("drop", r"no scoring server could answer: "),
    ("truncated", r"log-probabilities for a prompt of \d+ tokens \(truncated\)"),
    ("generated_only", r"generated token only.*llama\.cpp server limitation.*cannot score log-likelihoods"),
    ("wrong_echo", r"echoed token \d+ at position 1 where \d+ was sent"),
    ("extra_token", r"log-probabilities for a prompt of \d+ tokens and 1 generated token, and no echoed token ids"),
    ("no_usage", r"echoes no token ids .* and reports no usage\.prompt_tokens"),
])
def test_a_misbehaving_server_is_a_named_error_and_nothing_is_cached(tiny_loaded, served, tmp_path, fault, message):
    cache = ScoreCache(tmp_path / "scores.sqlite")
    scorer = backend(tiny_loaded.tokenizer, served.url, timeout_s=1.0, retries=1, cache=cache, batch_size=2)
    served.set_fault(fault)
    try:
        # a transient fault past its retries leaves the request unscored, which a loose request cannot be: an error
        with pytest.raises(ModelbenchError, match=message) as error:
            scorer.loglikelihood(REQUESTS)
    finally:
        served.set_fault("none")
    assert served.url in str(error.value)
    assert cache.get_many([bytes(32)]) == {} and cache.writes == 0


def test_a_server_that_echoes_token_text_is_checked_by_count_and_scores_as_the_local_path(tiny_loaded, served):
    """No echoed ids (SGLang's form): the exact count and the server's `usage.prompt_tokens` show that the values are
    those of the tokens sent. (The old code accepted this too; the refusals of the same form without `usage` or with
    an extra token are in test_a_misbehaving_server_is_a_named_error_and_nothing_is_cached.)"""
    local = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer).loglikelihood(REQUESTS)
    served.set_fault("text_tokens")
    try:
        remote = backend(tiny_loaded.tokenizer, served.url, batch_size=4).loglikelihood(REQUESTS)
    finally:
        served.set_fault("none")
    assert remote == pytest.approx(local, abs=1e-5)


def test_a_server_that_is_down_from_the_start_is_named(tiny_loaded):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ServerError, match=rf"server {url}: .*refused.*\(after 2 tries\)"):
        backend(tiny_loaded.tokenizer, url, retries=1)


def test_the_served_model_must_be_the_one_asked_for(tiny_loaded, healthy):
    with pytest.raises(ServerError, match=r"does not serve 'org/other' \(it serves: org/ckpt\)"):
        backend(tiny_loaded.tokenizer, healthy.url, served_model="org/other")


def test_another_checkpoint_behind_the_same_url_and_name_reuses_no_cached_score(
        tiny_loaded, tiny_model, tiny_other_model, tmp_path):
    cache_path = tmp_path / "cache" / "scores.sqlite"
    first = start_server(tiny_model, "org/ckpt")
    port = first.port
    try:
        scorer = backend(tiny_loaded.tokenizer, first.url, cache=ScoreCache(cache_path))
        original = scorer.loglikelihood(REQUESTS)
        fingerprint = scorer.describe().fingerprint
    finally:
        first.kill()

    swapped = start_server(tiny_other_model, "org/ckpt", port=port)  # same URL, same name, other weights
    try:
        scorer = backend(tiny_loaded.tokenizer, swapped.url, cache=ScoreCache(cache_path))
        assert scorer.describe().fingerprint != fingerprint
        before = swapped.stats()["prompts"]
        values = scorer.loglikelihood(REQUESTS)
        assert swapped.stats()["prompts"] - before == len(REQUESTS)  # every request scored, none from the cache
        assert values != pytest.approx(original, abs=1e-3)
    finally:
        swapped.kill()

    restarted = start_server(tiny_model, "org/ckpt", port=port)  # the first checkpoint again: its scores are reused
    try:
        scorer = backend(tiny_loaded.tokenizer, restarted.url, cache=ScoreCache(cache_path))
        assert scorer.describe().fingerprint == fingerprint
        before = restarted.stats()["prompts"]
        assert scorer.loglikelihood(REQUESTS) == original
        assert restarted.stats()["prompts"] == before
    finally:
        restarted.kill()


def test_servers_of_one_run_must_serve_the_same_weights(tiny_loaded, tiny_other_model, healthy):
    other = start_server(tiny_other_model, "org/ckpt")
    try:
        with pytest.raises(ServerError, match=r"\('org/ckpt'\) score the identity probe differently"):
            backend(tiny_loaded.tokenizer, healthy.url, other.url)
    finally:
        other.kill()


def test_a_hung_server_does_not_hold_up_the_run(tiny_loaded, tiny_model, healthy):
    """A server that stops answering (no error, no close) after the run began: its batches are sent again to the
    other server after a few batch-times, long before the 120 s request timeout."""
    import time

    stuck = start_server(tiny_model, "org/ckpt")
    try:
        scorer = backend(tiny_loaded.tokenizer, healthy.url, stuck.url, timeout_s=120.0, concurrency=2)
        expected = scorer.loglikelihood(REQUESTS)
        stuck.set_fault("hang")
        started = time.monotonic()
        assert scorer.loglikelihood(list(reversed(REQUESTS * 3))) == pytest.approx(
            list(reversed(expected * 3)), abs=1e-5)
        assert time.monotonic() - started < 30
    finally:
        stuck.kill()


def test_a_server_that_takes_one_prompt_per_request_gets_one(tiny_loaded, served):
    served.set_fault("one_prompt")
    try:
        with pytest.warns(UserWarning, match="refused several prompts in one request; sending one prompt per request"):
            scorer = backend(tiny_loaded.tokenizer, served.url, batch_size=4)
        assert scorer.prompts_per_request == 1
        assert len(scorer.loglikelihood(REQUESTS)) == len(REQUESTS)
    finally:
        served.set_fault("none")


def test_a_hung_server_is_given_up_after_one_round_of_timeouts_and_for_the_rest_of_the_session(tiny_loaded, served):
    """Issue 50: a server that accepts connections and never answers. Its 8 workers' timeouts come at once and count
    together: 5 in a row (retries 4) and it is down after about one timeout, not five; the session's next call gives
    it no worker and fails at once, naming it."""
    import time

    scorer = backend(tiny_loaded.tokenizer, served.url, timeout_s=1.0, retries=4, concurrency=8, batch_size=1)
    served.set_fault("hang")
    try:
        started = time.monotonic()
        with pytest.raises(ModelbenchError, match=r"no answer within 1 s"):
            scorer.loglikelihood(REQUESTS * 4)
        first = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(ModelbenchError, match=r"given up for the rest of this session after 5 timeouts in a row"):
            scorer.loglikelihood(list(reversed(REQUESTS)))
        second = time.monotonic() - started
    finally:
        served.set_fault("none")
    # one timeout and the batches' spread; five rounds of timeouts and backoffs took 12 s and more
    assert first < 5.0, first
    assert second < 2.0, second  # no worker at all: no timeout waited
