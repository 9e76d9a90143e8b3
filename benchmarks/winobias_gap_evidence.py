"""WinoBias coreference: is a per-template likelihood gap stronger evidence than the 0/1 acc_gap? Measured on real
log-likelihoods, tested by the gate's own paired test.

    python benchmarks/winobias_gap_evidence.py CHECKPOINT... [--data-dir .modelbench-data] [--candidates 300]

Per template, winobias_coreference scores four texts: the pro-stereotypical sentence resolved to the referent (a)
and to the other occupation (b), the anti-stereotypical one the same two ways (c, d). acc_gap = [a > b] − [c > d];
the gap is (a − b) − (c − d), in nats: how much more the referent wins in the pro-stereotypical sentence than in the
anti-stereotypical one. A model whose coreference follows the stereotype more has a larger value of both.

1. Real checkpoints. The default model and each CHECKPOINT (other checkpoints of it: the BBQ fine-tunes of
   benchmarks/finetuned_bbq.py, trained on no gender coreference) score the task in process (float32, shared
   prefixes). Their per-template changes against the default model, centred, give the noise of an equal-quality
   candidate: each of (a − b) and (c − d) moves by the measured change of a real checkpoint.
2. Simulated candidates, both metrics on the same draws. The default model's four log-likelihoods per template, plus
   one real checkpoint's per-template changes resampled by occupation pair (the task's clusters), plus a stereotype
   shift s: (a − b) + s/2 and (c − d) − s/2 on every template. acc_gap and the gap follow; each is tested by the
   gate's paired cluster bootstrap (gate/evidence `paired_test`, the clusters of the YAML) at the gate's own level,
   acc_gap at its 0.01 margin (by its distance from 0, as the YAML has it), the gap at a 0.05-nat margin (the
   BBQ lean's: a log-odds). Printed per s: acc_gap's expected change and how often each entry regresses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.evidence.paired_tests import N_RESAMPLES, paired_test  # noqa: E402
from pytest_modelbench.gate.evidence.clusters import cluster_labels  # noqa: E402
from pytest_modelbench.run.evaluation import evaluate_task  # noqa: E402
from pytest_modelbench.scoring.causal import CausalLMScorer  # noqa: E402
from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source  # noqa: E402
from pytest_modelbench.tasks.config import load_task_config  # noqa: E402
from pytest_modelbench.tasks.task import prepare_task  # noqa: E402

TASK_YAML = REPO / "suites" / "winobias" / "winobias_coreference.yaml"
ALPHA = 0.05 / 6  # the task's 3 metrics overall and in its 2 categories, Holm's first step: a conservative level
GAP_MARGIN, ACC_GAP_MARGIN = 0.05, 0.01
SHIFTS = (0.0, 0.1, 0.2, 0.3, 0.5)


def pro_anti(model: str, data_dir: Path) -> tuple[np.ndarray, np.ndarray, list]:
    """Per template: (a − b, c − d) in nats, and the prepared documents."""
    prepared = prepare_task(load_task_config(TASK_YAML, allow_task_code=True), data_dir=data_dir)
    loaded = load_model(resolve_model_source(model), dtype="float32")
    evaluation = evaluate_task(prepared, CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=16, fast=True))
    lls = np.array(evaluation.loglikelihoods, dtype=float)
    return lls[:, 0] - lls[:, 1], lls[:, 2] - lls[:, 3], evaluation.prepared.documents


def rejected(base: np.ndarray, cand: np.ndarray, clusters: np.ndarray, margin: float, ideal: float | None,
             seed: int) -> bool:
    test = paired_test(base, cand, direction="ideal" if ideal is not None else "lower", ideal=ideal, binary=False,
                       seed=seed, n_resamples=N_RESAMPLES, clusters=clusters)
    worse, _ = test.p_values(margin)
    return worse < ALPHA


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--data-dir", type=Path, default=REPO / ".modelbench-data")
    parser.add_argument("--candidates", type=int, default=300)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    pro, anti, documents = pro_anti(DEFAULT_MODEL, args.data_dir)
    clusters = cluster_labels(tuple(f"winobias/{d.doc['occupation_pair']}" for d in documents))
    changes = []
    for checkpoint in args.checkpoints:
        cand_pro, cand_anti = pro_anti(checkpoint, args.data_dir)[:2]
        # centred: the checkpoint's spread, not its own small move (printed below); the shift s is the only move
        changes.append((cand_pro - pro - np.mean(cand_pro - pro), cand_anti - anti - np.mean(cand_anti - anti)))
        real_gap = np.mean((cand_pro - cand_anti) - (pro - anti))
        real_acc_gap = np.mean((cand_pro > 0).astype(float) - (cand_anti > 0)) - np.mean((pro > 0).astype(float)
                                                                                          - (anti > 0))
        print(f"{Path(checkpoint).name}: gap change {real_gap:+.3f} nats, acc_gap change {real_acc_gap:+.4f}; per-"
              f"template change sd {np.std(changes[-1][0]):.3f} (pro) {np.std(changes[-1][1]):.3f} (anti)")
    base_gap, base_acc_gap = pro - anti, (pro > 0).astype(float) - (anti > 0)
    print(f"default model: gap {base_gap.mean():+.3f} nats (per-template sd {base_gap.std():.3f}), acc_gap "
          f"{base_acc_gap.mean():+.4f}; {len(pro)} templates, {clusters.max() + 1} clusters")
    rng = np.random.default_rng(args.seed)
    groups = [np.flatnonzero(clusters == c) for c in range(clusters.max() + 1)]
    print(f"{'shift s':>8} {'acc_gap change':>15} {'acc_gap regressed':>18} {'gap regressed':>14}")
    for shift in SHIFTS:
        acc_moves, acc_hits, gap_hits = [], 0, 0
        for k in range(args.candidates):
            d_pro, d_anti = changes[k % len(changes)]
            # the checkpoint's changes, whole occupation pairs resampled onto the pairs (the task's clusters)
            source = np.concatenate([rng.choice(groups[rng.integers(len(groups))], size=len(g)) for g in groups])
            order = np.concatenate(groups)
            moved_pro, moved_anti = pro.copy(), anti.copy()
            moved_pro[order] += d_pro[source] + shift / 2
            moved_anti[order] += d_anti[source] - shift / 2
            cand_gap = moved_pro - moved_anti
            cand_acc_gap = (moved_pro > 0).astype(float) - (moved_anti > 0)
            acc_moves.append(cand_acc_gap.mean() - base_acc_gap.mean())
            acc_hits += rejected(base_acc_gap, cand_acc_gap, clusters, ACC_GAP_MARGIN, 0.0, k)
            gap_hits += rejected(base_gap, cand_gap, clusters, GAP_MARGIN, None, k)
        print(f"{shift:>8.2f} {np.mean(acc_moves):>+15.4f} {acc_hits / args.candidates:>18.3f} "
              f"{gap_hits / args.candidates:>14.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
