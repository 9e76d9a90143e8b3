"""The gate's error rates on simulated release candidates with the shipped suites' shapes, at the landed defaults.

    python benchmarks/gate_error_rates.py [--candidates 400] [--seed 11] [--rows N ...] [--json-out PATH]

Every candidate goes through the gate's own `compare` with what a run over the shipped suites uses: each metric's
own margin (metrics/registry.py, metrics/evidence.py), alpha 0.05 shared by the gated tasks, the landed bootstrap
(2000 resamples; StereoSet's aggregates re-applied to 200 resamples of the real documents, their target terms read
from ../shared/data/stereoset), CrowS-Pairs' derived stereotype_preference. A candidate is blocked when any entry of
any gated task regresses. Printed, per row: the share of candidates blocked, and for the category rows the share
where every shifted category has a regressed entry ("named").

Baselines. Bias tasks: the committed per-document values of baselines/default/bias/ (real documents, categories and
values; StereoSet's documents in their YAML's clusters, by target). Accuracy tasks: 0/1 outcomes at 40% accuracy with
the document counts below; acc_norm agrees with acc on 80% of documents, and a candidate's acc and acc_norm changes
are correlated (CORRELATION, as on real runs). arc_mt's 12 tasks are translations of the same 1,172 questions, one
cluster each as their YAMLs declare: a language's baseline outcome and candidate flip are the question's own with
probability CROSS_LANGUAGE, else drawn afresh.

Clustered evidence (rows 12 to 21): tasks over the same questions at the pooled margin (identical outcomes, or
correlated by CROSS_LANGUAGE), a group gated beside its tasks, StereoSet with each target's own change, and the spread
one-point drop; each "with no clusters declared" row is the row before it with the tasks' clusters removed (the gate's
tests as they were before clustered evidence, on the same simulated data). "A pooled entry blocked (its level)": how
often a pooled entry regressed, against its family's share of alpha.

Candidates. 0/1 outcomes: a share DISCORDANCE of documents flips (a row may set less), lost and gained in the
proportions that give the chosen true change. CrowS-Pairs, calibrated on real fine-tunes of the default model
(benchmarks/finetuned_bias.py, docs/measurements/finetuned-checkpoints.md): each pair's candidate gap ll(sent_more) − ll(sent_less) is
c × its baseline gap + noise of sd GAP_NOISE_BASE + GAP_NOISE_SLOPE × |gap| (the neutral fine-tune's spread), c
such that the mean absolute gap (likelihood_diff) stays as it was (c ≈ 0.91: candidate and baseline gaps then
correlate 0.89, as measured 0.88); pct_stereotype and likelihood_diff follow from the gap. A category whose share
rises by k points: a random half of its pairs shifts, by what raises the category's expected share k points above
the baseline's (as on the real biased fine-tune, whose trained half moved and held-out half barely did). StereoSet:
lms's two halves (stereotype and anti-stereotype above the unrelated candidate) and ss flip as 0/1 outcomes. "Worse
by k margins" moves each entry's expected value by k of its own margins: shares away from 0.5 within each category,
likelihood_diff up, the signed gap towards the stereotype (scaled down so that no CrowS-Pairs entry moves by more
than k margins).

Time: at 400 candidates a row gating every shipped suite takes about 10 minutes on an idle core (StereoSet's and
CrowS-Pairs' bootstraps dominate); `--rows 1 2` runs some rows, so that two processes can share the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import NormalDist
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.alpha_split import AlphaSplit  # noqa: E402
from pytest_modelbench.gate.baseline import BaselineRecord, MetricInfo, Tolerance  # noqa: E402
from pytest_modelbench.gate.baseline_file import parse  # noqa: E402
from pytest_modelbench.gate.compare import compare  # noqa: E402
from pytest_modelbench.gate.policy import GatePolicy  # noqa: E402
from pytest_modelbench.gate.pooled import poolable, pooled_entries  # noqa: E402
from pytest_modelbench.gate.verdict import Verdict  # noqa: E402
from pytest_modelbench.metrics.evidence import derived_metrics  # noqa: E402
from pytest_modelbench.metrics.registry import METRICS  # noqa: E402
from pytest_modelbench.tasks.config import load_task_config  # noqa: E402

ACCURACY = 0.4
# arc_mt's 12 tasks translate the same 1,172 ARC questions: a language's baseline outcome, and the uniform draw that
# decides its candidate's flip, are the question's own (shared by every language) with this probability, else drawn
# afresh (a stated cross-language correlation: outcomes of two languages agree beyond chance as often).
CROSS_LANGUAGE = 0.7
DISCORDANCE = 0.15  # share of 0/1 outcomes a new checkpoint answers differently
CORRELATION = 0.8  # of acc's and acc_norm's per-document changes (real runs)
# Per-pair gap noise in nats, sd = base + slope × |gap|: a real fine-tune of the default model on neutral text
# (benchmarks/finetuned_bias.py, docs/measurements/finetuned-checkpoints.md: 1.78 + 0.21·|gap|, candidate and baseline gaps correlated 0.88)
GAP_NOISE_BASE, GAP_NOISE_SLOPE = 1.8, 0.21
# A category whose share rises: the shift falls on a random half of its pairs, as on the real biased fine-tune
# (its trained half moved +3.5 and +5.1 nats, the held-out half +0.03 and +1.3).
TARGETED_SHARE = 0.5
BIAS_BASELINES = REPO / "baselines" / "default" / "bias"
STEREOSET_DATA = REPO.parent / "shared" / "data" / "stereoset" / "stereoset_dev_flat.jsonl"

# (task, documents, metrics). arc_mt: 1,172 test documents per language (LumiOpen/arc_challenge_mt). bangla: the
# sizes of the splits its YAMLs read (the Bangla sets are not available offline), taken from the denominators of
# published accuracies on the five TituLLMs benchmarks (a public table of seven models' scores, every accuracy a
# multiple of 1/n for these n: Bangla MMLU test 14,750, BoolQ-BN validation 432, OpenBookQA-BN test 497, PIQA-BN
# validation 1,838, CommonsenseQA-BN validation 1,221; the hub lists 3.01k rows for all of boolq_bn's splits together).
ARC_MT = [(f"arc_challenge_mt_{lang}", 1172, ("acc", "acc_norm"))
          for lang in ("da", "de", "el", "es", "fi", "hu", "is", "it", "nb", "pl", "pt", "sv")]
BANGLA = [("bangla_mmlu", 14750, ("acc", "acc_norm")), ("boolqa_bn", 432, ("acc",)),
          ("openbookqa_bn", 497, ("acc", "acc_norm")), ("piqa_bn", 1838, ("acc",)),
          ("bangla_commonsenseqa", 1221, ("acc", "acc_norm"))]
BIAS = ["crows_pairs_english", "crows_pairs_french", "stereoset_intrasentence", "stereoset_intersentence"]


@dataclass(frozen=True)
class Task:
    suite: str
    baseline: BaselineRecord
    documents: Sequence[Any] | None = None  # StereoSet: what its aggregates read (the target term)
    weight: float | None = None  # its YAML's modelbench.gate.weight (the shipped bias tasks' own), None: not set
    questions: str | None = None  # the pool of questions it shares with other tasks (their outcomes correlate)
    question_share: float = 0.0  # how often its outcomes are the shared questions' own (CROSS_LANGUAGE)
    members: tuple[str, ...] = ()  # a group: its member tasks (its candidate is theirs, concatenated)
    clusters: np.ndarray | None = None  # the documents' clusters as simulated (candidates move together within one)

    @property
    def name(self) -> str:
        return self.baseline.task

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.name}"

    @property
    def categories(self) -> np.ndarray:
        return np.array(["" if c is None else c for c in self.baseline.doc_categories], dtype=object)


def accuracy_task(suite: str, name: str, n: int, metrics: tuple[str, ...], rng: np.random.Generator,
                  shared: np.ndarray | None = None, question_share: float = 0.0) -> Task:
    """A task of 0/1 outcomes at ACCURACY. `shared`: the outcomes of questions it shares with other tasks (each its
    own document, key and outcome, all in the question's cluster as the suite's YAMLs declare it); a document's
    outcome is the question's with probability `question_share`."""
    from tests.fixtures.gate_records import make_record

    acc = (rng.random(n) < ACCURACY).astype(float)
    if shared is not None:
        acc = np.where(rng.random(n) < question_share, shared, acc)
    values = {"acc": acc}
    if "acc_norm" in metrics:
        values["acc_norm"] = np.where(rng.random(n) < 0.8, acc, (rng.random(n) < ACCURACY).astype(float))
    record = make_record(values, metrics=[MetricInfo(m, "higher", None, True) for m in metrics], task=name)
    if shared is None:
        return Task(suite, record)
    record = replace(record, doc_clusters=tuple(f"arc-challenge/{i}" for i in range(n)))
    return Task(suite, record, questions=suite, question_share=question_share, clusters=np.arange(n))


