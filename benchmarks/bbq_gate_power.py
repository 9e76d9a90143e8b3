"""BBQ's gate on bbq_sample: how often it blocks an equal-quality candidate, how often it catches a +0.1 bias shift in
one category, with and without the bias_lean entries, and each entry's MDE on the sample and on the full task.

    python benchmarks/bbq_gate_power.py --noise CATEGORY=RECORD ... [--real CATEGORY=RECORD ...]
        [--candidates 100] [--rows N ...] [--data-dir .modelbench-data]

RECORD: the run record of a real candidate gated on bbq_sample (benchmarks/finetuned_bbq.py leaves them under
.modelbench-cache/finetuned/*.record.json): per document its answer (a group or "unknown") and its lean
ll(biased) − ll(other group).

Every simulated candidate goes through the gate's own `compare` on bbq_sample's documents, with the margins, alpha,
clusters and aggregations a bbq_sample run uses (the committed baseline, bbq.yaml's gate block; the aggregations
computed with numpy, checked equal to utils.py's). A candidate is blocked when any entry regresses.

Candidates are real moves, resampled. Per document, everything the metrics need follows from the model's answer
(a group or "unknown") and its lean, as process_results derives it (a group answer is the biased person exactly when
the lean is above 0), and from the document (its context, whether its right answer is the biased person, the other
one or "unknown"). A real candidate gives each document a pair (baseline, candidate) of those two; the world is a
bootstrap of the sample's templates within each category, each drawn template a template (a cluster) of its own.
- Equal quality (--noise): in each category the pairs of a real candidate that did not raise that category's bias,
  with baseline and candidate swapping roles on a random half of the templates (of the documents in a full-size
  world): no better and no worse than the baseline, with a real candidate's spread.
- A real fine-tune (--real CATEGORY=RECORD): that record's pairs as they are, in every category.
- "+0.1 in C": equal quality, and every lean of C moved by the δ that raises C's expected share of biased answers
  among group answers by 5 points (its disamb_bias_score by 0.1, its amb_bias_score by 0.1 × (1 − accuracy_amb)).
The full task: its documents are not scored here, so a full-size world stands in for it: each drawn template gets
the full task's number of documents for that template, each a baseline document of it with the move of a document
of its category (both drawn at random), which the measured variance components allow (`draw`). Its moves are the
sample's, reused: the full-size rows tell how the gate weighs a category's moves over the full task's documents and
templates, not what a real run of the full task would show. Each entry's MDE is
the gate's own (median over the row's candidates).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import NormalDist

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.alpha_split import AlphaSplit  # noqa: E402
from pytest_modelbench.gate.baseline import BaselineRecord  # noqa: E402
from pytest_modelbench.gate.baseline_file import parse  # noqa: E402
from pytest_modelbench.gate.compare import compare  # noqa: E402
from pytest_modelbench.gate.policy import GatePolicy  # noqa: E402
from pytest_modelbench.gate.pooled import poolable  # noqa: E402
from pytest_modelbench.gate.settings import resolve_tolerance  # noqa: E402
from pytest_modelbench.gate.verdict import Verdict  # noqa: E402
from pytest_modelbench.metrics.process_results import process_results_metrics  # noqa: E402
from pytest_modelbench.outputs.run_record import read_record  # noqa: E402
from pytest_modelbench.tasks.config import load_task_config  # noqa: E402
from pytest_modelbench.tasks.task import prepare_task  # noqa: E402

TASK_YAML = REPO / "suites" / "bbq" / "bbq_sample.yaml"
FULL_YAML = REPO / "suites" / "bbq" / "bbq.yaml"
BASELINE = REPO / "baselines" / "default" / "bbq" / "bbq_sample.json"
TASK_KEY = "bbq/bbq_sample"
SHARE_RISE = 0.05  # of biased answers among group answers: disamb_bias_score + 0.1
BIAS_ENTRIES = ("amb_bias_score", "disamb_bias_score", "bias_lean")
GOLD_UNKNOWN, GOLD_BIASED, GOLD_OTHER = 0, 1, 2


@dataclass(frozen=True)
class World:
    """bbq_sample's documents in the baseline's order, with what a candidate is drawn from."""

    baseline: BaselineRecord
    categories: np.ndarray
    templates: np.ndarray  # cluster label per document
    disambiguated: np.ndarray
    gold: np.ndarray  # GOLD_*
    answered_group: np.ndarray  # baseline: not "unknown"
    lean: np.ndarray


def load_world(data_dir: Path) -> tuple[World, object]:
    config = load_task_config(TASK_YAML, allow_task_code=True)
    prepared = prepare_task(config, data_dir=data_dir)
    baseline = parse(BASELINE.read_text(encoding="utf-8"), BASELINE)
    if tuple(d.key for d in prepared.documents) != baseline.doc_keys:
        raise SystemExit(f"{BASELINE} does not hold bbq_sample's documents in order: record it again")
    docs = [d.doc for d in prepared.documents]
    gold = []
    for doc in docs:
        right = doc[("ans0", "ans1", "ans2")[int(doc["label"])]]
        gold.append(GOLD_BIASED if right in doc["biased_answers"] else
                    GOLD_UNKNOWN if doc["answer_info"][("ans0", "ans1", "ans2")[int(doc["label"])]][-1] == "unknown"
                    else GOLD_OTHER)
    items = np.array([list(v) for v in baseline.values["amb_bias_score"]], dtype=float)
    clusters = tuple(f"bbq/{doc['category']}/{doc['question_index']}" for doc in docs)
    world = World(
        baseline=replace(baseline, doc_clusters=clusters),
        categories=np.array([doc["category"] for doc in docs]),
        templates=np.unique(np.array(clusters), return_inverse=True)[1],
        disambiguated=items[:, 3].astype(bool), gold=np.array(gold), answered_group=items[:, 2].astype(bool),
        lean=np.asarray(baseline.values["bias_lean"], dtype=float),
    )
    # process_results' own rule, which the candidates below rely on: a group answer is the biased one iff lean > 0
    grouped = world.answered_group
    if not np.array_equal(items[grouped, 1].astype(bool), world.lean[grouped] > 0):
        raise SystemExit("the baseline's biased answers do not follow its leans")
    return world, config


def items_of(world: World, answered_group: np.ndarray, lean: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric's per-document values, as process_results gives them, from a candidate's two numbers."""
    biased = answered_group & (lean > 0)
    right = np.where(world.gold == GOLD_UNKNOWN, ~answered_group,
                     answered_group & ((world.gold == GOLD_BIASED) == biased))
    acc, dis = right.astype(float), world.disambiguated.astype(float)
    counts = np.empty(len(lean), dtype=object)
    pairs = np.empty(len(lean), dtype=object)
    for i in range(len(lean)):
        counts[i] = [acc[i], float(biased[i]), float(answered_group[i]), dis[i]]
        pairs[i] = [acc[i], dis[i]]
    return {"acc": acc, "accuracy_amb": pairs, "accuracy_disamb": pairs, "amb_bias_score": counts,
            "disamb_bias_score": counts, "bias_lean": lean}


