"""Greedy generation on a tiny random model, against greedy decoding computed from plain full forward passes."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from pytest_modelbench.errors import ModelLoadError, TaskConfigError
from pytest_modelbench.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.generation_settings import GenerationSettings
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.generation import generate

PROMPTS = ["Question: What is the first step", "The quick brown fox", "প্রশ্ন: বাংলাদেশের", "He"]


def greedy_by_definition(model, tokenizer, prompt_ids, new_tokens):
    """Definition of greedy decoding: append the argmax of a full forward pass over everything so far, no cache."""
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids])).logits[0, -1]
            token = int(torch.argmax(logits))
            if token == tokenizer.eos_token_id:
                break
            ids.append(token)
    return tokenizer.decode(ids[len(prompt_ids):], skip_special_tokens=True)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_kv_cache_generation_is_greedy_decoding(tiny_loaded, batch_size):
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    contexts = [tokenizer.encode(prompt) for prompt in PROMPTS]
    settings = GenerationSettings(until=(), max_gen_toks=12)
    answers = generate(model, tokenizer, contexts, settings, batch_size)
    assert answers == [greedy_by_definition(model, tokenizer, ids, 12) for ids in contexts]
    assert any(answers)  # the test would be vacuous if the model only produced end-of-sequence


def test_each_answer_is_cut_before_its_first_stop_sequence(tiny_loaded):
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    contexts = [tokenizer.encode(prompt) for prompt in PROMPTS]
    free = [greedy_by_definition(model, tokenizer, ids, 12) for ids in contexts]
    # A stop sequence taken from the middle of the first free-running answer.
    stop = free[0][3:5]
    settings = GenerationSettings(until=(stop,), max_gen_toks=12)
    answers = generate(model, tokenizer, contexts, settings, 2)
    assert answers == [text.split(stop)[0] for text in free]
    assert answers[0] == free[0][: free[0].index(stop)]


def write_generative_task(tmp_path, extra=""):
    rows = [{"question": prompt, "answer": "x"} for prompt in PROMPTS]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "gen.yaml").write_text(textwrap.dedent("""
        task: gen
        dataset_path: json
        dataset_kwargs:
          data_files: {test: test.jsonl}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{question}}"
        doc_to_target: answer
        generation_kwargs:
          until: ["০"]
          max_gen_toks: 6
        """) + textwrap.dedent(extra), encoding="utf-8")
    return load_task_config(tmp_path / "gen.yaml")


def test_scorer_generates_one_answer_per_document_with_left_truncated_context(tiny_loaded, tmp_path):
    config = write_generative_task(tmp_path)
    prepared = prepare_task(config)
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    scorer = CausalLMScorer(model, tokenizer, max_length=10)  # contexts keep their last 10 - 6 = 4 tokens
    expected = [greedy_by_definition(model, tokenizer, tokenizer.encode(p)[-4:], 6).split("০")[0] for p in PROMPTS]
    assert scorer.generate_task(prepared) == expected
    with pytest.raises(TaskConfigError, match="max_gen_toks 6 leaves no room for a context"):
        evaluate_task(prepared, CausalLMScorer(model, tokenizer, max_length=6))


def test_evaluation_scores_exact_match_per_filter(tiny_loaded, tmp_path):
    config = write_generative_task(tmp_path, """
        filter_list:
          - name: upper
            filter:
              - function: uppercase
              - function: take_first
          - name: anything
            filter:
              - function: map
                mapping_dict: {}
                default_value: x
        """)
    evaluation = evaluate_task(prepare_task(config), CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer))
    assert [m.name for m in evaluation.scores.metrics] == ["exact_match,upper", "exact_match,anything"]
    assert evaluation.answers[0]["upper"] == evaluation.generations[0].upper()
    assert list(evaluation.scores.per_document["exact_match,anything"]) == [1.0] * len(PROMPTS)
    assert evaluation.scores.overall["exact_match,anything"].value == 1.0


def test_masked_and_server_backends_refuse_generation():
    from pytest_modelbench.scoring.masked import MaskedLMScorer
    from pytest_modelbench.scoring.server.scorer import ServerScorer

    for backend in (MaskedLMScorer, ServerScorer):
        with pytest.raises(ModelLoadError, match="generate_until tasks are not supported by the"):
            backend.generate_task(object(), None)
        with pytest.raises(ModelLoadError, match="loglikelihood_rolling tasks are not supported by the"):
            backend.rolling_loglikelihood_task(object(), None)
