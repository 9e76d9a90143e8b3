"""The gate's error rates on simulated release candidates with the shipped suites' shapes.

    python benchmarks/gate_error_rates.py [--repetitions 30] [--seed 11] [--discordance 0.15] [--resamples 200]

Every candidate goes through the gate's own `compare` (the tests, the margins, weighted Holm, the verdicts) with the
defaults a run over the shipped suites uses: each metric's own margin (metrics/registry.py), alpha 0.05 shared by
the gated tasks. A candidate is blocked when any entry of any gated task regresses. Printed, per way of gating:

- nothing moved: every entry's true change is 0, documents still flip both ways (the churn of a new checkpoint);
- all −½ margin: every entry of every task is truly worse by half its margin (inside the tolerance band);
- first task −2 / −3 margins: the group's first task is worse by 2 or 3 margins in every entry, the rest
  unchanged: the power to see a real regression.
Changes are in units of each metric's own margin (1 point for an accuracy), also in the rows that gate with another
margin (--gate-margin), so that those rows show what the option buys on the same candidates.

Baselines. Bias tasks: the committed per-document values of baselines/default/bias/ (real documents, categories
and values). StereoSet's lms, ss and icat are simulated as per-document means (lms per cluster; icat as a second
metric of lms's shape) rather than through the per-target-term aggregate, which needs the documents' fields and
is too slow to run thousands of times; the family of entries, and so alpha's split, is the real one.
Accuracy tasks: 0/1 outcomes at 40% accuracy, with the document counts below.

Speed: the gate's bootstrap runs `--resamples` resamples (default 200, the gate's own 2000 when given): it only
estimates the standard error of a delta (to about 5% at 200), and the simulation needs thousands of candidates.

Candidates. 0/1 outcomes: a share `--discordance` of documents flips (default 0.15), lost and gained in the
proportions that give the chosen true change; acc and acc_norm flip independently. likelihood_diff: each pair's
gap × (1 + change) × a mean-one log-normal factor (sd 0.2). lms and the icat stand-in: + change + N(0, 0.3).
Ideal-point metrics move away from (or towards) 0.5 within each category.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.baseline import BaselineRecord, MetricInfo, Tolerance
from pytest_modelbench.gate.baseline_file import parse  # noqa: E402
from pytest_modelbench.gate import compare as compare_module  # noqa: E402
from pytest_modelbench.gate.compare import compare  # noqa: E402
from pytest_modelbench.metrics.registry import METRICS, Margin  # noqa: E402

ACCURACY = 0.4
CONTINUOUS_NOISE = 0.3  # lms and the icat stand-in
LIKELIHOOD_DIFF_NOISE = 0.2  # sd of the log-normal factor
BIAS_BASELINES = REPO / "baselines" / "default" / "bias"

# (task, documents, metrics). arc_mt: 1,172 test documents per language (LumiOpen/arc_challenge_mt). bangla:
# openbookqa_bn 497 (the dataset card's test split); the other counts are the English originals' (PIQA validation,
# CommonsenseQA validation, BoolQ validation, MMLU test) as stand-ins: the Bangla sets are not available offline.
ARC_MT = [(f"arc_challenge_mt_{lang}", 1172, ("acc", "acc_norm"))
          for lang in ("da", "de", "el", "es", "fi", "hu", "is", "it", "nb", "pl", "pt", "sv")]
BANGLA = [("bangla_mmlu", 14042, ("acc", "acc_norm")), ("boolqa_bn", 3270, ("acc",)),
          ("openbookqa_bn", 497, ("acc", "acc_norm")), ("piqa_bn", 1838, ("acc",)),
          ("bangla_commonsenseqa", 1221, ("acc", "acc_norm"))]
BIAS = ["crows_pairs_english", "crows_pairs_french", "stereoset_intrasentence", "stereoset_intersentence"]


@dataclass(frozen=True)
class Task:
    baseline: BaselineRecord

    @property
    def name(self) -> str:
        return self.baseline.task


def accuracy_task(name: str, n: int, metrics: tuple[str, ...], rng: np.random.Generator) -> Task:
    from tests.fixtures.gate_records import make_record

    values = {m: (rng.random(n) < ACCURACY).astype(float) for m in metrics}
    return Task(make_record(values, metrics=[MetricInfo(m, "higher", None, True) for m in metrics], task=name))


def bias_task(name: str) -> Task:
    path = BIAS_BASELINES / f"{name}.json"
    record = parse(path.read_text(encoding="utf-8"), path)
    if "icat" in record.metric_names:  # per-document stand-ins for the aggregates (see the module docstring)
        metrics = tuple(MetricInfo(m.name, m.direction, m.ideal, m.binary) for m in record.metrics)
        values = {**record.values, "icat": record.values["lms"].copy()}
        record = replace(record, metrics=metrics, values=values)
    return Task(record)


def margins(record: BaselineRecord) -> dict[str, Margin]:
    return {m.name: METRICS[m.name].margin for m in record.metrics}


def flip(base: np.ndarray, mean_change: float, discordance: float, rng: np.random.Generator) -> np.ndarray:
    """0/1 outcomes whose mean moves by `mean_change` in expectation, with `discordance` of them flipped."""
    n, ones = base.size, int(base.sum())
    zeros = n - ones
    down = np.clip((discordance - mean_change) * n / 2 / max(ones, 1), 0, 1)
    up = np.clip((discordance + mean_change) * n / 2 / max(zeros, 1), 0, 1)
    u = rng.random(n)
    return np.where(base == 1, (u >= down).astype(float), (u < up).astype(float))


def candidate(task: Task, margins_moved: float, discordance: float, rng: np.random.Generator) -> BaselineRecord:
    """The task's baseline with every entry truly worse by `margins_moved` of its margin (negative: better)."""
    base = task.baseline
    categories = np.array(["" if c is None else c for c in base.doc_categories], dtype=object)
    values = {}
    for metric in base.row_metrics:
        margin = METRICS[metric.name].margin
        x = base.values[metric.name]
        if metric.name == "likelihood_diff":
            factor = rng.lognormal(-LIKELIHOOD_DIFF_NOISE**2 / 2, LIKELIHOOD_DIFF_NOISE, x.size)
            values[metric.name] = x * (1 + margins_moved * margin.relative) * factor
        elif metric.direction == "ideal":
            moved = np.empty_like(x)
            for category in set(categories.tolist()):
                mask = categories == category
                away = 1.0 if x[mask].mean() >= metric.ideal else -1.0
                moved[mask] = flip(x[mask], away * margins_moved * margin.absolute, discordance, rng)
            values[metric.name] = moved
        elif metric.binary:
            values[metric.name] = flip(x, -margins_moved * margin.absolute, discordance, rng)
        else:
            values[metric.name] = x - margins_moved * margin.absolute + rng.normal(0, CONTINUOUS_NOISE, x.size)
    return replace(base, values=values)


