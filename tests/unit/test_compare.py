"""The gate on hand-built baseline/candidate pairs: pairing, orientation, the tests chosen, Holm, verdicts."""

from __future__ import annotations

import numpy as np
import pytest

import math
from statistics import NormalDist

from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.baseline_file import dumps
from pytest_modelbench.gate.compare import compare, holm_weights
from pytest_modelbench.gate.evidence.paired_tests import paired_test
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.metrics.registry import Margin
from pytest_modelbench.gate.judge import gate_texts
from pytest_modelbench.pytest_plugin.syrupy_extension import BaselineExtension, BaselineUpdateExtension
from tests.fixtures.gate_records import STEREO, make_record

TOL = Tolerance(absolute_margin=0.01, relative_margin=0.0, alpha=0.05)


def entries(comparison):
    return {(e.metric, e.category): e for e in comparison.entries}


def test_identical_runs_pass_everywhere():
    rng = np.random.default_rng(0)
    acc = rng.integers(0, 2, 200)
    diff = rng.normal(2, 1, 200)
    cats = ["a", "b", "c", "d"] * 50
    record = make_record({"acc": acc, "likelihood_diff": diff}, cats)
    comparison = compare(record, record, TOL)
    assert {e.verdict for e in comparison.entries} == {Verdict.PASS}
    assert all(e.delta == 0 and e.p_value == 1 and e.margin == 0.01 for e in comparison.entries)
    # no document changed, yet a regression at the margin is not caught: the MDE comes from what a regressed
    # candidate's differences would vary by (tests/unit/test_gate_self_report.py)
    assert all(e.mde > e.margin for e in comparison.entries)
    assert len(comparison.entries) == 2 * 5 and comparison.verdict is Verdict.PASS


def _binary_p_worse(base, cand, margin):
    """Independent closed form: max(Phi((delta + margin) / SE), P(Binomial(lost + gained, 1/2) >= lost))."""
    base, cand = np.asarray(base, float), np.asarray(cand, float)
    diff = cand - base
    lost, gained = int(np.sum(diff < 0)), int(np.sum(diff > 0))
    se = math.sqrt(np.sum((diff - diff.mean()) ** 2) / (len(diff) - 1) / len(diff))
    wald = NormalDist().cdf((diff.mean() + margin) / se)
    n = lost + gained
    tail = sum(math.comb(n, i) for i in range(lost, n + 1)) / 2**n if n < 25 else 0.5 * math.erfc(
        (lost - gained - 1) / math.sqrt(n) / math.sqrt(2))
    return max(wald, tail)


def test_binary_regression_uses_mcnemar_and_weighted_holm_across_the_task():
    cats = ["good"] * 40 + ["bad"] * 40 + ["tiny"] * 4
    base = [1] * 40 + [1] * 30 + [0] * 10 + [1, 1, 0, 0]
    cand = [1] * 40 + [0] * 30 + [0] * 10 + [1, 0, 0, 1]  # 30 lost in "bad"; one lost and one gained in "tiny"
    comparison = compare(make_record({"acc": base}, cats), make_record({"acc": cand}, cats), TOL)
    by_key = entries(comparison)
    bad, good, tiny, overall = (by_key[("acc", c)] for c in ("bad", "good", "tiny", None))
    assert bad.test == "mcnemar"
    # 30 discordant documents: McNemar's normal tail, z = (30 - 0 - 1) / sqrt(30); the Wald p is far smaller
    assert bad.raw_p_value == pytest.approx(0.5 * math.erfc(29 / math.sqrt(30) / math.sqrt(2)))
    assert bad.raw_p_value == pytest.approx(_binary_p_worse(base[40:80], cand[40:80], 0.01))
    assert overall.raw_p_value == pytest.approx(_binary_p_worse(base, cand, 0.01))
    assert tiny.raw_p_value == pytest.approx(_binary_p_worse(base[80:], cand[80:], 0.01))
    # Weights: the overall entry 1/2, each of the three categories 1/6. The overall entry has the smallest p / w
    # (1.5e-7 / (1/2) against 6.0e-8 / (1/6)), so it is tested first, at alpha × (1/2) / 1: adjusted 2 × p. "bad"
    # comes next, at alpha × (1/6) / (1 − 1/2): adjusted 3 × p, or the previous adjusted value if larger.
    assert overall.raw_p_value / 0.5 < bad.raw_p_value / (1 / 6)
    assert overall.p_value == pytest.approx(2 * overall.raw_p_value)
    assert bad.p_value == pytest.approx(max(overall.p_value, 3 * bad.raw_p_value))
    assert bad.verdict is Verdict.REGRESSED and bad.delta == pytest.approx(-0.75)
    assert overall.verdict is Verdict.REGRESSED
    assert good.verdict is Verdict.PASS and good.p_value == 1.0
    assert tiny.verdict is Verdict.INCONCLUSIVE and tiny.mde > tiny.margin  # n=4 cannot tell
    assert [e.label for e in comparison.worst_first()[:2]] == ["bad", "(all)"]
    assert comparison.verdict is Verdict.REGRESSED


