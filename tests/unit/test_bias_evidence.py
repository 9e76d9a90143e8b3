"""CrowS-Pairs' signed stereotype preference (metrics/evidence.py) as gated evidence (issue 22, item 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.gate.baseline import MetricInfo, Tolerance
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.settings import resolve_tolerance
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.metrics.evidence import DERIVED_METRICS, STEREOTYPE_PREFERENCE, derived_metrics
from pytest_modelbench.metrics.registry import METRICS, Margin
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.metric_list import DERIVED_METRIC_INPUTS
from tests.fixtures.gate_records import DIFF, STEREO, make_record

REPO = Path(__file__).resolve().parents[2]
CROWS = REPO / "suites" / "bias" / "crows_pairs_english.yaml"
CROWS_MARGINS = {"pct_stereotype": Margin(absolute=0.02), "likelihood_diff": Margin(relative=0.10),
                 "stereotype_preference": Margin(relative=0.05)}


def crows_values(gaps: np.ndarray) -> dict[str, np.ndarray]:
    """The two stored CrowS-Pairs columns of pairs whose ll(sent_more) − ll(sent_less) are `gaps`, through the
    registry's own per-document functions on the choices' log-likelihoods."""
    lls = [(gap / 2, -gap / 2) for gap in gaps]
    return {name: np.array([METRICS[name].per_document(None, ll) for ll in lls])
            for name in ("pct_stereotype", "likelihood_diff")}


def test_the_signed_preference_is_the_log_likelihood_gap_itself():
    gaps = np.array([2.5, -1.25, 0.0, 7.0, -0.5])
    assert np.array_equal(STEREOTYPE_PREFERENCE.values(crows_values(gaps)), gaps)


def test_a_task_scoring_both_inputs_gets_the_preference_and_one_scoring_one_does_not():
    assert derived_metrics(["likelihood_diff", "pct_stereotype"]) == (STEREOTYPE_PREFERENCE,)
    assert derived_metrics(["pct_stereotype"]) == ()
    assert derived_metrics(["acc", "acc_norm"]) == ()


def _crows_pair(rng: np.random.Generator, shift_by_category: dict[str, float], n_per_category: int = 100,
                noise: float = 0.5):
    """Baseline and candidate records of CrowS-like pairs: the candidate's gap is the baseline's plus the category's
    shift plus per-pair noise (sd `noise` nats)."""
    categories = [c for c in ("age", "gender", "religion") for _ in range(n_per_category)]
    base_gaps = rng.normal(0.5, 5.0, len(categories))
    shift = np.array([shift_by_category.get(c, 0.0) for c in categories])
    cand_gaps = base_gaps + shift + rng.normal(0.0, noise, len(categories))
    tolerance = Tolerance(metric_margins=CROWS_MARGINS)
    baseline = make_record(crows_values(base_gaps), categories, metrics=[DIFF, STEREO], tolerance=tolerance)
    candidate = make_record(crows_values(cand_gaps), categories, metrics=[DIFF, STEREO], tolerance=tolerance)
    return baseline, candidate, tolerance, base_gaps, categories


def _entry(comparison, metric: str, category: str | None):
    return next(e for e in comparison.entries if e.metric == metric and e.category == category)


def test_a_category_preferring_stereotypes_by_a_nat_more_regresses_on_the_preference_only():
    """Every age pair 1 nat more stereotypical: the signed preference sees all 100 pairs move; the 0/1 share only the
    few whose sign flips, too few to block at the task's level."""
    baseline, candidate, tolerance, _, _ = _crows_pair(np.random.default_rng(3), {"age": 1.0})
    comparison = compare(baseline, candidate, tolerance)
    assert _entry(comparison, "stereotype_preference", "age").verdict is Verdict.REGRESSED
    assert _entry(comparison, "pct_stereotype", "age").verdict is not Verdict.REGRESSED
    assert {e.category for e in comparison.regressed} <= {"age", None}


def test_an_unchanged_candidate_passes_every_preference_entry():
    baseline, candidate, tolerance, _, _ = _crows_pair(np.random.default_rng(4), {}, noise=0.0)
    comparison = compare(baseline, candidate, tolerance)
    preference = [e for e in comparison.entries if e.metric == "stereotype_preference"]
    assert [e.category for e in preference] == [None, "age", "gender", "religion"]
    assert all(e.verdict is Verdict.PASS and e.delta == 0.0 for e in preference)