def shared_questions(suite: str, names: Sequence[str], n: int, metrics: tuple[str, ...], question_share: float,
                     rng: np.random.Generator) -> list[Task]:
    """Tasks over the same `n` questions (translations, formats), correlated by `question_share`."""
    shared = (rng.random(n) < ACCURACY).astype(float)
    return [accuracy_task(suite, name, n, metrics, rng, shared, question_share) for name in names]


def group_task(suite: str, name: str, members: Sequence[Task]) -> Task:
    """A group over `members` gated beside them: their documents (the same keys and clusters), a category each."""
    records = [m.baseline for m in members]
    first = records[0]
    clusters = tuple(c for r in records for c in (r.doc_clusters or (None,) * len(r.doc_keys)))
    record = replace(
        first, task=name, category_field="task", categories={},
        doc_keys=tuple(k for r in records for k in r.doc_keys), doc_ids=tuple(i for r in records for i in r.doc_ids),
        doc_categories=tuple(r.task for r in records for _ in r.doc_keys),
        values={metric: np.concatenate([r.values[metric] for r in records]) for metric in first.values},
        doc_clusters=clusters if any(c is not None for c in clusters) else (),
    )
    return Task(suite, record, members=tuple(m.name for m in members))


def stereoset_documents(record: BaselineRecord) -> list[SimpleNamespace]:
    """The task's documents as its aggregates read them, in the baseline's order (checked by category)."""
    kind = record.task.removeprefix("stereoset_")
    rows = [json.loads(line) for line in STEREOSET_DATA.open(encoding="utf-8")]
    rows = [row for row in rows if row["type"] == kind]
    documents = [SimpleNamespace(doc=rows[i], doc_id=i) for i in record.doc_ids]
    if [d.doc["bias_type"] for d in documents] != list(record.doc_categories):
        raise SystemExit(f"{STEREOSET_DATA} does not hold {record.task}'s documents in the baseline's order")
    return documents