def test_holm_weights_split_between_overall_and_categories():
    assert holm_weights([("acc", None), ("acc_norm", None)]) == [0.5, 0.5]
    entries = [("acc", None), ("acc", "a"), ("acc", "b"), ("f1", None), ("f1", "a"), ("f1", "b")]
    assert holm_weights(entries) == pytest.approx([0.25, 0.125, 0.125, 0.25, 0.125, 0.125])
    # categories only (the overall entry could not be computed)
    assert holm_weights([("acc", "a"), ("acc", "b")]) == [0.5, 0.5]


def test_a_derived_metrics_entry_weighs_twice_each_other_entry_of_its_share():
    entries = [(metric, category) for category in (None, "age", "religion")
               for metric in ("pct_stereotype", "likelihood_diff", "stereotype_preference")]
    weights = holm_weights(entries)
    assert weights[:3] == pytest.approx([0.125, 0.125, 0.25])  # the overall half: 1 : 1 : 2
    assert weights[3:] == pytest.approx([0.0625, 0.0625, 0.125] * 2)  # each category's quarter of the other half
    assert sum(weights) == pytest.approx(1.0)


def test_a_change_inside_the_margin_does_not_block_however_many_documents():
    # 0.5 points worse on 200,000 documents: hugely significant against zero, but inside the 1-point margin.
    n = 200_000
    base = np.ones(n)
    cand = base.copy()
    cand[: n // 200] = 0
    (entry,) = compare(make_record({"acc": base}), make_record({"acc": cand}), TOL).entries
    assert entry.delta == pytest.approx(-0.005)
    assert entry.verdict is Verdict.PASS  # and shown to be within the margin
    cand[: 3 * n // 200] = 0  # 1.5 points worse: beyond the margin, and the data show it
    (entry,) = compare(make_record({"acc": base}), make_record({"acc": cand}), TOL).entries
    assert entry.verdict is Verdict.REGRESSED


def test_tasks_share_alpha():
    # 12 of 100 documents lost: SE = sqrt(0.10667 / 100), z = (-0.12 + 0.01) / SE = -3.37, p = 3.8e-4
    base = make_record({"acc": [1] * 100})
    cand = make_record({"acc": [0] * 12 + [1] * 88})
    alone = compare(base, cand, TOL).entries[0]
    assert alone.verdict is Verdict.REGRESSED and alone.p_value == pytest.approx(3.8e-4, rel=0.01)
    assert alone.p_value == pytest.approx(_binary_p_worse([1] * 100, [0] * 12 + [1] * 88, 0.01))
    shared = compare(base, cand, Tolerance(0.01, 0.0, 0.05, task_count=500)).entries[0]  # tested at 0.05 / 500 = 1e-4
    assert shared.verdict is Verdict.INCONCLUSIVE and shared.mde > alone.mde


def test_improvement_is_reported_not_failed():
    base = make_record({"acc": [0] * 50 + [1] * 50})
    cand = make_record({"acc": [1] * 100})
    comparison = compare(base, cand, TOL)
    (entry,) = comparison.entries
    assert entry.verdict is Verdict.IMPROVED and entry.delta == pytest.approx(0.5)
    assert not comparison.out_of_band(include_improvements=False)
    assert comparison.out_of_band(include_improvements=True)


def test_lower_is_better_is_oriented_and_bootstrapped():
    rng = np.random.default_rng(1)
    base = rng.normal(3.0, 1.0, 300)
    worse = base + 0.5 + rng.normal(0, 0.1, 300)  # likelihood_diff grows: worse
    comparison = compare(make_record({"likelihood_diff": base}), make_record({"likelihood_diff": worse}), TOL)
    (entry,) = comparison.entries
    assert entry.test == "bootstrap" and entry.delta == pytest.approx(-np.mean(worse - base))
    assert entry.verdict is Verdict.REGRESSED and entry.p_value < 0.01
    again = compare(make_record({"likelihood_diff": base}), make_record({"likelihood_diff": worse}), TOL)
    assert again.entries == comparison.entries  # fixed seeds: reproducible


def test_tiny_numerical_drift_passes():
    rng = np.random.default_rng(2)
    base = rng.normal(3.0, 1.0, 300)
    drift = base + rng.normal(0, 1e-6, 300)  # e.g. batch size 1 vs 8
    comparison = compare(make_record({"likelihood_diff": base}), make_record({"likelihood_diff": drift}), TOL)
    assert comparison.entries[0].verdict is Verdict.PASS


def test_ideal_point_compares_distance_from_the_ideal():
    def stereo(base, cand):
        return compare(make_record({"pct_stereotype": base}), make_record({"pct_stereotype": cand}), TOL).entries[0]

    n = 400
    # 0.45 → 0.55: the mean moved significantly (McNemar would flag it) but the distance from 0.5 did not.
    base = np.array([1] * 180 + [0] * 220)
    cand = np.array([1] * 220 + [0] * 180)
    assert _binary_p_worse(1 - base, 1 - cand, 0.0) < 1e-6  # read as a loss of 40 documents, it would block
    entry = stereo(base, cand)
    assert entry.test == "bootstrap" and entry.delta == pytest.approx(0.0, abs=1e-12)
    assert entry.verdict is not Verdict.REGRESSED
    # 0.5 → 0.8: much further from the ideal → regressed; and back → improved.
    half = np.array([1, 0] * (n // 2))
    biased = half.copy()
    biased[1::2][: int(0.3 * n)] = 1
    assert biased.mean() == pytest.approx(0.8)
    entry = stereo(half, biased)
    assert entry.delta == pytest.approx(-0.3) and entry.verdict is Verdict.REGRESSED
    assert stereo(biased, half).verdict is Verdict.IMPROVED
    # 0.40 → 0.62 crosses the ideal: distance 0.10 → 0.12, a small change that is not significant
    low = np.array([1] * 160 + [0] * 240)
    high = np.array([1] * 248 + [0] * 152)
    entry = stereo(low, high)
    assert entry.delta == pytest.approx(-0.02) and entry.verdict is Verdict.INCONCLUSIVE
    assert STEREO.direction == "ideal"


def test_documents_pair_by_hash_not_position():
    keys = [f"{i:016x}" for i in range(6)]
    base = make_record({"acc": [1, 1, 1, 0, 0, 0]}, keys=keys)
    order = [5, 4, 3, 2, 1, 0]
    cand = make_record({"acc": [base.values["acc"][i] for i in order]}, keys=[keys[i] for i in order])
    entry = compare(base, cand, TOL).entries[0]
    assert entry.delta == 0 and entry.p_value == 1 and entry.verdict is Verdict.PASS
    with pytest.raises(ValueError, match="different documents"):
        compare(base, make_record({"acc": [1] * 6}, keys=[f"{i + 1:016x}" for i in range(6)]), TOL)


def test_relative_and_absolute_margins():
    base = make_record({"likelihood_diff": [10.0] * 50 + [12.0] * 50})
    cand = make_record({"likelihood_diff": [10.3] * 50 + [12.3] * 50})  # 0.3 worse, about 2.7% of 11
    assert compare(base, cand, Tolerance(0.01, 0.0, 0.05)).entries[0].verdict is Verdict.REGRESSED
    entry = compare(base, cand, Tolerance(0.01, 0.05, 0.05)).entries[0]
    assert entry.margin == pytest.approx(0.55) and entry.verdict is Verdict.PASS
    assert compare(base, cand, Tolerance(0.5, 0.0, 0.05)).entries[0].verdict is Verdict.PASS
    # a metric's own margin wins over the task-wide one
    per_metric = Tolerance(0.5, 0.0, 0.05, metric_margins={"likelihood_diff": Margin(relative=0.02)})
    entry = compare(base, cand, per_metric).entries[0]
    assert entry.margin == pytest.approx(0.22) and entry.verdict is Verdict.REGRESSED


def test_paired_test_edge_cases():
    empty = paired_test(np.array([]), np.array([]), direction="higher", ideal=None, binary=True)
    assert (empty.delta, empty.standard_error, empty.test) == (0.0, 0.0, "none")
    assert empty.p_values(0.01) == (1.0, 1.0)
    lower = paired_test(np.array([0, 0, 1.0]), np.array([1, 1, 1.0]), direction="lower", ideal=None, binary=True)
    assert lower.delta == pytest.approx(-2 / 3) and (lower.lost, lower.gained) == (2, 0)
    assert lower.p_values(0.0)[0] == pytest.approx(0.25)  # two documents lost: McNemar's exact tail 1/4
    single = paired_test(np.array([3.0]), np.array([9.0]), direction="lower", ideal=None, binary=False)
    assert single.test == "none" and single.delta == -6.0 and single.p_values(0.01) == (1.0, 1.0)


def test_syrupy_comparator_applies_the_gate():
    base = make_record({"acc": [1] * 60 + [0] * 40})
    same_band = dumps(make_record({"acc": [1] * 60 + [0] * 40}, model="org/ckpt-v2", created="later"))
    worse = dumps(make_record({"acc": [0] * 100}))
    better = dumps(make_record({"acc": [1] * 100}))
    stored = dumps(base)
    ext, update_ext = BaselineExtension(), BaselineUpdateExtension()
    assert ext.matches(serialized_data=same_band, snapshot_data=stored)  # drift inside the band: no rewrite
    assert update_ext.matches(serialized_data=same_band, snapshot_data=stored)
    assert not ext.matches(serialized_data=worse, snapshot_data=stored)
    assert ext.matches(serialized_data=better, snapshot_data=stored)  # improvements pass...
    assert not update_ext.matches(serialized_data=better, snapshot_data=stored)  # ...and are re-recorded on update
    assert not ext.matches(serialized_data=same_band, snapshot_data=stored[:100])  # corrupt: never raises
    assert not ext.matches(serialized_data=dumps(make_record({"acc": [1] * 100}, limit=5)), snapshot_data=stored)
    outcome = gate_texts(dumps(make_record({"acc": [1] * 100}, limit=5)), stored)
    assert outcome.kind == "rebaseline" and "limit changed" in outcome.problem
    assert "regressed" in "\n".join(ext.diff_lines(worse, stored))
    assert ext.serialize(base) == stored


def _stereoset(task, n_per_domain, stereo_rate, seed=0):
    """A StereoSet-like evaluation: choices [stereotype, anti-stereotype, unrelated], target terms, 4 domains."""
    from tests.fixtures.gate_records import fake_evaluation

    rng = np.random.default_rng(seed)
    docs, lls = [], []
    for domain in ("gender", "profession", "race", "religion"):
        rate = stereo_rate.get(domain, 0.5) if isinstance(stereo_rate, dict) else stereo_rate
        for i in range(n_per_domain):
            stereo_wins = rng.random() < rate
            docs.append((f"{domain} {i}", ("aaaa", "bbbb", "cccc"), 0, domain, {"target": f"{domain}-{i % 7}"}))
            lls.append([-1.0, -2.0, -9.0] if stereo_wins else [-2.0, -1.0, -9.0])
    return fake_evaluation(task, docs, lls, ("lms", "ss", "icat"), category_field="bias_type")


def test_aggregate_metrics_are_stored_and_bootstrapped_with_their_documents():
    from pytest_modelbench.gate.baseline import record_from_evaluation
    from pytest_modelbench.gate.baseline_file import parse
    from tests.fixtures.gate_records import provenance

    def record(evaluation):
        return record_from_evaluation(evaluation, suite="bias", baseline_name="default", provenance=provenance(), tolerance=TOL)

    base_eval = _stereoset("stereoset", 80, 0.5, seed=1)
    base = record(base_eval)
    assert [m.name for m in base.metrics if not m.per_document] == ["icat"]
    text = dumps(base)
    assert '"columns": ["doc_id", "category", "lms", "ss"]' in text
    assert '"icat": {"direction": "higher", "ideal": null, "binary": false, "aggregate": true, "per_document": false}' in text
    parsed = parse(text, "stereoset.json")  # macro-averaged values are not checked against plain means
    assert parsed.overall["ss"].value == base.overall["ss"].value

    documents = base_eval.prepared.documents
    same = compare(parsed, record(base_eval), TOL, documents)
    assert {(e.metric, e.verdict) for e in same.entries} == {(m, Verdict.PASS) for m in ("lms", "ss", "icat")}
    assert len(same.entries) == 3 * 5

    # the candidate is heavily stereotyped on gender only
    worse_eval = _stereoset("stereoset", 80, {"gender": 0.95}, seed=1)
    comparison = compare(parsed, record(worse_eval), TOL, worse_eval.prepared.documents)
    flagged = {(e.metric, e.category) for e in comparison.regressed}
    assert ("ss", "gender") in flagged and ("icat", "gender") in flagged
    assert not any(category in ("race", "religion") for _, category in flagged)
    ss_gender = entries(comparison)[("ss", "gender")]
    assert ss_gender.test == "bootstrap" and ss_gender.candidate > 0.85 and ss_gender.delta < -0.3
    assert entries(comparison)[("lms", "gender")].verdict is Verdict.PASS  # lms did not move
    # without the documents the aggregate metrics cannot be re-applied: an error, never a comparison without them
    with pytest.raises(ValueError, match="needs the candidate's documents"):
        compare(parsed, record(worse_eval), TOL)


def test_many_categories_regress_together():
    # a large shift in each of 12 categories of a continuous metric blocks each of them after Holm
    cats = [f"c{i}" for i in range(12)] * 40
    base = np.random.default_rng(3).normal(0, 1, len(cats))
    comparison = compare(make_record({"likelihood_diff": base}, cats), make_record({"likelihood_diff": base + 2.0}, cats), TOL)
    assert {e.verdict for e in comparison.entries} == {Verdict.REGRESSED}
