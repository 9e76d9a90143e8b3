"""A suite's pooled entries (gate/pooled.py; issue 22, item 2): a drop spread over every task, each inside its margin."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_modelbench.gate.alpha_split import AlphaSplit
from pytest_modelbench.gate.baseline import MetricInfo, Tolerance
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.decision import SessionDecision
from pytest_modelbench.gate.policy import GateOptionError, GatePolicy, checked_weights
from pytest_modelbench.gate.evidence.paired import paired_standard_error
from pytest_modelbench.gate.evidence.pooling import PoolingStats
from pytest_modelbench.gate.pooled import pooled_entries, pooled_suites
from pytest_modelbench.gate.result import GateResult
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.outputs.result_properties import properties, result_from_properties
from pytest_modelbench.outputs.session_reports import terminal_section
from pytest_modelbench.outputs.terminal import pooled_lines
from tests.fixtures.gate_records import make_record

ACC = MetricInfo("acc", "higher", None, True)
ACC_NORM = MetricInfo("acc_norm", "higher", None, True)


def _task(name: str, rng: np.random.Generator, n: int = 3000, drop: float = 0.01):
    """A task's baseline (40% right) and a candidate that lost `drop` of the documents and gained none."""
    base = (rng.random(n) < 0.4).astype(float)
    cand = base.copy()
    right = np.flatnonzero(base == 1)
    cand[rng.choice(right, int(round(drop * n)), replace=False)] = 0.0
    tolerance = Tolerance(alpha=0.05, task_count=3, total_weight=4.5)
    records = [make_record({"acc": v}, metrics=[ACC], task=name, tolerance=tolerance) for v in (base, cand)]
    return records, base, cand, tolerance


def test_a_one_point_drop_on_every_task_is_inside_each_tasks_margin_and_a_pooled_regression():
    rng = np.random.default_rng(0)
    tasks = {f"quiz/t{i}": _task(f"t{i}", rng) for i in range(3)}
    comparisons = {key: compare(b, c, tol) for key, ((b, c), _, _, tol) in tasks.items()}
    assert all(not comparison.regressed for comparison in comparisons.values())
    stats = {key: list(comparison.pooling) for key, comparison in comparisons.items()}
    [entry] = pooled_entries("quiz", stats, alpha=0.05, level=0.05 * 1.5 / 4.5)
    assert entry.verdict is Verdict.REGRESSED
    assert entry.margin == pytest.approx(0.005)  # half the tasks' own one-point margin
    # the pooled delta and standard error are those of the concatenated documents, computed directly
    base = np.concatenate([b for _, b, _, _ in tasks.values()])
    cand = np.concatenate([c for _, _, c, _ in tasks.values()])
    assert entry.n == 9000 and entry.delta == pytest.approx(cand.mean() - base.mean())
    assert entry.standard_error == pytest.approx(paired_standard_error(cand - base))
    assert (entry.baseline, entry.candidate) == (pytest.approx(base.mean()), pytest.approx(cand.mean()))


def test_an_unchanged_suite_passes_its_pooled_entries():
    rng = np.random.default_rng(1)
    stats = {}
    for i in range(3):
        (baseline, _), _, _, tolerance = _task(f"t{i}", rng)
        stats[f"quiz/t{i}"] = list(compare(baseline, baseline, tolerance).pooling)
    [entry] = pooled_entries("quiz", stats, alpha=0.05, level=0.0167)
    assert entry.verdict is Verdict.PASS and entry.delta == 0.0


def test_only_accuracies_scored_by_two_or_more_items_pool():
    assert pooled_suites({"arc/a": ["acc", "acc_norm"], "arc/b": ["acc"], "bias/c": [], "solo/d": ["acc"]}) == \
        {"arc": ("acc",)}
    values = {"pct_stereotype": np.ones(4), "likelihood_diff": np.ones(4)}
    crows = make_record(values)
    assert compare(crows, crows, Tolerance()).pooling == ()  # an ideal point and a continuous metric: none pools


def test_the_stats_travel_in_the_results_properties():
    rng = np.random.default_rng(2)
    (baseline, candidate), _, _, tolerance = _task("t0", rng)
    result = GateResult.from_comparison(compare(baseline, candidate, tolerance), task="quiz/t0", baseline="b.json",
                                        baseline_name="default")
    again = result_from_properties(properties(result))
    assert [PoolingStats.from_json(raw) for raw in again.pooling] == list(compare(baseline, candidate,
                                                                                  tolerance).pooling)


def test_the_session_decision_judges_pooled_entries_at_the_suites_share_of_alpha():
    rng = np.random.default_rng(3)
    decision = SessionDecision("default", pooled_weights={"quiz": 1.5})
    for i in range(3):
        (baseline, candidate), _, _, tolerance = _task(f"t{i}", rng)
        decision.results.append(GateResult.from_comparison(
            compare(baseline, candidate, tolerance), task=f"quiz/t{i}", baseline=f"t{i}.json", baseline_name="default"))
    [entry] = decision.pooled()
    assert entry.level == pytest.approx(0.05 * 1.5 / 4.5)
    assert decision.pooled_regressed
    title, lines = terminal_section(decision)
    assert any("the gate fails: 1 pooled entry regressed (quiz acc)" in line for line in lines)
    assert pooled_lines([], by_merge=["quiz"])[1].startswith("pooled entries of quiz: judged when")
    decision.pooled_by_merge = True
    assert decision.pooled() == [] and not decision.pooled_regressed


def test_a_suites_pooled_family_weighs_half_its_items_unless_the_ini_says_otherwise():
    items = {"arc/a": 1.0, "arc/b": None, "arc/c": None, "bias/x": None}
    metrics = {"arc/a": ["acc"], "arc/b": ["acc"], "arc/c": ["acc"], "bias/x": []}
    split = GatePolicy(baselines_dir=None, baseline_name="default").alpha_split(items, items, metrics)
    assert split.pooled == {"arc": 1.5} and split.total_weight == 5.5
    assert split.applied(Tolerance(), "bias/x").task_alpha == pytest.approx(0.05 / 5.5)
    weighted = GatePolicy(baselines_dir=None, baseline_name="default", weights={"arc/*": 4.0})
    assert weighted.alpha_split(items, items, metrics).pooled == {"arc": 4.0}
    off = GatePolicy(baselines_dir=None, baseline_name="default", weights=checked_weights(["arc/* = 0"]))
    assert off.alpha_split(items, items, metrics).pooled == {}  # 0: the suite gets no pooled entries
    with pytest.raises(GateOptionError, match=r"the weight of arc/a must lie between 1e-06 and 1e\+06, got 0.0"):
        checked_weights(["arc/a = 0"])
    typo = GatePolicy(baselines_dir=None, baseline_name="default", weights={"bias/*": 4.0})
    with pytest.raises(GateOptionError, match=r"names no collected task or pooled suite: bias/\*"):
        typo.alpha_split(items, items, metrics)
    assert AlphaSplit(pooled={"arc": 1.5}).as_json()["pooled"] == {"arc": 1.5}
