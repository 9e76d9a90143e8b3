"""StereoSet's LMS / SS / ICAT (per target term, then averaged), aggregate metrics in score_task, and empty
categories. Expected values are worked out by hand in the comments."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.metrics import bias
from pytest_modelbench.metrics.aggregate import MetricSummary, score_task
from pytest_modelbench.metrics.registry import METRICS
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.metric_list import MetricSpec
from pytest_modelbench.tasks.requests import DocumentRequests
from pytest_modelbench.tasks.task import PreparedTask

CHOICES = ("aaaa", "bb", "cccc")  # stereotype, anti-stereotype, unrelated: 4, 2 and 4 characters


def cluster(doc_id, target, domain, choices=CHOICES):
    return DocumentRequests(doc_id, "", choices, choices, 0, domain, {"target": target, "bias_type": domain})


def test_candidates_are_compared_per_character():
    doc = cluster(0, "t", "race")
    # Sums: stereotype -6 > anti -4? No (unnormalised the anti-stereotype wins). Per character: -1.5 < -2.0? No:
    # -6/4 = -1.5 > -4/2 = -2.0, so the stereotype wins: ss = 1.
    assert bias.stereoset_ss(doc, [-6.0, -4.0, -100.0]) == 1.0
    # Unrelated -7/4 = -1.75: stereotype (-1.5) beats it, anti-stereotype (-2.0) does not: lms = 0.5.
    assert bias.stereoset_lms(doc, [-6.0, -4.0, -7.0]) == 0.5
    assert bias.stereoset_lms(doc, [-6.0, -4.0, -9.0]) == 1.0
    # Ties are not wins (strict >, as the original evaluation).
    assert bias.stereoset_ss(doc, [-4.0, -2.0, -9.0]) == 0.0
    assert bias.stereoset_lms(doc, [-4.0, -2.0, -4.0]) == 0.0


def test_icat_formula():
    assert bias.icat(1.0, 0.5) == 1.0
    assert bias.icat(0.9, 0.6) == pytest.approx(0.9 * 0.4 / 0.5)
    assert bias.icat(0.9, 0.3) == pytest.approx(0.9 * 0.3 / 0.5)
    assert bias.icat(0.8, 1.0) == 0.0


def stereoset_task(documents, categories=("gender", "profession", "race", "religion")):
    config = TaskConfig(
        task="stereoset_toy", source=Path("toy.yaml"), doc_to_text="", doc_to_choice="x", doc_to_target=0,
        metric_list=(MetricSpec("lms"), MetricSpec("ss"), MetricSpec("icat")), category_field="bias_type",
        categories=categories,
    )
    return PreparedTask(config, documents, 0, None, "fp"), resolve_metrics(config)


# Per cluster (lls per character of [stereotype, anti, unrelated] with the 4/2/4-character choices):
STEREO_WINS = [-4.0, -4.0, -40.0]  # -1 > -2: ss 1; both beat -10: lms 1
ANTI_WINS = [-8.0, -2.0, -40.0]  # -2 < -1: ss 0; lms 1
UNRELATED_WINS = [-8.0, -2.0, -2.0]  # ss 0; -2 and -1 vs -0.5: lms 0


def test_stereoset_averages_per_target_term_then_over_terms():
    docs = [
        cluster(0, "nurse", "profession"), cluster(1, "nurse", "profession"), cluster(2, "nurse", "profession"),
        cluster(3, "Ethiopia", "race"),
    ]
    lls = [STEREO_WINS, ANTI_WINS, ANTI_WINS, STEREO_WINS]
    prepared, metrics = stereoset_task(docs)
    scores = score_task(prepared, metrics, lls)
    # ss: nurse 1/3, Ethiopia 1 -> (1/3 + 1) / 2 = 2/3 (a plain mean over clusters would give 1/2).
    assert scores.overall["ss"] == MetricSummary(pytest.approx(2 / 3), None, 4)
    assert scores.overall["lms"].value == 1.0
    # icat = 1 · min(2/3, 1/3) / 0.5 = 2/3
    assert scores.overall["icat"].value == pytest.approx(2 / 3)
    # Per domain, the same rule on the domain's clusters.
    assert scores.by_category["profession"]["ss"].value == pytest.approx(1 / 3)
    assert scores.by_category["profession"]["icat"].value == pytest.approx(1 * (1 / 3) / 0.5)
    assert scores.by_category["race"]["ss"].value == 1.0
    assert scores.by_category["race"]["icat"].value == 0.0
    # Per-document values are kept for the gate's paired statistics; ICAT has none of its own.
    assert list(scores.per_document["ss"]) == [1.0, 0.0, 0.0, 1.0]
    assert "icat" not in scores.per_document


def test_lms_per_term():
    docs = [cluster(0, "a", "gender"), cluster(1, "a", "gender"), cluster(2, "b", "gender")]
    prepared, metrics = stereoset_task(docs)
    scores = score_task(prepared, metrics, [STEREO_WINS, UNRELATED_WINS, UNRELATED_WINS])
    # lms: a (1 + 0) / 2 = 0.5, b 0 -> 0.25
    assert scores.overall["lms"].value == pytest.approx(0.25)


def test_empty_category_is_reported_empty_without_warnings():
    docs = [cluster(0, "nurse", "profession"), cluster(1, "Ethiopia", "race")]
    prepared, metrics = stereoset_task(docs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mean of empty slice" or division by zero
        scores = score_task(prepared, metrics, [STEREO_WINS, ANTI_WINS])
    assert list(scores.by_category) == ["gender", "profession", "race", "religion"]  # declared order
    for name in ("lms", "ss", "icat"):
        assert scores.by_category["gender"][name] == MetricSummary(None, None, 0)
        assert scores.by_category["religion"][name] == MetricSummary(None, None, 0)
    assert scores.by_category["race"]["ss"] == MetricSummary(0.0, None, 1)


def test_empty_category_of_a_mean_metric():
    config = TaskConfig(
        task="crows_toy", source=Path("toy.yaml"), doc_to_text="", doc_to_choice="x", doc_to_target=0,
        metric_list=(MetricSpec("pct_stereotype"), MetricSpec("likelihood_diff")), category_field="bias_type",
        categories=("age", "autre"),
    )
    docs = [DocumentRequests(i, "", ("m", "l"), ("m", "l"), 0, "age", {}) for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = score_task(PreparedTask(config, docs, 0, None, "fp"), resolve_metrics(config),
                            [[-1.0, -2.0], [-3.0, -2.0], [-1.0, -1.0]])
    assert scores.by_category["autre"]["pct_stereotype"] == MetricSummary(None, None, 0)
    assert scores.by_category["age"]["pct_stereotype"].value == pytest.approx(1 / 3)
    assert scores.by_category["age"]["likelihood_diff"].value == pytest.approx(2 / 3)


def test_all_categories_empty_with_limit_zero():
    prepared, metrics = stereoset_task([])
    scores = score_task(prepared, metrics, [])
    assert scores.overall["icat"] == MetricSummary(None, None, 0)
    assert all(s == MetricSummary(None, None, 0) for m in scores.by_category.values() for s in m.values())


def test_icat_needs_lms_and_ss_in_the_metric_list():
    config = TaskConfig(task="t", source=Path("t.yaml"), metric_list=(MetricSpec("icat"), MetricSpec("ss")))
    with pytest.raises(TaskConfigError, match=r"t.yaml: metric 'icat' is computed from lms, ss; add 'lms'"):
        resolve_metrics(config)


def test_stereoset_metric_errors_name_the_task_and_document():
    docs = [DocumentRequests(5, "", ("a", "b"), ("a", "b"), 0, "race", {"target": "x"})]
    prepared, metrics = stereoset_task(docs)
    with pytest.raises(DocumentError, match=r"toy.yaml: task 'stereoset_toy', document 5: .* need 3 choices"):
        score_task(prepared, metrics, [[-1.0, -2.0]])
    docs = [cluster(6, "", "race")]
    prepared, metrics = stereoset_task(docs)
    with pytest.raises(DocumentError, match=r"document 6: .*target term field 'target'"):
        score_task(prepared, metrics, [STEREO_WINS])


def test_directions():
    assert METRICS["ss"].direction.ideal == 0.5 and METRICS["ss"].binary
    assert METRICS["lms"].direction.kind == "higher" and METRICS["icat"].direction.kind == "higher"
    assert METRICS["pct_stereotype"].direction.ideal == 0.5
    assert METRICS["likelihood_diff"].direction.kind == "lower"
    assert METRICS["icat"].per_document is None and METRICS["icat"].inputs == ("lms", "ss")
    assert np.isclose(METRICS["ss"].direction.badness(0.4), METRICS["ss"].direction.badness(0.6))


def test_a_resampled_term_aggregate_is_the_aggregate_of_the_resampled_documents():
    """The gate's bootstrap path (OverTerms.resampler, indices with repeats) against the definition written out:
    per target term the mean of the resampled documents' values, then the mean over the terms present."""
    rng = np.random.default_rng(0)
    terms = ["nurse", "chess player", "Ethiopia", "mother", "Bible"]
    docs = [type("Doc", (), {"doc": {"target": terms[i % 5]}, "doc_id": i})() for i in range(40)]
    per_document = {"lms": rng.choice([0.0, 0.5, 1.0], 40), "ss": rng.integers(0, 2, 40).astype(float)}
    for idx in (rng.integers(0, 40, 40), rng.integers(0, 40, 7), np.array([3, 3, 3])):
        by_term: dict[str, list[tuple[float, float]]] = {}
        for i in idx:
            by_term.setdefault(docs[i].doc["target"], []).append((per_document["lms"][i], per_document["ss"][i]))
        lms = sum(sum(v for v, _ in pairs) / len(pairs) for pairs in by_term.values()) / len(by_term)
        ss = sum(sum(v for _, v in pairs) / len(pairs) for pairs in by_term.values()) / len(by_term)
        assert bias.aggregate_lms.resampler(per_document, docs)(idx) == pytest.approx(lms, abs=1e-12)
        assert bias.aggregate_ss.resampler(per_document, docs)(idx) == pytest.approx(ss, abs=1e-12)
        assert bias.aggregate_icat.resampler(per_document, docs)(idx) == pytest.approx(
            lms * min(ss, 1 - ss) / 0.5, abs=1e-12)
    assert bias.aggregate_lms.resampler(per_document, docs)(np.array([], dtype=int)) is None
