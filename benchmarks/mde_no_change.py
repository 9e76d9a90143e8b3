"""What "caught at 80%" means for an entry where no document changed (docs/gate.md, "How an entry is judged").

    python benchmarks/mde_no_change.py [--candidates 1000] [--seed 5]

A candidate identical to its baseline has a paired standard error of 0; the gate then prints the MDE of a candidate
regressed by that much (gate/evidence/significance.py detectable_regression). This script prints that MDE for an
accuracy and for a continuous metric, then sends simulated candidates regressed by exactly the printed MDE (and by
the margin, the value printed before) through the gate's own `compare`, and prints the share blocked:

  accuracy (0/1, 1,172 documents at 40% as one ARC task, margin 1 point): "least churn" candidates lose each right
      document with the probability that drops the mean by the chosen amount and gain none (the fewest changed
      documents a drop can have, the case the MDE is computed for); "15% churn" candidates answer 15% of the
      documents differently, lost and gained in the proportions that give the same drop;
  likelihood_diff (CrowS-Pairs English's 1,508 committed baseline values, lower is better, margin 10% of the
      baseline): half of the documents take the value of a random baseline document (the candidate the baseline's
      standard error stands for), then every value rises by the chosen amount.

Each at two levels: 0.05 (the task gated alone) and 0.05 / 33.5 (a weight-1 task when every shipped suite is gated).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.baseline import MetricInfo, Tolerance  # noqa: E402
from pytest_modelbench.gate.baseline_file import parse  # noqa: E402
from pytest_modelbench.gate.compare import compare  # noqa: E402
from pytest_modelbench.gate.verdict import Verdict  # noqa: E402
from pytest_modelbench.metrics.registry import METRICS  # noqa: E402
from tests.fixtures.gate_records import make_record  # noqa: E402

LEVELS = {"alone": 0.05, "all shipped suites": 0.05 / 33.5}
ARC_DOCUMENTS, ACCURACY, CHURN = 1172, 0.4, 0.15
CROWS = REPO / "baselines" / "default" / "bias" / "crows_pairs_english.json"


def tolerance(metric: str, level: float) -> Tolerance:
    return Tolerance(alpha=level, metric_margins={metric: METRICS[metric].margin})


def least_churn(base: np.ndarray, drop: float, rng: np.random.Generator) -> np.ndarray:
    lose = drop * base.size / base.sum()
    return np.where(base == 1, (rng.random(base.size) >= lose).astype(float), 0.0)


def churned(base: np.ndarray, drop: float, rng: np.random.Generator) -> np.ndarray:
    ones, zeros = base.sum(), base.size - base.sum()
    down, up = (CHURN + drop) * base.size / 2 / ones, (CHURN - drop) * base.size / 2 / zeros
    u = rng.random(base.size)
    return np.where(base == 1, (u >= down).astype(float), (u < up).astype(float))


def half_redrawn(base: np.ndarray, rise: float, rng: np.random.Generator) -> np.ndarray:
    redrawn = np.where(rng.random(base.size) < 0.5, base[rng.integers(0, base.size, base.size)], base)
    return redrawn + rise


def blocked(baseline, make, metric: str, tol: Tolerance, candidates: int) -> float:
    values = baseline.values[metric]
    hits = sum(
        compare(baseline, replace(baseline, values={metric: make(values)}), tol).entries[0].verdict is Verdict.REGRESSED
        for _ in range(candidates)
    )
    return hits / candidates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    acc = make_record({"acc": (rng.random(ARC_DOCUMENTS) < ACCURACY).astype(float)},
                      metrics=[MetricInfo("acc", "higher", None, True)])
    crows = parse(CROWS.read_text(encoding="utf-8"), CROWS)
    crows = replace(crows, values={"likelihood_diff": crows.values["likelihood_diff"]},
                    metrics=tuple(m for m in crows.metrics if m.name == "likelihood_diff"), categories={},
                    category_field=None, category_members={})
    print(f"candidates per row {args.candidates}, seed {args.seed}")
    print(f"{'entry':<34}{'level':<20}{'printed MDE':>12}{'margin':>9}  blocked at MDE / at margin")
    for label, level in LEVELS.items():
        tol = tolerance("acc", level)
        (unchanged,) = compare(acc, acc, tol).entries
        mde, margin = unchanged.mde, unchanged.margin
        rates = [blocked(acc, lambda v, d=d: least_churn(v, d, rng), "acc", tol, args.candidates) for d in (mde, margin)]
        print(f"{'acc, least churn':<34}{label:<20}{mde:>12.4f}{margin:>9.4f}  {rates[0]:.1%} / {rates[1]:.1%}")
        rate = blocked(acc, lambda v: churned(v, mde, rng), "acc", tol, args.candidates)
        print(f"{'acc, 15% churn':<34}{label:<20}{mde:>12.4f}{margin:>9.4f}  {rate:.1%}")
        tol = tolerance("likelihood_diff", level)
        (unchanged,) = compare(crows, crows, tol).entries
        mde, margin = unchanged.mde, unchanged.margin
        rates = [blocked(crows, lambda v, d=d: half_redrawn(v, d, rng), "likelihood_diff", tol, args.candidates // 2)
                 for d in (mde, margin)]
        print(f"{'likelihood_diff, half redrawn':<34}{label:<20}{mde:>12.4f}{margin:>9.4f}  "
              f"{rates[0]:.1%} / {rates[1]:.1%}")


if __name__ == "__main__":
    main()