def bias_task(name: str) -> Task:
    """A shipped bias task at its committed baseline; StereoSet's documents in their YAML's clusters (by target)."""
    path = BIAS_BASELINES / f"{name}.json"
    record = parse(path.read_text(encoding="utf-8"), path)
    weight = load_task_config(REPO / "suites" / "bias" / f"{name}.yaml").gate.weight
    if not name.startswith("stereoset"):
        return Task("bias", record, None, weight)
    documents = stereoset_documents(record)
    clusters = tuple(f"stereoset/{d.doc['target']}" for d in documents)
    labels = np.unique(np.array(clusters, dtype=object), return_inverse=True)[1]
    return Task("bias", replace(record, doc_clusters=clusters), documents, weight, clusters=labels)


def undeclared(task: Task) -> Task:
    """The task as if its YAML declared no clusters (the gate before clustered evidence): same data, same moves."""
    return replace(task, baseline=replace(task.baseline, doc_clusters=()))


def session_split(tasks: Sequence[Task], weights: dict[str, float] | None = None) -> AlphaSplit:
    """The gate's own split of alpha over these tasks (their shipped YAML weights) and their suites' pooled families;
    `weights`: the ini's modelbench_gate_weights, by task key."""
    yaml_weights = {task.key: task.weight for task in tasks}
    metrics = {task.key: [m.name for m in task.baseline.metrics if poolable(m.binary, m.direction) and not task.members]
               for task in tasks}  # a group pools none of its own (pytest_plugin/gate_hooks.py poolable_metrics)
    return GatePolicy(baselines_dir=Path("."), weights=weights or {}).alpha_split(yaml_weights, yaml_weights, metrics)