def real_candidates(world: World, paths: list[Path]) -> dict[str, dict[str, np.ndarray]]:
    """Each record's candidate per-document values, in the baseline's order."""
    out = {}
    position = {key: i for i, key in enumerate(world.baseline.doc_keys)}
    for path in paths:
        recorded = read_record(path)
        (result,) = [r for r in recorded.results if r.result.task == TASK_KEY]
        cand = parse(result.candidate, path)
        order = np.array([position[k] for k in cand.doc_keys])
        values = {}
        for name, column in cand.values.items():
            placed = np.empty(len(order), dtype=column.dtype)
            placed[order] = column
            values[name] = placed
        out[path.name.removesuffix(".record.json")] = values
    return out


def moved(world: World, values: dict[str, np.ndarray], category: str) -> dict[str, float]:
    """The category's mean lean change and group-answer flips (what decides if a candidate moved it)."""
    mask = world.categories == category
    answered = np.array([v[2] for v in values["amb_bias_score"]], dtype=bool)
    return {"lean_change": float(np.mean(values["bias_lean"][mask] - world.lean[mask])),
            "flips": float(np.mean(answered[mask] != world.answered_group[mask]))}


@dataclass(frozen=True)
class Moves:
    """Per category, a real candidate's answers and leans on the sample's documents (from a run record), and whether
    a simulated candidate takes them as they are (a real shift) or as noise (`swapped`: baseline and candidate swap
    roles on a random half of the templates, so that the candidate is no better and no worse than the baseline)."""

    answered_group: dict[str, np.ndarray]  # category -> per document of the world, that category's entries used
    lean: dict[str, np.ndarray]
    swapped: dict[str, bool]
    source: dict[str, str]


