"""The sampling error of BBQ's scores on a recorded run: each score overall and per category with its standard error,
by the gate's own cluster bootstrap (gate/compare.py) over the templates the YAML declares as clusters.

    .venv/bin/python benchmarks/bbq_sample_error.py baselines/default/bbq/bbq_sample.json \
        --data-dir .modelbench-data [--resamples 500]

The standard error is the bootstrap's over whole templates (scaled by √(G/(G−1)) as the gate scales it): how much the
score would move with other templates of the same kind, the noise a single run's score carries. It reads the
baseline file and the data (for each document's template: a baseline stores no clusters), no model; the aggregations
are suites/bbq/utils.py's, called as the gate calls them.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from pytest_modelbench.gate.baseline_file import parse
from pytest_modelbench.gate.compare import entry_groups
from pytest_modelbench.gate.evidence.clusters import cluster_labels
from pytest_modelbench.gate.evidence.paired_tests import aggregate_test, paired_test
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("--data-dir", type=Path, required=True, help="the mirror (scripts/shared_data_mirror.py)")
    parser.add_argument("--yaml", type=Path, default=ROOT / "suites" / "bbq" / "bbq_sample.yaml")
    parser.add_argument("--resamples", type=int, default=500)
    args = parser.parse_args()
    record = parse(args.baseline.read_text(encoding="utf-8"), args.baseline)
    config = load_task_config(args.yaml, allow_task_code=True)
    metrics = {m.name: m for m in resolve_metrics(config)}
    cluster_of = {doc.doc_id: doc.cluster for doc in prepare_task(config, data_dir=args.data_dir).documents}
    clusters = cluster_labels([cluster_of[doc_id] for doc_id in record.doc_ids])
    documents = [None] * len(record.doc_keys)  # the BBQ aggregations read only the per-document values
    print(f"{args.baseline}: {len(documents)} documents, {np.unique(clusters).size} clusters, "
          f"{args.resamples} cluster-bootstrap resamples")
    print(f"{'metric':<18} {'category':<20} {'n':>5} {'G':>4} {'score':>8} {'SE':>7}")
    for name, metric in metrics.items():
        column = record.values[name]
        for category, mask in entry_groups(record):
            idx = np.flatnonzero(mask)
            if metric.aggregate is None:
                values = np.asarray(column[idx], dtype=float)
                score = float(values.mean())
                test = paired_test(values, values, direction="higher", ideal=None, binary=False, seed=1,
                                   n_resamples=args.resamples, clusters=clusters[idx])
            else:
                score, _, test = aggregate_test(metric.aggregate, {name: column[idx]}, {name: column[idx]},
                                                [documents[i] for i in idx], direction="higher", ideal=None, seed=1,
                                                n_resamples=args.resamples, clusters=clusters[idx])
            se = test.baseline_standard_error
            print(f"{name:<18} {category or 'overall':<20} {idx.size:>5} {np.unique(clusters[idx]).size:>4} "
                  f"{score:>8.4f} {se:>7.4f}" + ("" if math.isfinite(se) else "  (no test)"))


if __name__ == "__main__":
    main()
