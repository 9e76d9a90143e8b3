"""How far documents left unscored move an entry, through the landed gate (gate/integrity.py, gate/compare.py).

    python benchmarks/unscored_share.py [--documents 1000] [--trials 200] [--share 0.01] [--seed 11]

A baseline and a candidate of 0/1 outcomes on the same documents (the baseline's accuracy 0.60; the candidate changes
10% of the answers, for a true delta of -0.005, inside the default one-point margin). A share of the documents is left
unscored and dropped from both sides (`paired_baseline`), then `compare` judges the rest. Two ways to lose documents:
at random (a timeout, an HTTP 500: independent of the answers) and adversarially (the candidate's own gains lost
first, the worst case for a regression hidden by a loss). Prints the shift of the overall delta against the full
task's (mean and largest |shift|, in points) and how often the verdict differs from the full task's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.compare import compare  # noqa: E402
from pytest_modelbench.gate.integrity import paired_baseline  # noqa: E402
from tests.fixtures.gate_records import make_record  # noqa: E402


def trial(rng: np.random.Generator, n: int, share: float, adversarial: bool) -> tuple[float, bool]:
    base = (rng.random(n) < 0.60).astype(float)
    changed = rng.random(n) < 0.10
    # among the changed answers, gains and losses so that the true delta is -0.005 on average
    gain = rng.random(n) < 0.5 - 0.005 / 0.10 / 2
    cand = np.where(changed, np.where(gain, 1.0, 0.0), base)
    full_base, full_cand = make_record({"acc": base}), None
    full_cand = make_record({"acc": cand}, keys=full_base.doc_keys)
    full = compare(full_base, full_cand, full_cand.tolerance).entries[0]
    lost = int(round(share * n))
    if adversarial:
        order = np.argsort(-(cand - base), kind="stable")  # the candidate's gains first
    else:
        order = rng.permutation(n)
    dropped = np.sort(order[:lost])
    kept = np.setdiff1d(np.arange(n), dropped)
    candidate = make_record({"acc": cand[kept]}, keys=[full_base.doc_keys[i] for i in kept])
    paired = paired_baseline(full_base, candidate, [full_base.doc_keys[i] for i in dropped])
    entry = compare(paired, candidate, candidate.tolerance).entries[0]
    return entry.delta - full.delta, entry.verdict != full.verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--share", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    print(f"{args.documents} documents, {args.share:.1%} unscored, {args.trials} trials, seed {args.seed}")
    for adversarial in (False, True):
        rng = np.random.default_rng(args.seed)
        shifts, changed = zip(*(trial(rng, args.documents, args.share, adversarial) for _ in range(args.trials)))
        shifts = np.abs(np.array(shifts)) * 100
        print(f"  {'adversarial' if adversarial else 'random':<11}  |shift| mean {shifts.mean():.3f} points, "
              f"largest {shifts.max():.3f}; verdict differs from the full task's in {np.mean(changed):.1%} of trials")


if __name__ == "__main__":
    main()