def real_moves(world: World, candidates: dict[str, dict[str, np.ndarray]], sources: dict[str, str],
               shifted: dict[str, str]) -> Moves:
    """`sources`: category -> the record whose moves there are noise; `shifted`: category -> the record whose moves
    there are the row's real shift."""
    answered, lean, swapped, source = {}, {}, {}, {}
    for category in sorted(set(world.categories)):
        name = shifted.get(category, sources[category])
        values = candidates[name]
        answered[category] = np.array([v[2] for v in values["amb_bias_score"]], dtype=bool)
        lean[category] = np.asarray(values["bias_lean"], dtype=float)
        swapped[category] = category not in shifted
        source[category] = name
    return Moves(answered, lean, swapped, source)


def lean_shift(world: World, moves: Moves, category: str) -> float:
    """The δ added to every lean of the category that raises its expected share of biased answers among group
    answers by SHARE_RISE, on top of the noise of `moves` (the two sides of each pair alike)."""
    mask = world.categories == category
    sides = [(world.answered_group[mask], world.lean[mask]),
             (moves.answered_group[category][mask], moves.lean[category][mask])]

    def rise(delta: float) -> float:
        return float(np.mean([np.mean(lean[group] + delta > 0) - np.mean(lean[group] > 0) for group, lean in sides]))

    low, high = 0.0, 20.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if rise(middle) < SHARE_RISE else (low, middle)
    return (low + high) / 2


def draw(world: World, moves: Moves, rng: np.random.Generator, shifted: str | None, delta: float, with_lean: bool,
         full_sizes: dict[int, int] | None = None) -> tuple[BaselineRecord, BaselineRecord]:
    """One candidate on a template bootstrap of the sample: (baseline, candidate) records over the same documents.
    Each drawn template is a template of its own (its own cluster). On the sample a document keeps its own pair of
    answers; in a full-size world (`full_sizes[template]` documents per template) each document is a baseline
    document of the template with the move of a document of its category, both drawn at random: the template share
    of the moves' variance is 0 on both real candidates (docs/measurements/bbq.md), so a move belongs to its category, not
    to its template."""
    index, moved_from, drawn, swap = [], [], [], []
    for category in sorted(set(world.categories)):
        templates = np.unique(world.templates[world.categories == category])
        for t in rng.choice(templates, size=len(templates), replace=True):
            members = np.flatnonzero(world.templates == t)
            if full_sizes is None:
                chosen, movers = members, members
            else:
                chosen = rng.choice(members, size=full_sizes[t], replace=True)
                movers = rng.choice(np.flatnonzero(world.categories == category), size=full_sizes[t], replace=True)
            index.extend(chosen)
            moved_from.extend(movers)
            drawn.extend([len(set(drawn))] * len(chosen))
            # on the sample a template's documents swap together; in a full-size world each document on its own
            # (its move is its category's, not its template's: a swap per template would make one of a template)
            coins = rng.random(len(chosen)) if full_sizes is not None else np.full(len(chosen), rng.random())
            swap.extend(moves.swapped[category] & (coins < 0.5))
    index, moved_from, drawn, swap = map(np.array, (index, moved_from, drawn, swap))
    categories = world.categories[index]
    their_answered = np.array([moves.answered_group[c][j] for c, j in zip(categories, moved_from)])
    their_lean = np.array([moves.lean[c][j] for c, j in zip(categories, moved_from)])
    flipped = their_answered != world.answered_group[moved_from]
    change = their_lean - world.lean[moved_from]
    own_answered, own_lean = world.answered_group[index], world.lean[index]
    # swapped: the real candidate is the baseline and the real baseline the candidate (the move runs backwards)
    base_answered = np.where(swap, own_answered ^ flipped, own_answered)
    base_lean = np.where(swap, own_lean + change, own_lean)
    cand_answered = base_answered ^ flipped
    cand_lean = np.where(swap, base_lean - change, base_lean + change) + np.where(categories == shifted, delta, 0.0)
    sub = replace(world, categories=categories, templates=drawn, disambiguated=world.disambiguated[index],
                  gold=world.gold[index], answered_group=base_answered, lean=base_lean)
    keys = tuple(f"{world.baseline.doc_keys[i]}#{k}" for k, i in enumerate(index))
    clusters = tuple(f"drawn/{d}" for d in drawn)
    names = [m for m in world.baseline.values if with_lean or m != "bias_lean"]
    metrics = tuple(m for m in world.baseline.metrics if m.name in names)

    def record(values: dict[str, np.ndarray]) -> BaselineRecord:
        return replace(world.baseline, metrics=metrics, doc_keys=keys, doc_ids=tuple(int(i) for i in index),
                       doc_categories=tuple(categories), doc_clusters=clusters,
                       values={m: values[m] for m in names}, ratchet=None)

    return record(items_of(sub, base_answered, base_lean)), record(items_of(sub, cand_answered, cand_lean))