@dataclass(frozen=True)
class Gating:
    """A way of gating a group of tasks: the command line's choices."""

    label: str
    tasks: list[Task]
    per_task: bool = False  # --gate-error-control=task
    margin: float | None = None  # --gate-margin (every metric)
    alpha: float = 0.05  # --gate-alpha

    def tolerance(self, task: Task) -> Tolerance:
        metric_margins = margins(task.baseline)
        if self.margin is not None:
            metric_margins = {name: Margin(absolute=self.margin) for name in metric_margins}
        tasks = 1 if self.per_task else len(self.tasks)
        return Tolerance(alpha=self.alpha, tasks=tasks, metric_margins=metric_margins)


def blocked(gating: Gating, moved: dict[str, float], discordance: float, rng: np.random.Generator) -> bool:
    """One candidate: True when any entry of any gated task regresses. `moved`: task → margins worse."""
    regressed = False
    for task in gating.tasks:
        tolerance = gating.tolerance(task)
        cand = candidate(task, moved.get(task.name, 0.0), discordance, rng)
        regressed |= bool(compare(task.baseline, cand, tolerance).regressed)
    return regressed


def share(gating: Gating, moved: dict[str, float], repetitions: int, discordance: float,
          rng: np.random.Generator) -> float:
    return sum(blocked(gating, moved, discordance, rng) for _ in range(repetitions)) / repetitions


