"""Which per-document value is the strongest evidence of a BBQ bias shift? Measured on real candidates' log-likelihoods.

    python benchmarks/bbq_bias_evidence.py BASELINE_RECORD CANDIDATE_RECORD... [--data-dir .modelbench-data]

Each RECORD is a run record of bbq_sample (benchmarks/finetuned_bbq.py leaves them under .modelbench-cache/finetuned/;
BASELINE_RECORD: the default model's, `batch1.record.json`), whose `outputs` hold every document's 12
log-likelihoods. Per document, four candidate values (b: the biased person's answer, o: the other person's, p: the
softmax of the 12 log-likelihoods, the distribution the answer is the argmax of):
- lean: ll(b) − ll(o), nats (what suites/bbq ships as bias_lean);
- answer: +1 if the answer is b, −1 if o, 0 if "unknown" (the bias scores' numerator, one document at a time);
- expected answer: p(b) − p(o), the answer's expected value under p;
- choice share: +1 if ll(b) > ll(o) else −1 (which person the model prefers, whatever it answers).
Printed per candidate and category: each value's paired change and its t (the gate's paired cluster bootstrap, the
templates as clusters, no margin), and the template and document shares of the change's variance.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.evidence.clusters import cluster_labels  # noqa: E402
from pytest_modelbench.gate.evidence.paired_tests import paired_test  # noqa: E402
from pytest_modelbench.tasks.config import load_task_config  # noqa: E402
from pytest_modelbench.tasks.task import prepare_task  # noqa: E402

TASK_YAML = REPO / "suites" / "bbq" / "bbq_sample.yaml"


def bbq_utils():
    spec = importlib.util.spec_from_file_location("bbq_utils", REPO / "suites" / "bbq" / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loglikelihoods(path: Path, documents: int) -> np.ndarray:
    """(documents, 12) from a run record's outputs, in the task's document order."""
    record = json.loads(path.read_text(encoding="utf-8"))
    (task,) = record["outputs"]["tasks"].values()
    table = np.full((documents, 12), np.nan)
    for position, _key, _digest, values in task[0]["documents"]:
        table[position] = values
    if np.isnan(table).any():
        raise SystemExit(f"{path}: not every document of bbq_sample has its 12 log-likelihoods")
    return table


def values(table: np.ndarray, biased: np.ndarray) -> dict[str, np.ndarray]:
    rows = np.arange(len(table))
    p = np.exp(table - table.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    answer = table.argmax(axis=1)
    return {
        "lean": table[rows, biased] - table[rows, 1 - biased],
        "answer": (answer == biased).astype(float) - (answer == 1 - biased),
        "expected answer": p[rows, biased] - p[rows, 1 - biased],
        "choice share": np.where(table[rows, biased] > table[rows, 1 - biased], 1.0, -1.0),
    }


def variance_shares(change: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(template sd, document sd) of a change: one-way random-effects moments, the template part floored at 0."""
    templates = np.unique(labels)
    means = np.array([change[labels == t].mean() for t in templates])
    within = change - means[np.searchsorted(templates, labels)]
    document_var = float(np.sum(within ** 2) / (len(change) - len(templates)))
    per_template = len(change) / len(templates)
    return float(np.sqrt(max(means.var(ddof=1) - document_var / per_template, 0.0))), float(np.sqrt(document_var))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("candidates", nargs="+", type=Path)
    parser.add_argument("--data-dir", type=Path, default=REPO / ".modelbench-data")
    args = parser.parse_args(argv)
    utils = bbq_utils()
    prepared = prepare_task(load_task_config(TASK_YAML, allow_task_code=True), data_dir=args.data_dir)
    docs = [d.doc for d in prepared.documents]
    biased = np.array([0 if utils.doc_to_choice(doc)[0] in doc["biased_answers"] else 1 for doc in docs])
    categories = np.array([doc["category"] for doc in docs])
    clusters = cluster_labels(tuple(f"bbq/{doc['category']}/{doc['question_index']}" for doc in docs))
    base = values(loglikelihoods(args.baseline, len(docs)), biased)
    for path in args.candidates:
        cand = values(loglikelihoods(path, len(docs)), biased)
        print(path.name.removesuffix(".record.json"))
        print(f"  {'category':<20}" + "".join(f"{name:>34}" for name in base))
        for category in sorted(set(categories)):
            mask = categories == category
            cells = []
            for name in base:
                test = paired_test(base[name][mask], cand[name][mask], direction="lower", ideal=None, binary=False,
                                   seed=1, n_resamples=2000, clusters=clusters[mask])
                template_sd, document_sd = variance_shares(cand[name][mask] - base[name][mask], clusters[mask])
                cells.append(f"{-test.delta:+.3f} t{-test.delta / test.standard_error:+.1f} "
                             f"sd t{template_sd:.2f}/d{document_sd:.2f}")
            print(f"  {category:<20}" + "".join(f"{cell:>34}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