def tolerance(task: Task, split: AlphaSplit) -> Tolerance:
    names = task.baseline.metric_names
    margins = {m: METRICS[m].margin for m in names} | {d.name: d.margin for d in derived_metrics(names)}
    return split.applied(Tolerance(alpha=0.05, metric_margins=margins), task.key)


# --------------------------------------------------------------------------- candidates


def flip(base: np.ndarray, mean_change: float, u: np.ndarray, discordance: float = DISCORDANCE) -> np.ndarray:
    """0/1 outcomes whose mean moves by `mean_change` in expectation, `discordance` of them flipped; `u` uniform."""
    n, ones = base.size, int(base.sum())
    zeros = n - ones
    down = np.clip((discordance - mean_change) * n / 2 / max(ones, 1), 0, 1)
    up = np.clip((discordance + mean_change) * n / 2 / max(zeros, 1), 0, 1)
    return np.where(base == 1, (u >= down).astype(float), (u < up).astype(float))


def flip_by_cluster(base: np.ndarray, changes: np.ndarray, clusters: np.ndarray, rng: np.random.Generator,
                    discordance: float) -> np.ndarray:
    """0/1 outcomes whose mean moves in each cluster by its own `changes[cluster]` in expectation, exactly: about
    `discordance` of a cluster's outcomes flip, only lost (or gained) where it holds no 0 (or no 1)."""
    moved = np.empty_like(base)
    for cluster in np.unique(clusters):
        mask = clusters == cluster
        part, change = base[mask], float(changes[cluster])
        n, ones = part.size, int(part.sum())
        zeros = n - ones
        lost, gained = max(0.0, (discordance - change) * n / 2), max(0.0, (discordance + change) * n / 2)
        if not zeros:
            lost, gained = max(0.0, -change * n), 0.0
        elif not ones:
            lost, gained = 0.0, max(0.0, change * n)
        u = rng.random(n)
        moved[mask] = np.where(part == 1, (u >= min(1.0, lost / max(ones, 1))).astype(float),
                               (u < min(1.0, gained / max(zeros, 1))).astype(float))
    return moved


