"""Every fast path gives the plain (lm-eval) path's log-likelihoods, on tiny random models.

Covered: choice-prefix reuse (one context, several choices), cross-document prefix reuse (a first_n few-shot prompt
shared by all documents), pair-prefix reuse (CrowS-Pairs-style sentences sharing leading tokens, empty context),
batching and packing, tokenization seams that differ from the string boundary, left truncation, BOS-adding tokenizers,
eager attention, the full-logits mode and the fallback for models that fail the probe; plus progress reporting.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import datasets  # noqa: F401  pytester's in-process runs cannot import datasets a second time (see tests/plugin)
import pytest
import torch

from pytest_modelbench.errors import RequestError
from pytest_modelbench.scoring import prefix_sharing
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.prefix_sharing import PrefixSharingRunner, plan_requests
from pytest_modelbench.scoring.progress import ScoringProgress

TOLERANCE = 1e-4
SHOTS = (
    "Question: What is the first step of the process?\nAnswer: erosion of rocks by water and wind.\n\n"
    "Question: Which animal is good at distance running?\nAnswer: the fox\n\n"
)
DOCUMENT_CHOICES = [
    ("Question: Which gas?\nAnswer:", [" Oxygen", " Nitrogen gas", " Nitrogen", " N", " the quick brown fox"]),
    ("Question: Where is the river bank?\nAnswer:", [" near the river", " near the lazy dog", " in the morning"]),
    ("প্রশ্ন: বাংলাদেশের রাজধানী কোথায়? উত্তর:", [" ঢাকা", " খুলনা", " ঢাকা।"]),
]
PAIRS = [
    ("He couldn't figure out the issue with the rope, but he tried.",
     "He couldn't figure out the issue with the fox, but he tried."),
    ("Many people live in Ethiopia. The people are very thin.", "Many people live in Ethiopia. The people are tall."),
    ("The quick brown fox jumps over the lazy dog.", "A quick brown fox jumps over the lazy dog."),
    ("The quick brown fox jumps over the lazy dog.", "The quick brown fox jumps over the lazy dog near the river."),
]


def document_requests(prefix: str = "") -> list[tuple[str, str]]:
    return [(prefix + context, choice) for context, choices in DOCUMENT_CHOICES for choice in choices]


def pair_requests() -> list[tuple[str, str]]:
    return [("", sentence) for pair in PAIRS for sentence in pair]


def plain(loaded, requests, **kwargs) -> list[float]:
    return CausalLMScorer(loaded.model, loaded.tokenizer, fast=False, **kwargs).loglikelihood(requests)


def fast(loaded, requests, **kwargs) -> tuple[list[float], CausalLMScorer]:
    scorer = CausalLMScorer(loaded.model, loaded.tokenizer, fast=True, **kwargs)
    values = scorer.loglikelihood(requests)
    assert scorer._runner is not None, "the fast path should be on for this model"
    return values, scorer


def assert_same(got, expected):
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a == pytest.approx(b, abs=TOLERANCE), f"request {i}"


def plain_tokens(scorer: CausalLMScorer, requests) -> int:
    return sum(len(e.context) + len(e.continuation) - 1 for e in scorer.encoder.encode_pairs(requests))


# --- the fast paths equal the plain path -----------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 2, 4, "auto"])
def test_choice_prefix_reuse(tiny_loaded, batch_size):
    requests = document_requests()
    values, scorer = fast(tiny_loaded, requests, batch_size=batch_size)
    assert_same(values, plain(tiny_loaded, requests, batch_size=batch_size))
    stats = scorer.last_stats
    assert stats.computed_tokens < plain_tokens(scorer, requests)  # each document's context ran once
    assert stats.scored_positions < stats.computed_tokens  # vocabulary projection at scored positions only


def test_cross_document_prefix_reuse(tiny_loaded):
    requests = document_requests(prefix=SHOTS)
    values, scorer = fast(tiny_loaded, requests, batch_size=3)
    assert_same(values, plain(tiny_loaded, requests, batch_size=3))
    shots_tokens = len(scorer.encoder.encode(SHOTS.rstrip()))
    stats = scorer.last_stats
    assert stats.prefix_tokens >= shots_tokens - 1  # the few-shot prompt ran once for all documents
    assert stats.computed_tokens < plain_tokens(scorer, requests) / 4


def test_pair_prefix_reuse(tiny_loaded):
    requests = pair_requests()
    values, scorer = fast(tiny_loaded, requests, batch_size=2)
    assert_same(values, plain(tiny_loaded, requests, batch_size=2))
    assert scorer.last_stats.computed_tokens < plain_tokens(scorer, requests)


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7, 64, "auto"])
def test_batching_and_packing_do_not_change_values(tiny_loaded, batch_size):
    requests = document_requests(prefix=SHOTS) + pair_requests() + document_requests()
    random.Random(0).shuffle(requests)
    values, _ = fast(tiny_loaded, requests, batch_size=batch_size)
    assert_same(values, plain(tiny_loaded, requests, batch_size=1))


def test_tokenization_seam_differs_from_string_boundary(tiny_loaded):
    """Contexts ending mid-word, trailing whitespace, and documents whose shared *string* prefix is not a shared
    *token* prefix: grouping on token ids keeps every value equal to the plain path."""
    tokenizer = tiny_loaded.tokenizer
    requests = [
        ("The quick bro", "wn fox"),
        ("The quick bro", "wn dog"),
        ("The quick brown fox ", "jumps"),
        ("The quick brown fox\n\n", "jumps"),
        ("Question: What is the fir", "st step"),
        ("Question: What is the fir", "m step"),
        ("Question: What is the first s", "tep of the process?"),
        ("Question: Wha", "t is the first step"),
        ("Question: erosi", "on of rocks"),
    ]
    # The seam really differs: for several requests the context's own tokens are not a prefix of the joint tokens.
    differs = [
        context for context, continuation in requests
        if tokenizer.encode(context + continuation)[: len(tokenizer.encode(context))] != tokenizer.encode(context)
    ]
    assert len(differs) >= 3
    values, _ = fast(tiny_loaded, requests, batch_size=4)
    assert_same(values, plain(tiny_loaded, requests, batch_size=4))


def test_plan_groups_on_token_ids_not_strings(tiny_loaded):
    """Two documents share the string "Question: What is the fir", but not its tokens: the shared prefix that runs
    once is the common *token* prefix of the model inputs."""
    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer)
    shared_string = "Question: What is the fir"
    encoded = scorer.encoder.encode_pairs([(shared_string, "st step"), (shared_string + "st s", "tep of the process?")])
    inputs = [e.context + e.continuation[:-1] for e in encoded]
    plan = plan_requests(inputs, [len(e.continuation) for e in encoded])
    common = 0
    while common < min(map(len, inputs)) and inputs[0][common] == inputs[1][common]:
        common += 1
    assert plan.prefix == inputs[0][:common]
    string_tokens = tuple(scorer.encoder.encode(shared_string))
    assert inputs[1][: len(string_tokens)] != string_tokens  # grouping on the string would have been wrong


def test_truncated_requests_take_the_plain_path(tiny_loaded):
    requests = document_requests(prefix=SHOTS) + pair_requests()
    values, scorer = fast(tiny_loaded, requests, batch_size=4, max_length=40)
    assert_same(values, plain(tiny_loaded, requests, batch_size=4, max_length=40))
    assert 0 < scorer.last_stats.requests < len(requests)  # the short ones shared prefixes, the long ones did not


def test_bos_adding_tokenizer(tiny_bos_model):
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    loaded = load_model(resolve_model_source(str(tiny_bos_model)), dtype="float32")
    requests = document_requests(prefix=SHOTS) + pair_requests()
    values, scorer = fast(loaded, requests, batch_size=3)
    assert_same(values, plain(loaded, requests, batch_size=3))
    assert scorer.last_stats.prefix_tokens >= 1  # at least the shared BOS


def test_eager_attention_uses_an_additive_mask(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="eager", dtype=torch.float32)
    loaded = type("Loaded", (), {"model": model, "tokenizer": AutoTokenizer.from_pretrained(tiny_model)})
    requests = document_requests(prefix=SHOTS) + pair_requests()
    values, _ = fast(loaded, requests, batch_size=4)
    assert_same(values, plain(loaded, requests, batch_size=4))


@pytest.mark.parametrize("mode", prefix_sharing.MODES)
def test_both_projection_modes(tiny_loaded, mode):
    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, fast=False)
    encoded = scorer.encoder.encode_pairs(document_requests(prefix=SHOTS) + pair_requests())
    rows = [scorer._model_input(e) for e in encoded]
    runner = PrefixSharingRunner(tiny_loaded.model, torch.device("cpu"), mode)
    values = runner.score([inp for inp, _ in rows], [cont for _, cont in rows], batch_size=3)
    assert_same(values, scorer._score_plain(rows, list(range(len(rows)))))


def test_a_model_failing_the_probe_is_scored_on_the_plain_path(tiny_loaded, monkeypatch):
    monkeypatch.setattr(prefix_sharing, "probe_fast_path", lambda runner, forward: 1.0)
    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, batch_size=2, fast=True)
    requests = document_requests()
    with pytest.warns(UserWarning, match="shared-prefix scoring is off"):
        values = scorer.loglikelihood(requests)
    assert scorer._runner is None and scorer.last_stats is None
    assert_same(values, plain(tiny_loaded, requests, batch_size=2))


def test_unsupported_attention_is_refused_without_running(tiny_loaded, monkeypatch):
    monkeypatch.setattr(tiny_loaded.model.config, "_attn_implementation", "flash_attention_2", raising=False)
    assert "flash_attention_2" in PrefixSharingRunner.supports(tiny_loaded.model)


def test_empty_continuation_is_an_error_on_both_paths(tiny_loaded):
    for is_fast in (True, False):
        scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, fast=is_fast)
        with pytest.raises(RequestError, match="request 1: the continuation is empty after tokenization"):
            scorer.loglikelihood([("Question:", " yes"), ("Question:", "")])


def test_encode_pairs_equals_encode_pair(tiny_loaded):
    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer)
    requests = document_requests(prefix=SHOTS) + pair_requests() + [("Answer: ", "x"), ("Answer:\n\n", "x")]
    assert scorer.encoder.encode_pairs(requests) == [scorer.encoder.encode_pair(c, x) for c, x in requests]


# --- the planner on random token sequences ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_plan_reconstructs_every_scored_position(seed):
    rnd = random.Random(seed)
    base = tuple(rnd.randrange(5) for _ in range(rnd.randrange(0, 6)))
    inputs: list[tuple[int, ...]] = []
    for _ in range(rnd.randrange(1, 14)):
        if inputs and rnd.random() < 0.5:
            source = rnd.choice(inputs)
            cut = rnd.randrange(0, len(source) + 1)
            tail = tuple(rnd.randrange(4) for _ in range(rnd.randrange(0 if cut < len(source) else 1, 5)))
            inputs.append(source[:cut] + tail or (1,))
        else:
            inputs.append(base + tuple(rnd.randrange(4) for _ in range(rnd.randrange(1, 8))))
    cont_lengths = [rnd.randrange(1, len(s) + 1) for s in inputs]
    plan = plan_requests(inputs, cont_lengths, row_budget=rnd.choice([None, 3, 8, 20]))
    shared = len(plan.prefix)
    for i, seq in enumerate(inputs):
        assert seq[:shared] == plan.prefix
        row = plan.rows[plan.request_row[i]]
        mask = row.mask()
        for k, slot in enumerate(plan.scored_slots[i]):
            position = len(seq) - cont_lengths[i] + k
            if slot < 0:
                assert -1 - slot == position < shared
                continue
            path, x = [], slot
            while x >= 0:
                path.append(x)
                x = row.parents[x]
            assert tuple(row.tokens[j] for j in reversed(path)) == seq[shared:position + 1]
            assert row.depths[slot] == position - shared
            assert set(mask[slot].nonzero()[0]) == set(path)


def test_pack_units_fills_rows_without_exceeding_the_longest():
    lengths = [10, 3, 7, 2, 5, 5, 1, 9]
    bins = prefix_sharing.pack_units(lengths)
    assert sorted(u for units in bins for u in units) == list(range(len(lengths)))
    assert all(sum(lengths[u] for u in units) <= 10 for units in bins)
    assert len(bins) == 5  # 10 | 9+1 | 7+3 | 5+5 | 2


# --- progress ---------------------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_lines_report_documents_rate_and_eta():
    lines: list[str] = []
    clock = FakeClock()
    progress = ScoringProgress(lines.append, "arc_fi", [4, 4, 4, 4], interval=10, clock=clock)
    clock.now = 5
    progress.requests_done([0, 1, 2, 3])  # a document done, but within the first interval: silent
    assert lines == []
    clock.now = 20
    progress.requests_done([4, 5, 6, 7, 8])
    assert lines == ["modelbench: arc_fi: 2/4 documents (50%), 0.1 documents/s, ETA 20s"]
    progress.finish()
    assert lines[-1] == "modelbench: arc_fi: 2/4 documents (50%), 0.1 documents/s, done in 20s"


def test_progress_counts_cached_documents_as_done_but_not_in_the_rate():
    lines: list[str] = []
    clock = FakeClock()
    progress = ScoringProgress(lines.append, "t", [1, 1, 1, 1], interval=1, clock=clock)
    progress.requests_done([0, 1], computed=False)
    clock.now = 10
    progress.requests_done([2])
    assert lines == ["modelbench: t: 3/4 documents (75%), 0.1 documents/s, ETA 10s"]


def test_quick_scoring_prints_nothing():
    lines: list[str] = []
    progress = ScoringProgress(lines.append, "t", [2, 2], interval=10)
    progress.requests_done([0, 1, 2, 3])
    progress.finish()
    assert lines == []


def test_scorer_reports_progress_per_document(tiny_loaded, monkeypatch):
    monkeypatch.setenv("MODELBENCH_PROGRESS_INTERVAL", "1e-9")
    lines: list[str] = []
    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, batch_size=1, fast=True, progress=lines.append)
    sizes = [len(choices) for _, choices in DOCUMENT_CHOICES]
    scorer.loglikelihood(document_requests(), documents=sizes, label="docs")
    assert lines and all(line.startswith("modelbench: docs: ") for line in lines)
    assert lines[-1].startswith(f"modelbench: docs: {len(sizes)}/{len(sizes)} documents (100%)")
    assert "done in" in lines[-1]


def test_progress_shows_under_pytest_output_capture(pytester, tiny_model, data_mirror, monkeypatch, tmp_path):
    shutil.copytree(Path(__file__).resolve().parents[2] / "suites" / "arc_mt", pytester.path / "arc_mt")
    monkeypatch.setenv("MODELBENCH_PROGRESS_INTERVAL", "1e-9")
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(tmp_path / "cache"))
    result = pytester.runpytest(f"--model={tiny_model}", f"--data-dir={data_mirror}", "--limit=4", "--batch-size=1",
                                "--score-only", "arc_mt", "-k", "fi")  # default capture (fd): the lines must still reach the terminal
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["modelbench: arc_challenge_mt_fi: */4 documents (*%), * documents/s, ETA *",
                                 "modelbench: arc_challenge_mt_fi: 4/4 documents (100%), * done in *"])


# --- the real default model against lm-eval 0.4.13's own outputs (slow) ------------------------------------------------
# CrowS-Pairs' fast path is checked with its plain run in tests/e2e/test_bias_suite.py (one shared pass).


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lmeval_arc_challenge_mt_fi_5shot_limit20.json", "lmeval_bangla_mmlu_5shot.json"])
def test_fast_path_matches_lm_eval_on_the_default_model(name, default_model, data_mirror, tmp_path):
    from pytest_modelbench.run.evaluation import evaluate_task
    from tests.fixtures.bangla_data import write_bangla_fixtures
    from tests.fixtures.lmeval_references import assert_matches_lm_eval, reference_task, tolerance_for

    write_bangla_fixtures(tmp_path)
    reference, prepared = reference_task(name, data_mirror, {"bool": tmp_path})
    scorer = CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=8, fast=True)
    evaluation = evaluate_task(prepared, scorer)
    assert scorer.last_stats.computed_tokens < sum(
        len(e.context) + len(e.continuation) - 1 for e in scorer.encoder.encode_pairs(
            [(doc.context, cont) for doc in prepared.documents for cont in doc.continuations]
        )
    ) / 2
    assert_matches_lm_eval(evaluation, reference, tolerance_for(reference))