def test_the_margin_is_five_percent_of_the_baselines_mean_absolute_gap_in_the_entry():
    baseline, candidate, tolerance, base_gaps, categories = _crows_pair(np.random.default_rng(5), {})
    comparison = compare(baseline, candidate, tolerance)
    religion = np.array(categories) == "religion"
    assert _entry(comparison, "stereotype_preference", "religion").margin == pytest.approx(
        0.05 * np.mean(np.abs(base_gaps[religion])))
    assert _entry(comparison, "stereotype_preference", None).margin == pytest.approx(
        0.05 * np.mean(np.abs(base_gaps)))


def test_more_preference_for_the_stereotyping_sentence_is_worse_wherever_the_baseline_stood():
    """A category at −2 nats (preferring the less stereotyping sentence) moving to −1 prefers the stereotype more:
    worse, though nearer no preference; moving to −3 is better on this entry (pct_stereotype's distance from 0.5
    is what sees a swing to the other side)."""
    base_gaps = np.random.default_rng(6).normal(-2.0, 1.0, 200)
    tolerance = Tolerance(metric_margins=CROWS_MARGINS)
    baseline = make_record(crows_values(base_gaps), metrics=[DIFF, STEREO], tolerance=tolerance)
    towards = compare(baseline, make_record(crows_values(base_gaps + 1.0), metrics=[DIFF, STEREO]), tolerance)
    away = compare(baseline, make_record(crows_values(base_gaps - 1.0), metrics=[DIFF, STEREO]), tolerance)
    assert _entry(towards, "stereotype_preference", None).verdict is Verdict.REGRESSED
    assert _entry(away, "stereotype_preference", None).verdict is Verdict.IMPROVED


def test_the_shipped_crows_task_resolves_the_preferences_margin_and_a_yaml_can_set_it(tmp_path):
    own = resolve_tolerance(load_task_config(CROWS), {}, resolve_metrics(load_task_config(CROWS)))
    assert own.margin("stereotype_preference") == Margin(relative=0.05)
    every = resolve_tolerance(load_task_config(CROWS), {"absolute_margin": 0.1}, resolve_metrics(load_task_config(CROWS)))
    assert every.margin("stereotype_preference") == Margin(absolute=0.1)

    text = CROWS.read_text(encoding="utf-8")
    assert text.count("\n  gate:\n") == 1  # its weight; a margin is added below
    yaml_path = tmp_path / "crows.yaml"
    yaml_path.write_text(text.replace("\n  gate:\n", "\n  gate:\n    metrics:\n"
                                      "      stereotype_preference: {absolute_margin: 0.3}\n"), encoding="utf-8")
    assert resolve_tolerance(load_task_config(yaml_path), {}, resolve_metrics(load_task_config(yaml_path))).margin("stereotype_preference") == \
        Margin(absolute=0.3, relative=0.05)


def test_a_margin_for_the_preference_of_a_task_without_its_inputs_names_the_key(tmp_path):
    yaml_path = tmp_path / "acc_task.yaml"
    yaml_path.write_text(
        "task: acc_task\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: d.jsonl\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: '{{t}}'\ndoc_to_choice: '{{c}}'\ndoc_to_target: '{{g}}'\n"
        "metric_list:\n  - metric: acc\nmodelbench:\n  gate:\n    metrics:\n"
        "      stereotype_preference: {absolute_margin: 0.3}\n", encoding="utf-8")
    with pytest.raises(TaskConfigError, match="modelbench.gate.metrics.stereotype_preference"):
        load_task_config(yaml_path)


def test_a_record_whose_metrics_are_not_the_inputs_gets_no_preference_entries():
    values = {"acc": np.ones(10)}
    record = make_record(values, metrics=[MetricInfo("acc", "higher", None, True)])
    assert {e.metric for e in compare(record, record, Tolerance()).entries} == {"acc"}


def test_each_derived_metric_is_declared_with_the_inputs_the_gate_computes_it_from():
    """A task YAML may set a derived metric's margin when it scores the inputs declared in tasks/metric_list.py; the
    gate computes the metric from metrics/evidence.py: both must name the same metrics with the same inputs."""
    assert {name: metric.inputs for name, metric in DERIVED_METRICS.items()} == DERIVED_METRIC_INPUTS
