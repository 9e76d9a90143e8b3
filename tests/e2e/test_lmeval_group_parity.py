"""Group parity with lm-evaluation-harness 0.4.13: an MMLU-like group with subgroups reached through tags
(weight_by_size) and a group with weight_by_size: false over acc and acc_norm.

Oracle: tests/reference/lmeval_group_mmlu_like_{0,2}shot.json, written by lm-eval 0.4.13 itself (HF backend,
SmolLM2-135M-Instruct GGUF dequantized to float32, batch size 1, CPU) running `--tasks mmlu_like,mmlu_like_unweighted`
over the folder tests/fixtures/mmlu_like (lm-eval's mmlu/default layout) on tests/fixtures/group_data.py's data
(tests/reference/make_lmeval_reference.py, run `group`). Checked here:
- the requests of every leaf task (no model);
- the aggregation alone: lm-eval's own per-document log-likelihoods through our metrics and group scoring give
  lm-eval's group, subgroup and task values and stderrs to float noise (no model);
- the whole path on the default model (slow): log-likelihoods, verdicts, and the aggregates within what the
  per-document differences allow.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_modelbench.run.evaluation import TaskEvaluation, evaluate_task
from pytest_modelbench.metrics.aggregate import score_task
from pytest_modelbench.metrics.group_scores import score_group
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.groups import load_group
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.group_data import GROUP_DIR, write_group_fixtures
from tests.fixtures.lmeval_references import load_reference, loglikelihood_mismatches, tolerance_for, verdict_check

GROUP_FILES = {"mmlu_like": GROUP_DIR / "_mmlu_like.yaml",
               "mmlu_like_unweighted": GROUP_DIR / "continuation" / "_mmlu_like_unweighted.yaml"}
SHOTS = (0, 2)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mmlu_like_mirror")
    write_group_fixtures(root)
    return root


def prepared_groups(mirror: Path, shots: int):
    """Each top group and, by leaf task name, its prepared tasks."""
    found = {}
    for name, path in GROUP_FILES.items():
        group = load_group(path, [GROUP_DIR], {})
        found[name] = (group, {leaf.name: prepare_task(config, data_dir=mirror, num_fewshot=shots)
                               for leaf, config, _ in group.leaf_tasks})
    return found


def metric_key(name: str) -> str:
    return f"{name},none"


def below(subtasks: dict[str, list[str]], group: str) -> list[str]:
    """Every subgroup and task under `group` in lm-eval's group_subtasks."""
    found = []
    for child in subtasks[group]:
        found += [child, *(below(subtasks, child) if child in subtasks else [])]
    return found


def assert_group_results(evaluation, reference: dict, group: str, bound: float = 1e-12) -> None:
    """Our group value, stderr and n against lm-eval's, overall and for every subgroup and task in it."""
    results = reference["results"]
    for metric, summary in evaluation.scores.overall.items():
        assert summary.value == pytest.approx(results[group][metric_key(metric)], abs=bound), (group, metric)
        assert summary.stderr == pytest.approx(results[group][f"{metric}_stderr,none"], abs=bound), (group, metric)
        assert summary.n == results[group]["sample_len"]
    assert set(evaluation.scores.by_category) == set(below(reference["group_subtasks"], group))
    for category, block in evaluation.scores.by_category.items():
        for metric, summary in block.items():
            assert summary.value == pytest.approx(results[category][metric_key(metric)], abs=bound), (category, metric)
            assert summary.stderr == pytest.approx(results[category][f"{metric}_stderr,none"], abs=bound)


@pytest.mark.parametrize("shots", SHOTS)
def test_requests_of_every_leaf_task_match_lm_eval(mirror, shots):
    reference = load_reference(f"lmeval_group_mmlu_like_{shots}shot.json")
    for group, prepared_tasks in prepared_groups(mirror, shots).values():
        for name, prepared in prepared_tasks.items():
            samples = reference["tasks"][name]["samples"]
            assert [[[doc.context, choice] for choice in doc.continuations] for doc in prepared.documents] == \
                [sample["requests"] for sample in samples], name


@pytest.mark.parametrize("shots", SHOTS)
def test_lm_evals_own_loglikelihoods_aggregate_to_its_group_scores(mirror, shots):
    reference = load_reference(f"lmeval_group_mmlu_like_{shots}shot.json")
    for name, (group, prepared_tasks) in prepared_groups(mirror, shots).items():
        leaves = {}
        for task, prepared in prepared_tasks.items():
            lls = [sample["loglikelihoods"] for sample in reference["tasks"][task]["samples"]]
            leaves[task] = TaskEvaluation(prepared, lls, score_task(prepared, resolve_metrics(prepared.config), lls))
        evaluation = score_group(group.tree, leaves)
        assert_group_results(evaluation, reference, name)
        expected_members = {sub: tuple(reference["group_subtasks"][sub]) for sub in evaluation.prepared.category_members}
        assert {k: set(v) for k, v in evaluation.prepared.category_members.items()} == \
            {k: set(v) for k, v in expected_members.items()}


@pytest.mark.slow
@pytest.mark.parametrize("shots", [0])  # 2-shot contexts make it minutes longer; its requests are checked above
def test_groups_on_the_default_model_match_lm_eval(mirror, default_model, shots):
    reference = load_reference(f"lmeval_group_mmlu_like_{shots}shot.json")
    tolerance = tolerance_for(reference)
    scorer = CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1)
    for name, (group, prepared_tasks) in prepared_groups(mirror, shots).items():
        leaves, changed = {}, 0
        for task, prepared in prepared_tasks.items():
            samples = reference["tasks"][task]["samples"]
            evaluation = evaluate_task(prepared, scorer)
            mismatches = loglikelihood_mismatches(evaluation.loglikelihoods, samples, tolerance)
            assert not mismatches, "\n".join(mismatches)
            check = verdict_check(evaluation.scores.per_document, prepared.documents, samples, tolerance)
            assert not check.mismatches, "\n".join(check.mismatches)
            changed += len(check.near_ties)
            leaves[task] = evaluation
        # Every verdict equal except near-ties, each of which may move a mean over n documents by 1/n.
        bound = 1e-12 if not changed else changed / min(p.documents.__len__() for p in prepared_tasks.values())
        assert_group_results(score_group(group.tree, leaves), reference, name, bound)