def detectable(gating: Gating, task: Task, discordance: float, rng: np.random.Generator,
               candidates: int = 5) -> dict[str, float]:
    """Per metric, the smallest regression of the task's overall entry caught with 80% power (the gate's MDE),
    median over candidates with no change."""
    found = defaultdict(list)
    for _ in range(candidates):
        comparison = compare(task.baseline, candidate(task, 0.0, discordance, rng), gating.tolerance(task))
        for entry in comparison.entries:
            if entry.category is None:
                found[entry.metric].append(entry.mde)
    return {metric: float(np.median(values)) for metric, values in found.items()}


def power_table(suites: dict[str, list[Task]], discordance: float, rng: np.random.Generator) -> list[dict]:
    everything = Gating("all", [t for tasks in suites.values() for t in tasks])
    print("\nSmallest regression of each overall score caught with 80% power (accuracies and bias shares as "
          "fractions, likelihood_diff in nats; ARC: one task stands for the 12):\n")
    print("| task | documents | all shipped suites | its suite alone | the task alone |")
    print("|---|---|---|---|---|")
    rows = []
    for suite, tasks in suites.items():
        for task in tasks[:1] if suite == "arc_mt" else tasks:
            cells = [detectable(g, task, discordance, rng) for g in (everything, Gating(suite, tasks), Gating("", [task]))]
            rows.append({"task": task.name, "documents": len(task.baseline.doc_keys), "mde": cells})
            text = [", ".join(f"{m} {v:.3f}" for m, v in cell.items()) for cell in cells]
            print(f"| {task.name} | {len(task.baseline.doc_keys):,} | " + " | ".join(text) + " |", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=30, help="candidates per cell (default 30)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--discordance", type=float, default=0.15, help="share of 0/1 outcomes that flip")
    parser.add_argument("--resamples", type=int, default=200, help="bootstrap resamples per entry (gate: 2000)")
    parser.add_argument("--json-out", default=None, help="also write the table as JSON")
    args = parser.parse_args()
    compare_module.N_RESAMPLES = args.resamples
    rng = np.random.default_rng(args.seed)
    arc = [accuracy_task(name, n, metrics, rng) for name, n, metrics in ARC_MT]
    bangla = [accuracy_task(name, n, metrics, rng) for name, n, metrics in BANGLA]
    bias = [bias_task(name) for name in BIAS]
    gatings = [
        Gating("all shipped suites (21 tasks)", arc + bangla + bias),
        Gating("all shipped suites, --gate-error-control=task", arc + bangla + bias, per_task=True),
        Gating("arc_mt (12 tasks)", arc),
        Gating("bangla (5 tasks)", bangla),
        Gating("bias (4 tasks)", bias),
        Gating("one ARC task (1,172 documents)", arc[:1]),
        Gating("one ARC task, --gate-margin=0.005", arc[:1], margin=0.005),
        Gating("one ARC task, --gate-margin=0", arc[:1], margin=0.0),
        Gating("one ARC task, --gate-alpha=0.2", arc[:1], alpha=0.2),
    ]
    scenarios = [("nothing moved", None, 0.0), ("all −½ margin", None, 0.5),
                 ("first task −2 margins", 2.0, 0.0), ("first task −3 margins", 3.0, 0.0)]
    print(f"{args.repetitions} candidates per cell, seed {args.seed}, discordance {args.discordance}, "
          f"{args.resamples} bootstrap resamples; share of candidates blocked")
    print()
    print("| gated together | first task | " + " | ".join(s[0] for s in scenarios) + " |")
    print("|---|---|" + "---|" * len(scenarios))
    table = []
    start = time.perf_counter()
    for gating in gatings:
        cells = []
        for _, first_task_drop, everyone in scenarios:
            moved = {t.name: everyone for t in gating.tasks}
            if first_task_drop is not None:
                moved[gating.tasks[0].name] = first_task_drop
            cells.append(share(gating, moved, args.repetitions, args.discordance, rng))
        first = gating.tasks[0].name
        table.append({"gating": gating.label, "first_task": first, **{s[0]: c for s, c in zip(scenarios, cells)}})
        print(f"| {gating.label} | {first} | " + " | ".join(f"{100 * c:.1f}%" for c in cells) + " |", flush=True)
    power = power_table({"arc_mt": arc, "bangla": bangla, "bias": bias}, args.discordance, rng)
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if args.json_out:
        document = {"blocked": table, "detectable": power}
        Path(args.json_out).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
