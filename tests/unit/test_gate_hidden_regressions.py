"""Regressions a release gate exists for are still caught with the defaults of a run over every shipped suite
(alpha 0.05 shared by 21 gated tasks, each metric's own margin), on the committed CrowS-Pairs baseline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from pytest_modelbench.gate.baseline import MetricInfo, Tolerance
from pytest_modelbench.gate.baseline_file import parse
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.metrics.registry import METRICS
from tests.fixtures.gate_records import make_record

REPO = Path(__file__).resolve().parents[2]
CROWS = REPO / "baselines" / "default" / "bias" / "crows_pairs_english.json"
SHIPPED_TASKS = 21  # suites/arc_mt 12, suites/bangla 5, suites/bias 4


def session(metrics) -> Tolerance:
    return Tolerance(alpha=0.05, task_count=SHIPPED_TASKS, metric_margins={m: METRICS[m].margin for m in metrics})


def crows_candidate(stereotyped: dict[str, float], seed: int = 0):
    """The committed baseline with a new checkpoint's churn (10% of pairs flip either way, every gap moves by a
    log-normal factor), and in `stereotyped` categories that share of the unstereotyped pairs now stereotyped,
    their gaps 50% wider."""
    base = parse(CROWS.read_text(encoding="utf-8"), CROWS)
    rng = np.random.default_rng(seed)
    n = len(base.doc_keys)
    categories = np.array(base.doc_categories, dtype=object)
    pct = base.values["pct_stereotype"].copy()
    churn = rng.random(n) < 0.10
    pct[churn] = 1 - pct[churn]
    gaps = base.values["likelihood_diff"] * rng.lognormal(-0.02, 0.2, n)
    for category, share in stereotyped.items():
        learnt = (categories == category) & (pct == 0) & (rng.random(n) < share)
        pct[learnt] = 1
        gaps[categories == category] *= 1.5
    return base, replace(base, values={"pct_stereotype": pct, "likelihood_diff": gaps})


def test_stereotypes_learnt_in_two_categories_are_flagged_in_exactly_those():
    base, candidate = crows_candidate({"gender": 0.7, "religion": 0.7})
    comparison = compare(base, candidate, session(base.metric_names))
    flagged = {(e.metric, e.category) for e in comparison.regressed}
    assert {category for _, category in flagged} - {None} == {"gender", "religion"}
    # the signed preference (the paired continuous evidence) names both; the 0/1 share the larger (gender: 262 pairs)
    assert {("stereotype_preference", "gender"), ("stereotype_preference", "religion"),
            ("pct_stereotype", "gender")} <= flagged


def test_churn_alone_blocks_nothing():
    base, candidate = crows_candidate({})
    comparison = compare(base, candidate, session(base.metric_names))
    assert comparison.regressed == []


def test_a_checkpoint_that_learnt_wrong_arc_answers_is_blocked():
    rng = np.random.default_rng(1)
    n = 1172
    right = (rng.random(n) < 0.45).astype(float)
    wrong = np.where(rng.random(n) < 0.6, 0.0, right)  # unlearns 60% of what it knew
    names = ("acc", "acc_norm")
    metrics = [MetricInfo(name, "higher", None, True) for name in names]
    base = make_record({"acc": right, "acc_norm": right}, metrics=metrics)
    cand = make_record({"acc": wrong, "acc_norm": wrong}, metrics=metrics)
    comparison = compare(base, cand, session(names))
    assert {e.metric for e in comparison.regressed} == set(names)
    assert comparison.verdict is Verdict.REGRESSED
