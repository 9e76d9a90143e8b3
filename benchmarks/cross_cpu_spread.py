"""How far float32 log-likelihoods move when the CPU kernels change: the measurement behind the parity tests' ANY_CPU
tolerance (tests/fixtures/lmeval_references.py).

    python benchmarks/cross_cpu_spread.py [--crows-pairs 300] [--variants NAME,...] [--references all]

The lm-eval references in tests/reference were produced on one CPU (AVX2). Another CPU (AVX-512, say) runs other
kernel code paths and rounds the same float32 sums differently. This machine cannot become another CPU, but it can be
made to run code paths another CPU would: torch's ATen kernels at another vector width (ATEN_CPU_CAPABILITY), MKL's
GEMM in its conditional-reproducibility code path (MKL_CBWR), and another thread count (how GEMM and reductions split
their sums). (MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA change no result of this model on the AMD machine the
references were made on, so they are not among the variants.) Each variant runs in its own process (those switches
are read at start-up), scores every reference's requests with lm-eval's procedure (our plain path, batch size 1,
CrowS-Pairs limited to its first --crows-pairs pairs) and the script prints, per variant, how far the values are from
lm-eval's: the largest absolute and relative difference, how many exceed 1e-4 and how many exceed the ANY_CPU bound,
and the verdicts (acc, acc_norm, pct_stereotype) that differ where the reference is not within that bound of a tie.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures.lmeval_references import (  # noqa: E402
    ANY_CPU,
    REFERENCE_DIR,
    loglikelihood_mismatches,
    verdict_check,
)

VARIANTS: dict[str, dict[str, str]] = {
    "as-references": {},
    "aten-scalar": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-cnr": {"MKL_CBWR": "COMPATIBLE"},
    "2-threads": {"OMP_NUM_THREADS": "2"},
    "aten-scalar+mkl-cnr": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}


# By default the references whose prompts are short enough to score under every variant in minutes: 0- and 5-shot
# ARC, Bangla MMLU and BoolQ (Bengali script, long few-shot prompts) and the head of CrowS-Pairs.
DEFAULT_REFERENCES = ("arc_challenge_mt_fi_0shot_limit40", "arc_challenge_mt_fi_5shot_limit20", "bangla_mmlu_5shot",
                      "boolqa_bn_0shot", "crows_pairs_english")


def reference_names(selected: str) -> list[str]:
    names = sorted(path.name for path in REFERENCE_DIR.glob("lmeval_*.json"))
    if selected == "all":
        return names
    return [name for name in names if name.removeprefix("lmeval_").removesuffix(".json") in selected.split(",")]


def prepared_references(selected: str, crows_pairs: int, workdir: Path):
    """(name, reference, prepared) for the selected reference files, CrowS-Pairs cut to its first `crows_pairs`."""
    from scripts.shared_data_mirror import build_mirror
    from tests.fixtures.bangla_data import write_bangla_fixtures
    from tests.fixtures.lmeval_references import reference_task

    mirror = build_mirror(workdir / "mirror", REPO.parent / "shared" / "data")
    bangla = {style: workdir / f"bangla_{style}" for style in ("bool", "str")}
    for style, root in bangla.items():
        write_bangla_fixtures(root, boolqa_answer=style)
    for name in reference_names(selected):
        reference, prepared = reference_task(name, mirror, bangla)
        if "crows" in name:
            reference["samples"] = reference["samples"][:crows_pairs]
            prepared = dataclasses.replace(prepared, documents=prepared.documents[:crows_pairs])
        yield name, reference, prepared


def worker(selected: str, crows_pairs: int, out: Path) -> None:
    import torch

    from pytest_modelbench.run.evaluation import evaluate_task
    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source

    loaded = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")
    scores = {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, _, prepared in prepared_references(selected, crows_pairs, Path(tmp)):
            started = time.perf_counter()
            evaluation = evaluate_task(prepared, CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=1))
            print(f"  {os.environ.get('VARIANT')}: {name} in {time.perf_counter() - started:.0f} s", flush=True)
            scores["tasks"][name] = {"loglikelihoods": evaluation.loglikelihoods,
                                     "per_document": {k: list(v) for k, v in evaluation.scores.per_document.items()}}
    out.write_text(json.dumps(scores), encoding="utf-8")


def summarise(variant: str, scores: dict, selected: str, crows_pairs: int) -> dict:
    differences, mismatched, flips, near_ties = [], 0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, reference, prepared in prepared_references(selected, crows_pairs, Path(tmp)):
            ours = scores["tasks"][name]
            for lls, sample in zip(ours["loglikelihoods"], reference["samples"]):
                differences += [(abs(a - b), abs(b)) for a, b in zip(lls, sample["loglikelihoods"])]
            mismatched += len(loglikelihood_mismatches(ours["loglikelihoods"], reference["samples"], ANY_CPU))
            check = verdict_check(ours["per_document"], prepared.documents, reference["samples"], ANY_CPU)
            flips += len(check.mismatches)
            near_ties += len(check.near_ties)
    largest = max(differences)
    relative = max(d / m for d, m in differences if m)
    return {"variant": variant, "capability": scores["torch_cpu_capability"], "n": len(differences),
            "max_abs": largest[0], "at_ll": largest[1], "max_rel": relative,
            "over_1e-4": sum(d > 1e-4 for d, _ in differences), "over_any_cpu": mismatched,
            "verdict_flips": flips, "near_ties": near_ties}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crows-pairs", type=int, default=300)
    parser.add_argument("--references", default=",".join(DEFAULT_REFERENCES), help="names, or all")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.references, args.crows_pairs, args.worker)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            out = Path(tmp) / f"{variant}.json"
            env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                   "VARIANT": variant, **VARIANTS[variant]}
            subprocess.run([sys.executable, __file__, "--worker", str(out), "--crows-pairs", str(args.crows_pairs),
                            "--references", args.references], env=env, check=True)
            rows.append(summarise(variant, json.loads(out.read_text(encoding="utf-8")), args.references,
                                  args.crows_pairs))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nANY_CPU bound: {ANY_CPU.absolute:g} + {ANY_CPU.relative:g}·|ll|")
    print(f"{'variant':<24} {'ATen':<8} {'lls':>5} {'max |Δ|':>9} {'at |ll|':>8} {'max |Δ|/|ll|':>12} "
          f"{'> 1e-4':>7} {'> bound':>8} {'flips':>6} {'near ties':>9}")
    for r in rows:
        print(f"{r['variant']:<24} {r['capability']:<8} {r['n']:>5} {r['max_abs']:>9.2e} {r['at_ll']:>8.2f} "
              f"{r['max_rel']:>12.2e} {r['over_1e-4']:>7} {r['over_any_cpu']:>8} {r['verdict_flips']:>6} "
              f"{r['near_ties']:>9}")


if __name__ == "__main__":
    main()
