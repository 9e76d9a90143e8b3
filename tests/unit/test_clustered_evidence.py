"""Document identity and clustered evidence (issue 36, items 1 and 6): a document several gated tasks hold enters a
pooled entry once, and related documents (one ARC question in 12 languages, one StereoSet target) are one cluster,
their paired differences summed before the variance is taken."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.gate.baseline import MetricInfo, Tolerance
from pytest_modelbench.gate.baseline_file import dumps
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.evidence.clusters import cluster_labels, cluster_signs
from pytest_modelbench.gate.evidence.paired import paired_bootstrap, paired_standard_error
from pytest_modelbench.gate.evidence.pooling import PoolingStats
from pytest_modelbench.gate.evidence.significance import student_t_cdf, worse_than_margin_pvalue
from pytest_modelbench.gate.judge import gate_texts
from pytest_modelbench.gate.pooled import pooled_entries
from pytest_modelbench.gate.rejudge import rejudge
from pytest_modelbench.gate.result import GateResult
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.groups import load_group_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.gate_records import make_record

REPO = Path(__file__).resolve().parents[2]
ACC = MetricInfo("acc", "higher", None, True)
LEVEL = 0.05 / 3


def test_the_clustered_standard_error_is_the_cr1_formula_by_hand():
    d = np.array([1, 0, -1, 1, 1, 0], dtype=float)
    labels = cluster_labels(["a", "a", "b", "b", "c", "c"])
    # cluster sums 1, 0, 1 over 2 documents each; mean 1/3; residuals 1/3, −2/3, 1/3: Σ² = 2/3;
    # SE² = G/(G−1) × Σ² / N² = 3/2 × 2/3 / 36 = 1/36
    assert paired_standard_error(d, labels) == pytest.approx(1 / 6)
    assert cluster_signs(d, labels) == (0, 2)


def test_students_t_against_its_closed_forms():
    """Closed forms by hand: df 1 (Cauchy) ½ + atan(x)/π; df 2 ½ + x / (2√(2 + x²)); df 3
    ½ + (atan(x/√3) + (x/√3) / (1 + x²/3)) / π."""
    for x in (-3.0, -0.4, 0.0, 1.0, 2.5):
        assert student_t_cdf(x, 1) == pytest.approx(0.5 + np.arctan(x) / np.pi)
        assert student_t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * np.sqrt(2 + x * x)))
        r = x / np.sqrt(3)
        assert student_t_cdf(x, 3) == pytest.approx(0.5 + (np.arctan(r) + r / (1 + r * r)) / np.pi)
    assert student_t_cdf(-2.326, 5000) == pytest.approx(0.01, abs=2e-4)  # the normal's 1% point
    # a category of 3 clusters: its p-value is t's with 2 degrees of freedom, far above the normal's
    assert worse_than_margin_pvalue(-0.05, 0.01, 0.02, df=2) == pytest.approx(student_t_cdf(-3.0, 2))
    assert worse_than_margin_pvalue(-0.05, 0.01, 0.02, df=2) > 20 * worse_than_margin_pvalue(-0.05, 0.01, 0.02)


def test_one_document_a_cluster_gives_the_unclustered_standard_error_and_mcnemars_counts():
    rng = np.random.default_rng(0)
    base, cand = (rng.random(500) < 0.4).astype(float), (rng.random(500) < 0.4).astype(float)
    labels = cluster_labels([None] * 500)
    assert paired_standard_error(cand - base, labels) == pytest.approx(paired_standard_error(cand - base))
    assert cluster_signs(cand - base, labels) == (int(np.sum(cand < base)), int(np.sum(cand > base)))


def _copies(base: np.ndarray, cand: np.ndarray, tasks: int, n: int) -> dict[str, list[PoolingStats]]:
    """`tasks` translations of the same `n` questions with identical outcomes: their own documents (keys), one
    cluster per question."""
    clusters = [f"arc/{i}" for i in range(n)]
    return {f"arc/t{t}": [PoolingStats.of("acc", base, cand, "higher", 0.01, [f"t{t}-{i}" for i in range(n)],
                                          clusters)] for t in range(tasks)}


def test_identical_copies_of_a_task_pool_to_the_single_tasks_standard_error():
    rng = np.random.default_rng(1)
    base = (rng.random(1172) < 0.4).astype(float)
    cand = np.where(rng.random(1172) < 0.15, 1 - base, base)
    [twelve] = pooled_entries("arc", _copies(base, cand, 12, 1172), alpha=0.05, level=LEVEL)
    assert twelve.n == 12 * 1172 and twelve.delta == pytest.approx(cand.mean() - base.mean())
    assert twelve.standard_error == pytest.approx(paired_standard_error(cand - base))  # the task's own


def test_three_tasks_with_identical_outcomes_at_the_pooled_margin_are_blocked_at_most_the_level():
    """200 seeded candidates 0.5 points worse (the pooled margin) on 3 copies of 1,172 questions: the old pool, 3,516
    independent documents, blocked about 10%; the level is 1.7%."""
    rng = np.random.default_rng(2)
    base = (rng.random(1172) < 0.4).astype(float)
    ones, zeros = base == 1, base == 0
    blocked = 0
    for _ in range(200):
        u = rng.random(1172)  # 15% of answers change, lost and gained so that the mean drops 0.5 points
        down, up = (0.15 + 0.005) * 1172 / 2 / ones.sum(), (0.15 - 0.005) * 1172 / 2 / zeros.sum()
        cand = np.where(ones, (u >= down).astype(float), (u < up).astype(float))
        [entry] = pooled_entries("arc", _copies(base, cand, 3, 1172), alpha=0.05, level=LEVEL)
        blocked += entry.verdict is Verdict.REGRESSED
    assert blocked / 200 <= LEVEL + 3 * np.sqrt(LEVEL * (1 - LEVEL) / 200)  # 4.4%: the old pool's 10% is far above


def _task_records(name: str, base: np.ndarray, cand: np.ndarray, keys: list[str]):
    tolerance = Tolerance(alpha=0.05, task_count=4, total_weight=6.0)
    return [make_record({"acc": v}, metrics=[ACC], task=name, keys=keys, tolerance=tolerance) for v in (base, cand)], \
        tolerance


def test_a_group_beside_its_tasks_pools_each_document_once():
    rng = np.random.default_rng(3)
    stats, bases, cands = {}, [], []
    for t in range(3):
        base = (rng.random(800) < 0.4).astype(float)
        cand = np.where(rng.random(800) < 0.15, 1 - base, base)
        (b, c), tolerance = _task_records(f"t{t}", base, cand, [f"t{t}-{i}" for i in range(800)])
        stats[f"quiz/t{t}"] = list(compare(b, c, tolerance).pooling)
        bases.append(b)
        cands.append(c)
    keys = [k for b in bases for k in b.doc_keys]
    group = [replace(r, task="group", doc_categories=tuple(f"t{t}" for t in range(3) for _ in range(800)),
                     category_field="task")
             for r in _task_records("group", np.concatenate([b.values["acc"] for b in bases]),
                                    np.concatenate([c.values["acc"] for c in cands]), keys)[0]]
    stats["quiz/group"] = list(compare(*group, Tolerance(alpha=0.05, task_count=4, total_weight=6.0)).pooling)
    [entry] = pooled_entries("quiz", stats, alpha=0.05, level=LEVEL)
    [without_group] = pooled_entries("quiz", {k: v for k, v in stats.items() if k != "quiz/group"}, alpha=0.05,
                                     level=LEVEL)
    assert entry.n == 2400
    assert (entry.delta, entry.standard_error, entry.p_value) == (without_group.delta, without_group.standard_error,
                                                                  without_group.p_value)


def test_the_same_document_in_two_tasks_declaring_no_cluster_enters_once():
    base, cand = np.array([1, 1, 0, 1.0]), np.array([0, 1, 0, 0.0])
    shared = PoolingStats.of("acc", base, cand, "higher", 0.01, ["k0", "k1", "k2", "k3"])
    other = PoolingStats.of("acc", base[:2], cand[:2], "higher", 0.01, ["k0", "x1"])
    [entry] = pooled_entries("s", {"s/a": [shared], "s/b": [other]}, alpha=0.05, level=LEVEL)
    assert entry.n == 5 and entry.delta == pytest.approx(-2 / 5)


def test_pooling_stats_round_trip_through_json_with_clusters():
    stats = PoolingStats.of("acc", np.array([1, 0, 1.0]), np.array([0, 0, 1.0]), "lower", 0.02, ["b", "a", "c"],
                            ["q2", None, "q1"])
    raw = json.loads(json.dumps(stats.as_json()))
    assert PoolingStats.from_json(raw) == stats
    assert raw["keys"] == ["a", "b", "c"] and raw["clusters"] == [None, "q2", "q1"]  # in key order
    assert raw["baseline"] == "011" and raw["candidate"] == "001"
    with pytest.raises(ValueError, match="one key, one 0/1 value"):
        PoolingStats.from_json({**raw, "baseline": "01"})


def test_pooled_entries_are_the_same_whatever_the_order_and_partition_their_tasks_arrive_in():
    """Shards or xdist workers deliver the tasks' statistics in any order, each through its JSON: the entries are
    byte-identical, shared documents and clusters included."""
    rng = np.random.default_rng(4)
    base = (rng.random(300) < 0.5).astype(float)
    cand = np.where(rng.random(300) < 0.2, 1 - base, base)
    stats = _copies(base, cand, 4, 300)
    stats["arc/t9"] = [PoolingStats.of("acc", base, cand, "higher", 0.01, [f"t0-{i}" for i in range(300)])]
    expected = json.dumps([e.as_json() for e in pooled_entries("arc", stats, alpha=0.05, level=LEVEL)])
    for order in (sorted(stats), sorted(stats, reverse=True), ["arc/t2", "arc/t9", "arc/t0", "arc/t3", "arc/t1"]):
        shipped = {task: [PoolingStats.from_json(json.loads(json.dumps(s.as_json()))) for s in stats[task]]
                   for task in order}
        assert json.dumps([e.as_json() for e in pooled_entries("arc", shipped, alpha=0.05, level=LEVEL)]) == expected
    [entry] = pooled_entries("arc", stats, alpha=0.05, level=LEVEL)
    assert entry.n == 4 * 300  # t9's documents are t0's


def test_a_task_declaring_clusters_gets_clustered_entries():
    """A task whose documents come in clusters of 4 identical copies: its entries' standard error is that of one
    copy of each, not half of it (the bootstrap's too, resampling whole clusters)."""
    rng = np.random.default_rng(5)
    base = (rng.random(200) < 0.4).astype(float)
    cand = np.where(rng.random(200) < 0.2, 1 - base, base)
    copies = [np.repeat(v, 4) for v in (base, cand)]
    records = [replace(make_record({"acc": v}, metrics=[ACC]), doc_clusters=tuple(f"q{i // 4}" for i in range(800)))
               for v in copies]
    [entry] = compare(*records, Tolerance()).entries
    assert entry.standard_error == pytest.approx(paired_standard_error(cand - base), rel=1e-2)
    clustered = paired_bootstrap(*copies, clusters=np.arange(800) // 4, n_resamples=4000, seed=1)
    assert clustered.standard_error == pytest.approx(paired_standard_error(cand - base), rel=0.08)


def write_stereoset(root: Path, kind: str, targets: list[str]) -> None:
    folder = root / "McGill-NLP" / "stereoset" / kind
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"target": target, "bias_type": "race", "context": f"{target} {i} is BLANK.",
             "sentences": {"sentence": [f"{target} {i} a.", f"{target} {i} b.", f"{target} {i} c."],
                           "gold_label": [1, 0, 2]}} for i, target in enumerate(targets)]
    (folder / "validation.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_the_shipped_stereoset_and_arc_mt_yamls_cluster_their_documents(tmp_path):
    write_stereoset(tmp_path, "intrasentence", ["Ethiopia", "chess player", "Ethiopia"])
    documents = prepare_task(load_task_config(REPO / "suites" / "bias" / "stereoset_intrasentence.yaml"),
                             data_dir=tmp_path).documents
    assert [d.cluster for d in documents] == ["stereoset/Ethiopia", "stereoset/chess player", "stereoset/Ethiopia"]
    row = {"id": "Mercury_1", "question": "Which?", "choices": {"text": ["a", "b"], "label": ["A", "B"]},
           "answerKey": "B"}
    clusters = []
    for folder, name in (("LumiOpen/arc_challenge_mt/de", "arc_challenge_mt_de"),
                         ("mideind/icelandic-arc-challenge", "arc_challenge_mt_is")):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "test.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
        config = load_task_config(REPO / "suites" / "arc_mt" / f"{name}.yaml")
        clusters += [d.cluster for d in prepare_task(config, data_dir=tmp_path).documents]
    assert clusters == ["arc-challenge/Mercury_1", "arc-challenge/Mercury_1"]


def test_a_cluster_key_must_be_a_field_or_a_template(tmp_path):
    source = (REPO / "suites" / "bias" / "crows_pairs_english.yaml").read_text(encoding="utf-8")
    path = tmp_path / "crows_pairs_english.yaml"
    path.write_text(source.replace("    weight: 3\n", "    weight: 3\n    cluster: 7\n"), encoding="utf-8")
    with pytest.raises(TaskConfigError, match=r"'modelbench.gate.cluster' must be a field name or a template"):
        load_task_config(path)


def test_a_group_file_may_not_declare_clusters(tmp_path):
    group = tmp_path / "g.yaml"
    group.write_text("group: g\ntask: [t]\naggregate_metric_list:\n  - metric: acc\n"
                     "modelbench:\n  gate:\n    cluster: id\n", encoding="utf-8")
    with pytest.raises(TaskConfigError, match=rf"^{group}: key 'modelbench.gate.cluster' belongs in a task file"):
        load_group_config(group)


def test_a_document_whose_cluster_is_empty_names_the_task_and_document(tmp_path):
    source = (REPO / "suites" / "arc_mt" / "arc_challenge_mt_is.yaml").read_text(encoding="utf-8")
    path = tmp_path / "arc_challenge_mt_is.yaml"
    path.write_text(source.replace('cluster: "arc-challenge/{{id}}"', "cluster: id"), encoding="utf-8")
    folder = tmp_path / "mideind" / "icelandic-arc-challenge"
    folder.mkdir(parents=True)
    rows = [{"id": i, "question": "Which?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B"}
            for i in ("Mercury_1", "")]
    (folder / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(DocumentError, match=r"task 'arc_challenge_mt_is', document 1: its cluster is empty"):
        prepare_task(load_task_config(path), data_dir=tmp_path)


def test_a_candidate_read_back_from_its_text_is_compared_with_the_clusters_recorded_beside_it():
    """A record's text carries no clusters (a baseline file stores none), so the plain run, which gates the text it
    would write, and the merge, which re-judges a shard's text, get the candidate's clusters beside it: their entries
    are the in-memory candidate's, as under --early-stop (found by the modes harness, docs/gate-modes.md)."""
    rng = np.random.default_rng(5)
    base = (rng.random(200) < 0.4).astype(float)
    cand = np.where(rng.random(200) < 0.2, 1 - base, base)
    clusters = tuple(f"q{i // 4}" for i in range(800))
    baseline, candidate = (replace(make_record({"acc": np.repeat(v, 4)}, metrics=[ACC]), doc_clusters=clusters)
                           for v in (base, cand))
    [in_memory] = compare(baseline, candidate, Tolerance()).entries
    [read_back] = gate_texts(dumps(candidate), dumps(baseline), clusters=clusters).comparison.entries
    [unclustered] = gate_texts(dumps(candidate), dumps(baseline)).comparison.entries
    assert read_back.standard_error == in_memory.standard_error
    assert unclustered.standard_error < in_memory.standard_error / 1.5  # four copies taken for four documents
    recorded = GateResult.from_comparison(compare(baseline, candidate, Tolerance()), task="suite/probe", baseline="b.json",
                                          baseline_name="default")
    merged = rejudge(recorded, dumps(candidate), dumps(baseline), documents=None, tolerance=candidate.tolerance,
                     baseline_display="b.json", baseline_name="default", baseline_ref=None,
                     working_tree_differs=False, clusters=clusters)
    assert merged.entries[0]["standard_error"] == in_memory.standard_error
