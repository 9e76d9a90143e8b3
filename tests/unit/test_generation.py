"""Greedy generation on a tiny random model, against greedy decoding computed from plain full forward passes."""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import pytest
import torch

from pytest_modelbench.errors import ModelLoadError, TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.generation_settings import GenerationSettings
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.generation import generate
from tests.plugin.gate_project import _one_torch_thread  # noqa: F401 - fixture: 2 threads crawl on a shared box

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


def test_the_masked_backend_refuses_generation():
    """(The server backend generates and scores rolling windows: tests/unit/test_server_generation.py.)"""
    from pytest_modelbench.scoring.masked import MaskedLMScorer

    def prepared(output_type):
        return SimpleNamespace(config=SimpleNamespace(source="t.yaml", task="t", output_type=output_type))

    for backend in (MaskedLMScorer,):
        with pytest.raises(ModelLoadError, match="t.yaml: task 't': generate_until tasks are not supported by the"):
            backend.generate_task(object(), prepared("generate_until"))
        with pytest.raises(ModelLoadError, match="loglikelihood_rolling tasks are not supported by the"):
            backend.rolling_loglikelihood_task(object(), prepared("loglikelihood_rolling"))


# --- sampling: seeded as lm-eval seeds it ----------------------------------------------------------------------------

SAMPLED = (("do_sample", True), ("temperature", 0.8), ("top_p", 0.95))


def sampled_like_lm_eval(model, tokenizer, contexts, new_tokens):
    """lm-eval's procedure at batch size 1: torch.manual_seed(1234) once (simple_evaluate), then one `generate` per
    request, longest context first, ties by context text (its Collator); here ties never occur."""
    order = sorted(range(len(contexts)), key=lambda i: -len(contexts[i]))
    assert len({len(contexts[i]) for i in order}) == len(contexts)
    torch.manual_seed(1234)
    answers = [None] * len(contexts)
    for i in order:
        output = model.generate(input_ids=torch.tensor([contexts[i]]), max_new_tokens=new_tokens, do_sample=True,
                                temperature=0.8, top_p=0.95, pad_token_id=tokenizer.eos_token_id)
        answers[i] = tokenizer.decode(output[0, len(contexts[i]):].tolist(), skip_special_tokens=True)
    return answers


def test_sampling_draws_what_lm_eval_draws_and_leaves_the_random_state_alone(tiny_loaded):
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    contexts = [tokenizer.encode(prompt) for prompt in PROMPTS]
    settings = GenerationSettings(until=(), max_gen_toks=8, decoding=SAMPLED)
    state = torch.get_rng_state()
    answers = generate(model, tokenizer, contexts, settings, 1)
    assert torch.equal(torch.get_rng_state(), state)
    assert answers == sampled_like_lm_eval(model, tokenizer, contexts, 8)
    assert answers != generate(model, tokenizer, contexts, GenerationSettings(until=(), max_gen_toks=8), 1)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_sampling_repeats_on_the_same_batch_size(tiny_loaded, batch_size):
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    contexts = [tokenizer.encode(prompt) for prompt in PROMPTS]
    settings = GenerationSettings(until=(), max_gen_toks=8, decoding=SAMPLED)
    torch.manual_seed(7)  # the caller's random state does not matter
    first = generate(model, tokenizer, contexts, settings, batch_size)
    torch.manual_seed(8)
    assert generate(model, tokenizer, contexts, settings, batch_size) == first


def test_decoding_settings_reach_generate(tiny_loaded):
    """Sampling among the top 1 token is greedy decoding, whatever the random draws."""
    model, tokenizer = tiny_loaded.model, tiny_loaded.tokenizer
    contexts = [tokenizer.encode(prompt) for prompt in PROMPTS]
    top_1 = GenerationSettings(until=(), max_gen_toks=8, decoding=(("do_sample", True), ("temperature", 5.0),
                                                                   ("top_k", 1)))
    greedy = GenerationSettings(until=(), max_gen_toks=8)  # checked against the definition above
    assert generate(model, tokenizer, contexts, top_1, 2) == generate(model, tokenizer, contexts, greedy, 2)