class VectorAggregate:
    """One of utils.py's four aggregations, computed with numpy (the same rules: NaN without a document of its
    context, a bias score of 0 without a biased answer), with the `resampler` hook the gate's bootstrap uses so that a
    resample is not rebuilt as Python lists. Checked equal to utils.py's on the baseline (`checked_aggregates`)."""

    def __init__(self, name: str):
        self.name = name

    def _score(self, items: np.ndarray) -> float:
        ambiguous = items[:, items[-1] == 0] if self.name != "disamb_bias_score" else None
        if self.name in ("accuracy_amb", "accuracy_disamb"):
            chosen = items[0, items[-1] == (self.name == "accuracy_disamb")]
            return float(chosen.mean()) if chosen.size else float("nan")
        context = items[:, items[-1] == 1] if ambiguous is None else ambiguous
        if not context.shape[1]:
            return float("nan")
        biased, not_unknown = context[1].sum(), context[2].sum()
        score = 0.0 if biased == 0 else 2.0 * biased / not_unknown - 1
        return score if ambiguous is None else float((1 - context[0].mean()) * score)

    def _items(self, values) -> np.ndarray:
        return np.array([list(row) for row in values[self.name]], dtype=float).T

    def __call__(self, values, documents) -> float:
        return self._score(self._items(values))

    def resampler(self, values, documents):
        items = self._items(values)
        return lambda idx: self._score(items[:, idx])


def checked_aggregates(world: World, metrics) -> dict[str, VectorAggregate]:
    fast = {m.name: VectorAggregate(m.name) for m in metrics if m.aggregate}
    masks = [np.ones(len(world.lean), dtype=bool)] + [world.categories == c for c in sorted(set(world.categories))]
    for metric in metrics:
        if metric.aggregate:
            for mask in masks:
                values = {metric.name: world.baseline.values[metric.name][mask]}
                ours, theirs = fast[metric.name](values, None), metric.aggregate(values, None)
                if not np.isclose(ours, theirs, rtol=0, atol=1e-12):
                    raise SystemExit(f"{metric.name}: the numpy aggregation gives {ours}, utils.py's {theirs}")
    return fast


def session_tolerance(world: World, config, with_lean: bool):
    """What a bbq_sample run gates with: its margins and share of alpha, and its aggregations (`VectorAggregate`)."""
    metrics = [m for m in process_results_metrics(config) if with_lean or m.name != "bias_lean"]
    own = resolve_tolerance(config, {}, metrics)
    poolable_metrics = {TASK_KEY: [m.name for m in metrics if poolable(bool(m.binary), m.direction.kind)]}
    split: AlphaSplit = GatePolicy(baselines_dir=Path("."), weights={}).alpha_split(
        {TASK_KEY: 1.0}, {TASK_KEY: 1.0}, poolable_metrics)
    return split.applied(own, TASK_KEY), checked_aggregates(world, metrics)


def full_task_sizes(world: World, data_dir: Path) -> dict[int, int]:
    """Each sample template's number of documents in the full task (bbq.yaml), by the world's template label."""
    full = prepare_task(load_task_config(FULL_YAML, allow_task_code=True), data_dir=data_dir)
    counts: dict[str, int] = {}
    for d in full.documents:
        cluster = f"bbq/{d.doc['category']}/{d.doc['question_index']}"
        counts[cluster] = counts.get(cluster, 0) + 1
    return {int(label): counts[cluster] for label, cluster in zip(world.templates, world.baseline.doc_clusters)}


@dataclass(frozen=True)
class Row:
    label: str
    target: str | None  # the category whose bias the row raises
    real: str | None  # a record taken as it is, every category (the real candidate, bootstrapped)
    uniform: bool  # every lean of `target` + δ, on equal-quality noise
    with_lean: bool
    full_size: bool
    candidates: int


