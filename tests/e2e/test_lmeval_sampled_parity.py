"""A sampled task with `repeats` against lm-evaluation-harness 0.4.13 on the real default model (issue 52).

Oracle: tests/reference/lmeval_sampled_arc_challenge_letter_repeats5_limit20.json, written by lm-eval 0.4.13 itself
(HF backend, SmolLM2-135M-Instruct GGUF dequantized to float32, batch size 1, CPU, default seeds, --limit 20) running
suites/arc_sampled's YAML (temperature 0.8, repeats 5) as lm-eval can run it: its `modelbench:` block and pass@1 entry
removed and its `draws` pipeline replaced by `take-first` (tests/reference/make_lmeval_sampled_reference.py). Two
filter pipelines: take_first and majority_vote. lm-eval clones each document's request 5 times and draws them one
after the other from the stream it seeded; so does this engine, so at batch size 1 the draws are lm-eval's, exactly.
"""

from __future__ import annotations

import re

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lmeval_references import SUITES, load_reference

REFERENCE = load_reference("lmeval_sampled_arc_challenge_letter_repeats5_limit20.json")
SHIPPED = SUITES / "arc_sampled" / "arc_challenge_letter_sampled.yaml"


def as_lm_eval_runs_it(text: str) -> str:
    """The shipped YAML with what the oracle's run changed (module docstring); the data location stays ours."""
    text = text.replace("  - metric: pass@1\n", "")
    return re.sub(r"  - name: draws\n    filter:\n      - function: regex\n        regex_pattern: (.*)\n"
                  r"        group_select: -1\n",
                  r"  - name: take-first\n    filter:\n      - function: regex\n        regex_pattern: \1\n"
                  r"        group_select: -1\n      - function: take_first\n", text)


def settings(text: str) -> list[str]:
    """A task YAML's lines that decide its prompts, draws and answers: all but comments, data location, modelbench."""
    text = text.split("\nmodelbench:")[0]
    data = ("dataset_", "  data_files:", "    train:", "    validation:", "    test:")
    return [line for line in text.splitlines() if line and not line.startswith(("#", *data))]


@pytest.fixture(scope="module")
def prepared(data_mirror, tmp_path_factory):
    path = tmp_path_factory.mktemp("sampled") / SHIPPED.name
    path.write_text(as_lm_eval_runs_it(SHIPPED.read_text(encoding="utf-8")), encoding="utf-8")
    return prepare_task(load_task_config(path), data_dir=data_mirror, limit=REFERENCE["provenance"]["limit"])


def test_the_oracle_ran_the_shipped_task_and_the_prompts_match(prepared):
    assert settings(as_lm_eval_runs_it(SHIPPED.read_text(encoding="utf-8"))) == settings(REFERENCE["task_yaml"])
    samples = REFERENCE["samples"]
    assert [doc.context for doc in prepared.documents] == [s["context"] for s in samples]
    assert [doc.gold for doc in prepared.documents] == [s["target"] for s in samples]
    assert all(len(s["draws"]) == 5 for s in samples)


@pytest.mark.slow
def test_draws_take_first_and_majority_vote_answers_and_exact_match_are_lm_evals(prepared, default_model):
    scorer = CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1)
    evaluation = evaluate_task(prepared, scorer)
    samples = REFERENCE["samples"]
    assert evaluation.generations == [s["draws"] for s in samples]
    assert [dict(answers) for answers in evaluation.answers] == [s["filtered"] for s in samples]
    for pipeline in ("take-first", "majority-vote"):
        assert list(evaluation.scores.per_document[f"exact_match,{pipeline}"]) == [
            s["exact_match"][pipeline] for s in samples], pipeline
    for key, value in REFERENCE["results"].items():
        metric, pipeline = key.split(",", 1)
        ours = evaluation.scores.overall[f"exact_match,{pipeline}"]
        assert (ours.stderr if metric.endswith("_stderr") else ours.value) == pytest.approx(value, abs=1e-12), key
