"""generate_until parity with lm-evaluation-harness 0.4.13 on the real default model.

Oracle: tests/reference/lmeval_gen_*.json, written by lm-eval 0.4.13 itself (HF backend, SmolLM2-135M-Instruct GGUF
dequantized to float32, batch size 1, CPU, --limit 20) running suites/arc_gen's YAMLs with only the dataset location
changed and the `modelbench:` block removed (tests/reference/make_lmeval_reference.py, run `gen`). One task extracts
the answer with regex filters (0-shot, until "\\n"), one is 3-shot with a custom `until`, two filter pipelines and
exact match ignoring case and punctuation, and one (10 documents) starts each answer with a `gen_prefix`, 2-shot. The prompt check needs no model; the generation check loads it (slow).
"""

from __future__ import annotations

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from tests.fixtures.lmeval_references import REFERENCE_DIR, reference_task

GEN_REFERENCES = sorted(p.name for p in REFERENCE_DIR.glob("lmeval_gen_*.json"))


@pytest.fixture(params=GEN_REFERENCES, ids=lambda name: name.removeprefix("lmeval_gen_").removesuffix(".json"))
def reference_run(request, data_mirror):
    return reference_task(request.param, data_mirror, {})


def test_the_generative_references_exist():
    assert len(GEN_REFERENCES) == 3


def test_prompts_match_lm_eval(reference_run):
    reference, prepared = reference_run
    assert [doc.context for doc in prepared.documents] == [s["context"] for s in reference["samples"]]
    assert [doc.gold for doc in prepared.documents] == [s["target"] for s in reference["samples"]]


@pytest.mark.slow
def test_generations_filtered_answers_and_exact_match_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    scorer = CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1)
    evaluation = evaluate_task(prepared, scorer)
    samples = reference["samples"]
    assert evaluation.generations == [s["generation"] for s in samples]
    assert evaluation.answers == [s["filtered"] for s in samples]
    for name, values in evaluation.scores.per_document.items():
        pipeline = name.split(",", 1)[1]
        assert list(values) == [s["exact_match"][pipeline] for s in samples], name
    for key, value in reference["results"].items():
        metric, pipeline = key.split(",", 1)
        ours = evaluation.scores.overall[f"exact_match,{pipeline}"]
        assert (ours.stderr if metric.endswith("_stderr") else ours.value) == pytest.approx(value, abs=1e-12), key