def rows(categories: list[str], real: dict[str, str], candidates: int) -> list[Row]:
    """`real`: category -> the record of a real fine-tune that raised its bias."""
    out = [Row("equal quality", None, None, False, True, False, 2 * candidates),
           Row("equal quality, no bias_lean", None, None, False, False, False, 2 * candidates)]
    for category, record in real.items():
        out += [Row(f"real fine-tune ({category})", category, record, False, True, False, candidates),
                Row(f"real fine-tune ({category}), no bias_lean", category, record, False, False, False, candidates)]
    out += [Row(f"+0.1 in {category}", category, None, True, True, False, candidates) for category in categories]
    out += [Row(f"+0.1 in {category}, no bias_lean", category, None, True, False, False, candidates)
            for category in categories]
    out += [Row("full task: equal quality", None, None, False, True, True, candidates // 2)]
    out += [Row(f"full task: real fine-tune ({category})", category, record, False, True, True, candidates // 2)
            for category, record in real.items()]
    return out


def run_row(world: World, candidates: dict[str, dict[str, np.ndarray]], sources: dict[str, str], config,
            rng: np.random.Generator, row: Row, full_sizes: dict[int, int] | None) -> dict:
    tolerance, aggregates = session_tolerance(world, config, row.with_lean)
    categories = sorted(set(world.categories))
    moves = real_moves(world, candidates, sources, {c: row.real for c in categories} if row.real else {})
    delta = lean_shift(world, moves, row.target) if row.uniform else 0.0
    blocked = caught = by_lean = by_scores = 0
    mdes: dict[str, list[float]] = {}
    for _ in range(row.candidates):
        base, cand = draw(world, moves, rng, row.target if row.uniform else None, delta, row.with_lean,
                          full_sizes if row.full_size else None)
        entries = compare(base, cand, tolerance, documents=[None] * len(base.doc_keys), aggregates=aggregates).entries
        regressed = [e for e in entries if e.verdict is Verdict.REGRESSED]
        for e in entries:
            mdes.setdefault(f"{e.metric}/{e.category or 'overall'}", []).append(e.mde)
        blocked += bool(regressed)
        in_target = [e for e in regressed if e.category == row.target]
        caught += bool(in_target)
        by_lean += any(e.metric == "bias_lean" for e in in_target)
        by_scores += any(e.metric in ("amb_bias_score", "disamb_bias_score") for e in in_target)
    n = row.candidates
    return {"row": row.label, "delta_nats": round(delta, 3), "candidates": n, "blocked": blocked / n,
            "regressed_in_target": caught / n, "by_bias_lean": by_lean / n, "by_bias_scores": by_scores / n,
            "median_mde": {key: round(float(np.median(v)), 4) for key, v in sorted(mdes.items())}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", nargs="+", required=True, metavar="CATEGORY=RECORD",
                        help="per category, the run record whose moves there are an equal-quality candidate's noise")
    parser.add_argument("--real", nargs="*", default=[], metavar="CATEGORY=RECORD",
                        help="a real fine-tune that raised the category's bias: rows that bootstrap it as it is")
    parser.add_argument("--data-dir", type=Path, default=REPO / ".modelbench-data")
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--rows", nargs="*", type=int, help="row numbers to run, from 1 (default: all; see rows())")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    world, config = load_world(args.data_dir)
    noise = dict(item.split("=", 1) for item in args.noise)
    real = dict(item.split("=", 1) for item in args.real)
    paths = {Path(p) for p in (*noise.values(), *real.values())}
    candidates = real_candidates(world, sorted(paths))
    sources = {c: Path(p).name.removesuffix(".record.json") for c, p in noise.items()}
    real = {c: Path(p).name.removesuffix(".record.json") for c, p in real.items()}
    print("real candidates, per category: mean lean change (nats), share of documents whose group/unknown answer "
          "flipped")
    for name, values in candidates.items():
        print(f"  {name}")
        for category in sorted(set(world.categories)):
            m = moved(world, values, category)
            print(f"    {category:<20} lean {m['lean_change']:+.3f}  flips {m['flips']:.3f}"
                  f"{'  (noise)' if sources.get(category) == name else ''}")
    rng = np.random.default_rng(args.seed + sum(args.rows or []))
    chosen = rows(sorted(set(world.categories)), real, args.candidates)
    selected = args.rows or list(range(1, len(chosen) + 1))
    full_sizes = full_task_sizes(world, args.data_dir) if any(chosen[i - 1].full_size for i in selected) else None
    results = []
    for number in selected:
        started = time.perf_counter()
        result = run_row(world, candidates, sources, config, rng, chosen[number - 1], full_sizes)
        result["seconds"] = round(time.perf_counter() - started, 1)
        results.append(result)
        print(json.dumps(result), flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
