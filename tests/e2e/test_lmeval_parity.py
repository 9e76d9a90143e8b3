"""Parity with lm-evaluation-harness 0.4.13 on the real default model.

Oracle: tests/reference/lmeval_*.json were produced by lm-eval 0.4.13 itself (its HF backend, SmolLM2-135M-Instruct
GGUF dequantized to float32, batch size 1, CPU) in a scratch virtual environment; tests/reference/make_lmeval_reference.py
regenerates them and records the exact commands. Each reference ran lm-eval's own task YAML with only the dataset
location changed to local JSON; here the shipped suite YAML reads the same rows through --data-dir.

The request checks need no model and always run; the log-likelihood checks load the real model (slow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_modelbench.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.bangla_data import write_bangla_fixtures

REPO = Path(__file__).resolve().parents[2]
REFERENCES = sorted((REPO / "tests" / "reference").glob("lmeval_*.json"))
MC_REFERENCES = [p for p in REFERENCES if "crows" not in p.name]


def suite_yaml(task: str) -> Path:
    for path in sorted((REPO / "suites").glob("*/*.yaml")):
        if load_task_config(path).task == task:
            return path
    raise LookupError(task)


@pytest.fixture(scope="module")
def bangla_data(tmp_path_factory) -> dict[str, Path]:
    """Fixture roots by boolqa answer style: JSON bools (the default) and "yes"/"no" strings (`stranswer` runs)."""
    roots = {}
    for style in ("bool", "str"):
        roots[style] = tmp_path_factory.mktemp(f"bangla_{style}")
        write_bangla_fixtures(roots[style], boolqa_answer=style)
    return roots


@pytest.fixture(params=MC_REFERENCES, ids=lambda p: p.stem.removeprefix("lmeval_"))
def reference_run(request, data_mirror, bangla_data):
    reference = json.loads(request.param.read_text(encoding="utf-8"))
    task = next(line.split(":", 1)[1].strip() for line in reference["task_yaml"].splitlines() if line.startswith("task:"))
    config = load_task_config(suite_yaml(task))
    if task.startswith("arc_challenge_mt"):
        data_dir = data_mirror
    else:
        data_dir = bangla_data["str" if "stranswer" in request.param.name else "bool"]
    provenance = reference["provenance"]
    prepared = prepare_task(config, data_dir=data_dir, num_fewshot=provenance["num_fewshot"], limit=provenance["limit"])
    return reference, prepared


def test_requests_match_lm_eval(reference_run):
    reference, prepared = reference_run
    assert len(prepared.documents) == len(reference["samples"])
    for doc, sample in zip(prepared.documents, reference["samples"]):
        assert doc.doc_id == sample["doc_id"]
        assert [[doc.context, cont] for cont in doc.continuations] == sample["requests"]


@pytest.mark.slow
def test_loglikelihoods_and_metrics_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    scorer = CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1)
    evaluation = evaluate_task(prepared, scorer)
    for i, (ours, sample) in enumerate(zip(evaluation.loglikelihoods, reference["samples"])):
        assert ours == pytest.approx(sample["loglikelihoods"], abs=1e-4), f"document {sample['doc_id']}"
        for metric, value in sample["metrics"].items():
            assert evaluation.scores.per_document[metric][i] == value, f"{metric}, document {sample['doc_id']}"
    for metric, summary in evaluation.scores.overall.items():
        assert summary.value == pytest.approx(reference["results"][metric], abs=1e-12)
        assert summary.stderr == pytest.approx(reference["results"][f"{metric}_stderr"], abs=1e-12)