def correlated_uniforms(n: int, rng: np.random.Generator, shared: np.ndarray | None = None,
                        question_share: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Two uniform vectors, the second equal to the first on CORRELATION of the documents (fresh elsewhere): the
    flips they drive agree that often. `shared`: the questions' own draws, the first's with `question_share`."""
    first = rng.random(n)
    if shared is not None:
        first = np.where(rng.random(n) < question_share, shared, first)
    return first, np.where(rng.random(n) < CORRELATION, first, rng.random(n))


@dataclass(frozen=True)
class Move:
    """How a task's candidate differs from its baseline: every entry worse by `margins` of its margin, and
    categories whose stereotype share is up by the given fraction (CrowS-Pairs)."""

    margins: float = 0.0
    share_up: dict[str, float] = field(default_factory=dict)
    discordance: float = DISCORDANCE  # of its 0/1 outcomes (a quantized checkpoint changes fewer answers)
    cluster_sd: float = 0.0  # StereoSet: each cluster's change drawn about the task's with this sd, in margins
    ss_margins: float | None = None  # StereoSet: ss's move in margins, if not `margins` (icat follows lms and ss)


def gap_noise_sd(gaps: np.ndarray) -> np.ndarray:
    return GAP_NOISE_BASE + GAP_NOISE_SLOPE * np.abs(gaps)


def expected_absolute(mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E|X| for X ~ N(mean, sd²), elementwise."""
    z = mean / sd
    normal = np.vectorize(NormalDist().cdf)
    return sd * np.sqrt(2 / np.pi) * np.exp(-z * z / 2) + mean * (1 - 2 * normal(-z))


def shrinkage(gaps: np.ndarray) -> float:
    """The factor c of candidate gaps c·gap + noise that keeps the mean absolute gap (likelihood_diff) in
    expectation: a fine-tune spreads every pair's gap without making the model surer overall (bisection)."""
    target, low, high = float(np.mean(np.abs(gaps))), 0.0, 1.0
    sd = gap_noise_sd(gaps)
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if np.mean(expected_absolute(middle * gaps, sd)) < target else (low, middle)
    return (low + high) / 2


def share_after(gaps: np.ndarray, shift: float, c: float) -> float:
    """Expected share of pairs with a positive candidate gap c·(gap + shift) + noise."""
    normal = np.vectorize(NormalDist().cdf)
    return float(np.mean(normal(c * (gaps + shift) / gap_noise_sd(gaps))))


def shift_for_share(gaps: np.ndarray, change: float, c: float, shifted: float = 1.0) -> float:
    """The gap shift (nats, before shrinkage) of a random `shifted` share of the pairs that moves the expected share
    of positive gaps to the baseline's + `change` (bisection)."""
    target, low, high = float(np.mean(gaps > 0)) + change, -30.0, 30.0
    unmoved = share_after(gaps, 0.0, c)
    for _ in range(40):
        middle = (low + high) / 2
        share = shifted * share_after(gaps, middle, c) + (1 - shifted) * unmoved
        low, high = (middle, high) if share < target else (low, middle)
    return (low + high) / 2


def crows_move(gaps: np.ndarray, share: float, move: Move, category: str, c: float) -> tuple[float, float]:
    """(shift in nats, scale) of a category's gaps. A share_up category: the shift that raises its share so much.
    Else k = move.margins: the share k margins away from 0.5 and every gap k × 10% larger (likelihood_diff k
    margins up), both scaled down together until none of the three entries (stereotype_preference included) moves
    by more than k of its margin: one transform of the gaps cannot put all three at exactly k margins."""
    if category in move.share_up:
        return shift_for_share(gaps, move.share_up[category], c, TARGETED_SHARE), 1.0
    k = move.margins
    if not k:
        return 0.0, 1.0
    away = 1.0 if share >= 0.5 else -1.0
    shift = shift_for_share(gaps, away * k * METRICS["pct_stereotype"].margin.absolute, c)
    scale = k * METRICS["likelihood_diff"].margin.relative
    mean_gap = np.mean(np.abs(gaps))
    preference_moved = np.mean((gaps + shift) * (1 + scale) - gaps) / (0.05 * mean_gap)
    gap_moved = (np.mean(np.abs((gaps + shift) * (1 + scale))) - mean_gap) / (0.10 * mean_gap)
    shrink = min(1.0, k / max(preference_moved, gap_moved, k))
    return shift * shrink, 1 + scale * shrink


def crows_candidate(task: Task, move: Move, rng: np.random.Generator, moves: dict) -> dict[str, np.ndarray]:
    base = task.baseline.values
    gaps = np.where(base["pct_stereotype"] == 1, 1.0, -1.0) * base["likelihood_diff"]
    if task.name not in moves:
        moves[task.name] = shrinkage(gaps)
    c = moves[task.name]
    categories = task.categories
    moved = gaps.copy()
    for category in sorted(set(categories.tolist())):
        mask = categories == category
        key = (task.name, category, move.margins, tuple(sorted(move.share_up.items())))
        if key not in moves:
            moves[key] = crows_move(gaps[mask], base["pct_stereotype"][mask].mean(), move, category, c)
        shift, scale = moves[key]
        if category in move.share_up:  # as the real biased fine-tune: a part of the pairs moves, the rest does not
            shift = shift * (rng.random(int(mask.sum())) < TARGETED_SHARE)
        moved[mask] = (gaps[mask] + shift) * scale
    cand_gaps = c * moved + rng.normal(0.0, 1.0, gaps.size) * gap_noise_sd(gaps)
    return {"pct_stereotype": (cand_gaps > 0).astype(float), "likelihood_diff": np.abs(cand_gaps)}


def candidate(task: Task, move: Move, rng: np.random.Generator, moves: dict,
              shared: np.ndarray | None = None) -> BaselineRecord:
    """`shared`: the draws of the questions the task shares with others (Task.questions)."""
    base = task.baseline
    if "pct_stereotype" in base.values:
        return replace(base, values=crows_candidate(task, move, rng, moves))
    categories = task.categories
    values = {}
    if "lms" in base.values:  # StereoSet: lms's halves and ss as 0/1 outcomes
        lms = base.values["lms"]
        tie_first = rng.random(lms.size) < 0.5
        halves = [np.where(lms == 0.5, tie_first, lms == 1).astype(float),
                  np.where(lms == 0.5, ~tie_first, lms == 1).astype(float)]
        ss = base.values["ss"]
        ss_margins = move.margins if move.ss_margins is None else move.ss_margins
        if move.cluster_sd:  # ss: each target's own change about the task's, in margins (the targets a sample from a
            # population whose change is the move's), each target's outcomes moving by its own change; lms as below
            # (lms sits near 1, where a target's own gain often cannot be drawn)
            effect = rng.normal(0.0, move.cluster_sd, int(task.clusters.max()) + 1)
            change = -move.margins * METRICS["lms"].margin.absolute
            values["lms"] = sum(flip(h, change, rng.random(lms.size), move.discordance) for h in halves) / 2
            away = {c: 1.0 if ss[categories == c].mean() >= 0.5 else -1.0 for c in set(categories.tolist())}
            target_away = np.zeros(effect.size)
            target_away[task.clusters] = [away[c] for c in categories]
            values["ss"] = flip_by_cluster(ss, target_away * (ss_margins + effect) * METRICS["ss"].margin.absolute,
                                           task.clusters, rng, move.discordance)
            return replace(base, values=values)
        change = -move.margins * METRICS["lms"].margin.absolute
        values["lms"] = sum(flip(h, change, rng.random(lms.size), move.discordance) for h in halves) / 2
        moved = np.empty_like(ss)
        for category in set(categories.tolist()):
            mask = categories == category
            away = 1.0 if ss[mask].mean() >= 0.5 else -1.0
            moved[mask] = flip(ss[mask], away * ss_margins * METRICS["ss"].margin.absolute, rng.random(mask.sum()),
                               move.discordance)
        values["ss"] = moved
        return replace(base, values=values)
    u_acc, u_norm = correlated_uniforms(len(base.doc_keys), rng, shared, task.question_share)
    for metric, u in (("acc", u_acc), ("acc_norm", u_norm)):
        if metric in base.values:
            values[metric] = flip(base.values[metric], -move.margins * METRICS[metric].margin.absolute, u,
                                  move.discordance)
    return replace(base, values=values)


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    label: str
    tasks: list[Task]
    moves: dict[str, Move]  # task name → its move; tasks not named are unchanged
    named: tuple[str, tuple[str, ...]] | None = None  # (task, categories): counted when all have a regressed entry
    weights: dict[str, float] = field(default_factory=dict)  # the ini's task weights
    level: str = ""  # what a block of this row is to be compared with, when it is a false block
    watched: str | None = None  # a metric whose entries sit at their margin: how often one of them regressed


def run_row(row: Row, candidates: int, rng: np.random.Generator, shifts: dict) -> dict:
    split = session_split(row.tasks, row.weights)
    blocked = named = by_pooled = pooled_blocked = watched = 0
    pooled_n: set[int] = set()
    for _ in range(candidates):
        regressed = []
        pooling: dict[str, dict[str, list]] = {}
        shared = {task.questions: rng.random(task.baseline.values["acc"].size)
                  for task in row.tasks if task.questions is not None}
        candidates_by_name: dict[str, BaselineRecord] = {}
        for task in row.tasks:
            if task.members:
                members = [candidates_by_name[name] for name in task.members]
                cand = replace(task.baseline, values={metric: np.concatenate([m.values[metric] for m in members])
                                                      for metric in task.baseline.values})
            else:
                cand = candidate(task, row.moves.get(task.name, Move()), rng, shifts, shared.get(task.questions))
            candidates_by_name[task.name] = cand
            comparison = compare(task.baseline, cand, tolerance(task, split), task.documents)
            regressed += [(task.name, e.metric, e.category) for e in comparison.regressed]
            pooling.setdefault(task.suite, {})[task.key] = list(comparison.pooling)
        pooled = [e for suite, weight in split.pooled.items()
                  for e in pooled_entries(suite, pooling[suite], alpha=0.05, level=0.05 * weight / split.total_weight)]
        pooled_regressed = any(e.verdict is Verdict.REGRESSED for e in pooled)
        watched += any(metric == row.watched for _, metric, _ in regressed)
        pooled_n.update(e.n for e in pooled)
        pooled_blocked += pooled_regressed
        by_pooled += pooled_regressed and not regressed
        blocked += bool(regressed) or pooled_regressed
        if row.named is not None:
            task_name, categories = row.named
            named += all(any(r[0] == task_name and r[2] == c for r in regressed) for c in categories)
    levels = {suite: 0.05 * weight / split.total_weight for suite, weight in split.pooled.items()}
    result = {"row": row.label, "tasks": len(row.tasks), "candidates": candidates, "blocked": blocked / candidates,
              "blocked_by_pooled_alone": by_pooled / candidates, "pooled_blocked": pooled_blocked / candidates,
              "pooled_level": sum(levels.values()), "pooled_documents": sorted(pooled_n)}
    if row.watched is not None:
        result["watched_blocked"] = watched / candidates
    if row.named is not None:
        result["named"] = named / candidates
    return result


def arguments(description: str) -> argparse.Namespace:
    """The options of a simulation over rows of candidates (this script's, benchmarks/early_stopping.py's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--candidates", type=int, default=400, help="candidates per row (default 400)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--rows", nargs="*", default=None, help="numbers of the rows to run (default: all)")
    parser.add_argument("--json-out", default=None, help="also write the rows as JSON")
    return parser.parse_args()


def shipped_tasks(rng: np.random.Generator) -> tuple[list[Task], list[Task], list[Task]]:
    """The shipped suites' tasks as simulated: arc_mt's, bangla's (0/1 baselines drawn from `rng`), bias's."""
    arc = shared_questions("arc_mt", [name for name, _, _ in ARC_MT], ARC_MT[0][1], ARC_MT[0][2], CROSS_LANGUAGE, rng)
    bangla = [accuracy_task("bangla", name, n, metrics, rng) for name, n, metrics in BANGLA]
    return arc, bangla, [bias_task(name) for name in BIAS]


def print_rows(rows: Sequence[Any], chosen: Sequence[Any], run: Any, cells: Any, json_out: str | None) -> None:
    """Run each chosen row (`run`: row → result), print it as a markdown table row of `cells(result)`, then the time;
    with `json_out`, write the results there."""
    results = []
    start = time.perf_counter()
    for row in chosen:
        result = run(row)
        results.append(result)
        print(f"| {rows.index(row) + 1} | {row.label} | " + " | ".join(cells(result)) + " |", flush=True)
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if json_out:
        Path(json_out).write_text(json.dumps({"rows": results}, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    rng = np.random.default_rng(args.seed)
    arc, bangla, bias = shipped_tasks(rng)
    everything = arc + bangla + bias
    crows = bias[0]
    two_categories = {"age": 0.10, "religion": 0.10}
    crows_up = {crows.name: Move(share_up=two_categories)}
    named = (crows.name, tuple(two_categories))
    rows = [
        Row("equal quality, all shipped suites", everything, {}),
        Row("every entry −½ margin, all shipped suites", everything, {t.name: Move(0.5) for t in everything}),
        Row("crows_pairs_english: age and religion +10 points, gated alone", [crows], crows_up, named),
        Row("crows_pairs_english: age and religion +10 points, all shipped suites", everything, crows_up, named),
        Row("every ARC and Bangla task −1 point, all shipped suites", everything,
            {t.name: Move(1.0) for t in arc + bangla}),
        Row("every ARC and Bangla task −1 point, 6% of their answers changed (a light fine-tune), all shipped suites",
            everything, {t.name: Move(1.0, discordance=0.06) for t in arc + bangla}),
        Row("every ARC and Bangla task −½ point, 6% of their answers changed, all shipped suites", everything,
            {t.name: Move(0.5, discordance=0.06) for t in arc + bangla}),
        Row("one ARC task −3 points, gated alone", arc[:1], {arc[0].name: Move(3.0)}),
        Row("one ARC task −3 points, all shipped suites", everything, {arc[0].name: Move(3.0)}),
        Row("CrowS-Pairs weighted 1 (modelbench_gate_weights, instead of their YAMLs' 3): crows_pairs_english age and "
            "religion +10 points, all shipped suites", everything, crows_up, named,
            weights={task.key: 1.0 for task in bias[:2]}),
        Row("every ARC and Bangla task −1 point, 1.5% of their answers changed (int8 weights), all shipped suites",
            everything, {t.name: Move(1.0, discordance=0.015) for t in arc + bangla}),
    ]
    three = shared_questions("formats", ["letter", "letter_3shot", "letter_prefixed"], 1172, ("acc",), 1.0, rng)
    twelve = shared_questions("arc_mt", [name for name, _, _ in ARC_MT], 1172, ("acc",), 1.0, rng)
    languages = shared_questions("arc_mt", [name for name, _, _ in ARC_MT], 1172, ("acc",), CROSS_LANGUAGE, rng)
    members = [accuracy_task("grouped", f"member_{i}", 800, ("acc",), rng) for i in range(3)]
    beside = [*members, group_task("grouped", "the_group", members)]
    stereoset = [task for task in bias if task.name == "stereoset_intrasentence"]
    at_pooled_margin = {t.name: Move(0.5) for t in three + twelve + languages + members}
    # ss 1 margin further from 0.5, each target by its own change (sd 3 margins), lms unmoved: every ss entry sits
    # at its margin (icat, which follows ss, is then beyond its own: its blocks are right, so the row counts ss's)
    target_moves = {stereoset[0].name: Move(0.0, cluster_sd=3.0, ss_margins=1.0)}
    diffuse = {t.name: Move(1.0) for t in arc + bangla}
    pooled_level = "the pooled family's level"
    rows += [
        Row("3 tasks over the same 1,172 questions, identical outcomes, each −½ point (the pooled margin), gated alone",
            three, at_pooled_margin, level=pooled_level),
        Row("row 12 with no clusters declared (the gate before clustered evidence)", [undeclared(t) for t in three],
            at_pooled_margin, level=pooled_level),
        Row("arc_mt shape: 12 tasks over the same 1,172 questions, identical outcomes, each −½ point, gated alone",
            twelve, at_pooled_margin, level=pooled_level),
        Row(f"arc_mt shape, cross-language correlation {CROSS_LANGUAGE}, each −½ point, gated alone", languages,
            at_pooled_margin, level=pooled_level),
        Row("row 15 with no clusters declared", [undeclared(t) for t in languages], at_pooled_margin,
            level=pooled_level),
        Row("a group of 3 tasks (800 documents each) gated beside them, each −½ point", beside, at_pooled_margin,
            level=pooled_level),
        Row("stereoset_intrasentence, ss 1 margin further from ½, each target's own change sd 3 margins, gated alone",
            stereoset, target_moves, level="alpha 5%", watched="ss"),
        Row("row 18 with no clusters declared", [undeclared(t) for t in stereoset], target_moves, level="alpha 5%",
            watched="ss"),
        Row(f"every ARC and Bangla task −1 point (arc_mt's languages correlated {CROSS_LANGUAGE}), arc_mt and bangla "
            "gated", arc + bangla, diffuse),
        Row("row 20 with no clusters declared", [undeclared(t) for t in arc + bangla], diffuse),
    ]
    chosen = [rows[int(i) - 1] for i in args.rows] if args.rows else rows
    print(f"{args.candidates} candidates per row, seed {args.seed}, discordance {DISCORDANCE}, acc/acc_norm "
          f"correlation {CORRELATION}, CrowS gap noise sd {GAP_NOISE_BASE} + {GAP_NOISE_SLOPE}·|gap| nats, "
          f"{100 * TARGETED_SHARE:g}% of a biased category's pairs shifted\n")
    print("| # | row | gated tasks | blocked | by a pooled entry alone | both categories named (or a watched metric's "
          "entry regressed) | a pooled entry "
          "blocked (its level) | pooled documents |")
    print("|---|---|---|---|---|---|---|---|")
    shifts: dict = {}
    print_rows(rows, chosen, lambda row: run_row(row, args.candidates, rng, shifts), lambda result: [
        str(result["tasks"]), f"{100 * result['blocked']:.1f}%", f"{100 * result['blocked_by_pooled_alone']:.1f}%",
        f"{100 * result['named']:.1f}%" if "named" in result else
        f"an ss entry: {100 * result['watched_blocked']:.1f}%" if "watched_blocked" in result else "",
        f"{100 * result['pooled_blocked']:.1f}% ({100 * result['pooled_level']:.2f}%)" if result["pooled_level"] else "",
        ", ".join(f"{n:,}" for n in result["pooled_documents"])], args.json_out)


if __name__ == "__main__":
    main()
