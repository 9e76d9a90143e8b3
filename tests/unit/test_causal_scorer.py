"""HFLM-compatible encoding and log-likelihoods on a tiny random model, against a direct computation."""

from __future__ import annotations

import pytest
import torch

from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.tokenization import CausalTokenizer

REQUESTS = [
    ("Question: Which gas?\nAnswer:", " Oxygen"),
    ("Question: Which gas?\nAnswer:", " Nitrogen gas"),
    ("The quick brown fox ", "jumps"),
    ("", "He couldn't figure out the issue with the rope."),
    ("প্রশ্ন: রাজধানী?", " ঢাকা"),
]


def direct_loglikelihood(model, context_ids, continuation_ids):
    """Definition: sum over continuation tokens of log P(token | everything before it)."""
    ids = torch.tensor([list(context_ids) + list(continuation_ids)])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    start = len(context_ids)
    return sum(float(logprobs[start + i - 1, tok]) for i, tok in enumerate(continuation_ids))


def test_trailing_context_whitespace_moves_to_the_continuation(tiny_loaded):
    encoder = CausalTokenizer(tiny_loaded.tokenizer)
    assert encoder.encode_pair("Answer: ", "x") == encoder.encode_pair("Answer:", " x")
    assert encoder.encode_pair("Answer:\n\n", "x") == encoder.encode_pair("Answer:", "\n\nx")


def test_pair_is_tokenized_jointly_and_split_at_the_context_length(tiny_loaded):
    tokenizer = tiny_loaded.tokenizer
    encoded = CausalTokenizer(tokenizer).encode_pair("The quick bro", "wn fox")
    whole = tokenizer.encode("The quick brown fox")
    assert encoded.context + encoded.continuation == tuple(whole)
    assert encoded.context == tuple(tokenizer.encode("The quick bro"))


def test_empty_context_is_scored_after_bos(tiny_loaded):
    tokenizer = tiny_loaded.tokenizer
    encoded = CausalTokenizer(tokenizer).encode_pair("", "Hello world")
    assert encoded.context == (tokenizer.bos_token_id,)
    assert encoded.continuation == tuple(tokenizer.encode("Hello world", add_special_tokens=False))


def test_bos_adding_tokenizer(tiny_bos_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bos_model)
    encoder = CausalTokenizer(tokenizer)
    encoded = encoder.encode_pair("Question:", " yes")
    assert encoded.context[0] == tokenizer.bos_token_id
    assert tokenizer.bos_token_id not in encoded.continuation
    # A context already starting with the BOS text gets no second BOS.
    assert encoder.encode(tokenizer.bos_token + "Hi")[:2] != [tokenizer.bos_token_id] * 2


@pytest.mark.parametrize("batch_size", [1, 3, "auto"])
def test_loglikelihoods_match_the_definition(tiny_loaded, batch_size):
    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, batch_size=batch_size)
    got = scorer.loglikelihood(REQUESTS)
    encoder = CausalTokenizer(tiny_loaded.tokenizer)
    for value, (ctx, cont) in zip(got, REQUESTS):
        encoded = encoder.encode_pair(ctx, cont)
        assert value == pytest.approx(direct_loglikelihood(tiny_loaded.model, encoded.context, encoded.continuation), abs=1e-4)


def test_left_truncation_keeps_the_last_tokens(tiny_loaded):
    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, max_length=8)
    ctx, cont = "The quick brown fox jumps over the lazy dog near the river", " bank"
    encoded = scorer.encoder.encode_pair(ctx, cont)
    full = list(encoded.context + encoded.continuation)[-9:]
    expected = direct_loglikelihood(tiny_loaded.model, full[: -len(encoded.continuation)], encoded.continuation)
    assert scorer.loglikelihood([(ctx, cont)])[0] == pytest.approx(expected, abs=1e-4)


def test_an_unset_batch_size_is_auto_except_where_padding_can_change_results(tiny_loaded):
    from pytest_modelbench.run.runner import BenchRunner, RunOptions
    from pytest_modelbench.scoring.causal import auto_batch_size

    fast = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, batch_size="auto", fast=True)
    assert fast._resolve_batch_size(12) == auto_batch_size(tiny_loaded.model, 12) > 1
    assert fast._resolve_batch_size(12, fast.generation_batch_size) == 1  # generation: lm-eval's batch size
    # The runner decides (and the gate records) each task's batch size: one rule.
    assert BenchRunner(RunOptions()).batch_size_for("multiple_choice") == "auto"
    assert BenchRunner(RunOptions()).batch_size_for("generate_until") == 1
    assert BenchRunner(RunOptions(shared_prefixes=False)).batch_size_for("multiple_choice") == 1
    assert BenchRunner(RunOptions(batch_size=4)).batch_size_for("generate_until") == 4
