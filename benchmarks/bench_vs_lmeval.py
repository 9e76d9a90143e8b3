"""pytest-modelbench vs lm-evaluation-harness 0.4.13: the same requests, the same model, one run, side by side.

    python benchmarks/bench_vs_lmeval.py [--lmeval-python PATH] [--batch-size 8] [--tasks arc,bangla,crows]
                                         [--arc-docs 200] [--bangla-docs 200] [--crows-docs 0] [--json-out FILE]

lm-eval runs in its own virtual environment (`--lmeval-python`, or $MODELBENCH_LMEVAL_PYTHON; default
/work/scratch/lmeval-venv/bin/python) as a long-lived subprocess (benchmarks/_lmeval_worker.py) that calls
`HFLM.loglikelihood` on the request lists; pytest-modelbench runs in this process. Both load the same model the same
way (transformers, `--dtype`, default float32) and use the same batch size. The tools alternate in rounds over
contiguous chunks of each task's documents (`--rounds`, default 4: lm-eval chunk 1, ours chunk 1, lm-eval chunk 2,
...), so a slow phase of a shared machine hits both; each tool's time is the sum over its chunks. Our cold run starts
from an empty score cache; the warm run then re-scores the whole task with a new scorer on that cache, as a re-run
would. On a machine shared with other CPU-heavy jobs, `--threads 1` gives steadier timings (no thread
oversubscription).

Tasks (requests built by pytest-modelbench's task engine from the shipped suite YAMLs; the parity tests check they
are lm-eval's requests):
- arc:    arc_mt schema (suites/arc_mt/arc_challenge_mt_fi.yaml over ARC-Challenge), 5-shot, default sampler.
- bangla: bangla_mmlu schema (suites/bangla/bangla_mmlu.yaml), 5-shot `first_n`; the test split is generated here in
          the fixture schema (tests/fixtures/bangla_data.py rows, varied) up to `--bangla-docs` documents.
- crows:  CrowS-Pairs English (suites/bias/crows_pairs_english.yaml), all pairs by default.

Printed per task and tool: documents/s, request tokens/s (Σ len(context+continuation)-1, the same for both tools),
tokens actually computed (ours: shared prefix + packed rows incl. padding; lm-eval: its forwarded rows incl. padding,
estimated from its collator's grouping and sorting), the share of this machine's measured fp32 matmul peak
(FLOPs ≈ 2 · parameters · tokens computed), peak RSS during scoring (and its rise over the RSS before scoring),
and the ratio lm-eval seconds / our seconds. Ours runs cold (an empty score cache in a temporary folder) and then
warm (a new scorer on the same cache, as a re-run would be). Agreement: the largest |Δ log-likelihood| against
lm-eval, and documents whose acc / acc_norm / pct_stereotype differ (there should be none).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _memory import PeakRss, rss  # benchmarks/ is this script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

DEFAULT_LMEVAL_PYTHON = "/work/scratch/lmeval-venv/bin/python"
SHARED_DATA = REPO.parent / "shared" / "data"


# --- measurement helpers (memory: benchmarks/_memory.py, shared with the lm-eval worker) ---------------------------


def matmul_peak_gflops(seconds: float = 3.0) -> float:
    """Best fp32 GEMM rate (GFLOP/s) on shapes like the model's, with torch's default threads."""
    import torch

    best = 0.0
    shapes = [(2048, 576, 1536), (2048, 1536, 576), (512, 576, 49152)]
    with torch.inference_mode():
        for m, k, n in shapes:
            a, b = torch.randn(m, k), torch.randn(k, n)
            torch.mm(a, b)
            deadline = time.perf_counter() + seconds / len(shapes)
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                torch.mm(a, b)
                best = max(best, 2 * m * k * n / (time.perf_counter() - start) / 1e9)
    return best


# --- data and tasks ------------------------------------------------------------------------------------------------


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BANGLA_DIGITS = "০১২৩৪৫৬৭৮৯"


def bangla_number(n: int) -> str:
    return "".join(BANGLA_DIGITS[int(d)] for d in str(n))


def write_bangla_mmlu(root: Path, n_docs: int) -> Path:
    """The bangla fixtures, with the bangla_mmlu test split grown to n_docs rows of the same schema: the fixture
    questions, numbered, with their options rotated (the answer index follows its option)."""
    from tests.fixtures.bangla_data import bangla_records, task_folder, write_bangla_fixtures

    write_bangla_fixtures(root)
    base = bangla_records()["bangla_mmlu"]["test"]
    rows = []
    for i in range(n_docs):
        source = base[i % len(base)]
        shift = (i // len(base)) % 4
        options = source["options"][shift:] + source["options"][:shift]
        question = source["question"].strip()
        if i >= len(base):
            question = f"{question} (প্রশ্ন {bangla_number(i + 1)})"
        rows.append({"question": question, "options": options, "answer": (source["answer"] - shift) % 4})
    folder = task_folder(root, "bangla_mmlu")
    (folder / "test.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return root


@dataclass
class BenchTask:
    name: str
    prepared: object
    requests: list[tuple[str, str]] = field(default_factory=list)
    documents: list[int] = field(default_factory=list)
    first: int = 0  # index of the first request (a chunk of a task)


def chunked(task: BenchTask, rounds: int) -> list[BenchTask]:
    """Contiguous document chunks of a task, for interleaving the tools in rounds."""
    per_chunk = max(1, -(-len(task.documents) // max(1, rounds)))
    chunks, first = [], 0
    for start in range(0, len(task.documents), per_chunk):
        sizes = task.documents[start:start + per_chunk]
        count = sum(sizes)
        chunks.append(BenchTask(task.name, task.prepared, task.requests[first:first + count], sizes, first))
        first += count
    return chunks


def accumulate(side: dict, seconds: float, rss_before: int, rss_peak: int, computed_tokens: int) -> None:
    side["seconds"] += seconds
    side["rss_before"] = rss_before if side["rss_before"] is None else min(side["rss_before"], rss_before)
    side["rss_peak"] = max(side["rss_peak"], rss_peak)
    side["computed_tokens"] += computed_tokens


def crows_pairs_english(mirror: Path, limit: int | None = None):
    """CrowS-Pairs English prepared from the shipped suite YAML over the data mirror."""
    from pytest_modelbench.tasks.config import load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    return prepare_task(load_task_config(REPO / "suites" / "bias" / "crows_pairs_english.yaml"), data_dir=mirror,
                        limit=limit)


def build_tasks(args, workdir: Path) -> list[BenchTask]:
    from pytest_modelbench.tasks.config import load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    mirror = load_script("shared_data_mirror").build_mirror(workdir / "mirror", args.shared_data)
    wanted = [t.strip() for t in args.tasks.split(",") if t.strip()]
    tasks = []
    for name in wanted:
        if name == "arc":
            config = load_task_config(REPO / "suites" / "arc_mt" / "arc_challenge_mt_fi.yaml")
            prepared = prepare_task(config, data_dir=mirror, num_fewshot=5, limit=args.arc_docs or None)
            label = f"arc_mt 5-shot default sampler ({len(prepared.documents)} docs)"
        elif name == "bangla":
            data = write_bangla_mmlu(workdir / "bangla", args.bangla_docs)
            config = load_task_config(REPO / "suites" / "bangla" / "bangla_mmlu.yaml")
            prepared = prepare_task(config, data_dir=data, num_fewshot=5)
            label = f"bangla_mmlu 5-shot first_n ({len(prepared.documents)} docs)"
        elif name == "crows":
            prepared = crows_pairs_english(mirror, limit=args.crows_docs or None)
            label = f"CrowS-Pairs English ({len(prepared.documents)} pairs)"
        else:
            raise SystemExit(f"unknown task {name!r} (arc, bangla, crows)")
        requests = [(doc.context, cont) for doc in prepared.documents for cont in doc.continuations]
        tasks.append(BenchTask(label, prepared, requests, [len(doc.continuations) for doc in prepared.documents]))
    return tasks


def lmeval_computed_tokens(encoded, batch_size: int) -> int:
    """Tokens lm-eval's HFLM forwards: requests grouped by ctx+cont[:-1] (its logits cache) run once, the longest
    member; sorted longest first; each batch padded to its longest row."""
    groups: dict[tuple[int, ...], int] = {}
    for req in encoded:
        key = req.context + req.continuation[:-1]
        groups[key] = max(groups.get(key, 0), len(req.context) + len(req.continuation) - 1)
    lengths = sorted(groups.values(), reverse=True)
    return sum(lengths[i] * len(lengths[i:i + batch_size]) for i in range(0, len(lengths), batch_size))


# --- the two tools -------------------------------------------------------------------------------------------------


class LmEvalWorker:
    def __init__(self, python: str):
        self.process = subprocess.Popen(
            [python, str(REPO / "benchmarks" / "_lmeval_worker.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if not os.environ.get(
                "BENCH_VERBOSE") else None, text=True,
        )

    def call(self, **message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the lm-eval worker died (rerun with BENCH_VERBOSE=1 to see its stderr)")
        return json.loads(line)

    def close(self):
        try:
            self.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.process.stdin.flush()
            self.process.wait(timeout=30)
        except Exception:
            self.process.kill()


def make_scorer(loaded, batch_size, cache_path: Path | None, fast: bool = True):
    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.score_cache import ScoreCache

    return CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=batch_size, fast=fast,
                          cache=ScoreCache(cache_path) if cache_path else None, fingerprint=loaded.fingerprint,
                          **loaded.scorer_kwargs)


def score_ours(loaded, task: BenchTask, batch_size, cache_path: Path | None, fast: bool = True, scorer=None):
    """Time one loglikelihood call; a new scorer (as a new pytest run would make) unless one is given."""
    scorer = scorer or make_scorer(loaded, batch_size, cache_path, fast)
    before = rss()
    with PeakRss() as peak:
        start = time.perf_counter()
        values = scorer.loglikelihood(task.requests, documents=task.documents, label=task.name)
        seconds = time.perf_counter() - start
    return values, seconds, before, peak.peak, scorer


def per_document(values, documents):
    out, start = [], 0
    for size in documents:
        out.append(values[start:start + size])
        start += size
    return out


def metric_values(task: BenchTask, values):
    from pytest_modelbench.metrics.task_metrics import resolve_metrics

    docs = task.prepared.documents
    lls = per_document(values, task.documents)
    return {
        metric.name: [metric.per_document(doc, ll) for doc, ll in zip(docs, lls)]
        for metric in resolve_metrics(task.prepared.config)
        if metric.per_document is not None and metric.binary
    }


# --- main ----------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--lmeval-python", default=os.environ.get("MODELBENCH_LMEVAL_PYTHON", DEFAULT_LMEVAL_PYTHON),
                        help="python of a virtual environment with lm-eval 0.4.13 ($MODELBENCH_LMEVAL_PYTHON)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--model-args", default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch-size", type=int, default=8, help="the same for both tools (default 8)")
    parser.add_argument("--tasks", default="arc,bangla,crows")
    parser.add_argument("--arc-docs", type=int, default=200)
    parser.add_argument("--bangla-docs", type=int, default=200)
    parser.add_argument("--crows-docs", type=int, default=0, help="0: all pairs")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both tools (default: torch's)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="alternate the tools over this many document chunks per task (default 4)")
    parser.add_argument("--skip-lmeval", action="store_true", help="only pytest-modelbench (no ratios)")
    parser.add_argument("--check-plain", action="store_true", help="also run our plain path and compare")
    parser.add_argument("--shared-data", type=Path, default=SHARED_DATA)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    if args.threads:
        torch.set_num_threads(args.threads)
    workdir = Path(tempfile.mkdtemp(prefix="modelbench-bench-"))
    tasks = build_tasks(args, workdir)
    source = resolve_model_source(args.model, args.model_args)

    worker = None
    if not args.skip_lmeval:
        worker = LmEvalWorker(args.lmeval_python)
        loaded_lmeval = worker.call(cmd="load", pretrained=source.location, gguf_file=source.gguf_file,
                                    dtype=args.dtype, batch_size=args.batch_size, device="cpu", threads=args.threads)
        print(f"lm-eval worker: {loaded_lmeval['versions']}, model loaded in {loaded_lmeval['load_s']:.1f}s",
              flush=True)
    start = time.perf_counter()
    loaded = load_model(source, dtype=args.dtype)
    print(f"pytest-modelbench: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"model loaded in {time.perf_counter() - start:.1f}s", flush=True)
    parameters = sum(p.numel() for p in loaded.model.parameters())
    make_scorer(loaded, args.batch_size, None)._fast_runner()  # warm-up (first forward, probe) outside timing
    peak = matmul_peak_gflops()
    print(f"measured fp32 matmul peak: {peak:.0f} GFLOP/s; parameters: {parameters / 1e6:.1f}M; "
          f"batch size {args.batch_size}", flush=True)

    report = {"batch_size": args.batch_size, "matmul_peak_gflops": peak, "parameters": parameters, "tasks": []}
    for task in tasks:
        cache_path = workdir / f"cache-{len(report['tasks'])}" / "scores.sqlite"
        cold = make_scorer(loaded, args.batch_size, cache_path)
        cold._fast_runner()  # the one-off numerical probe of a session, outside the timed calls
        encoded = cold.encoder.encode_pairs(task.requests)
        request_tokens = sum(len(e.context) + len(e.continuation) - 1 for e in encoded)
        entry = {"task": task.name, "documents": len(task.documents), "requests": len(task.requests),
                 "request_tokens": request_tokens}
        # Interleaved in rounds over contiguous document chunks: lm-eval chunk k, ours chunk k (cold), ...
        lmeval_side = {"seconds": 0.0, "rss_before": None, "rss_peak": 0, "computed_tokens": 0}
        ours_side = {"seconds": 0.0, "rss_before": None, "rss_peak": 0, "computed_tokens": 0, "forwards": 0}
        lmeval_values, values = [], []
        for chunk in chunked(task, args.rounds):
            if worker is not None:
                result = worker.call(cmd="score", requests=chunk.requests)
                lmeval_values += result["loglikelihoods"]
                accumulate(lmeval_side, result["seconds"], result["rss_before"], result["rss_peak"],
                           lmeval_computed_tokens(encoded[chunk.first:chunk.first + len(chunk.requests)],
                                                  args.batch_size))
            chunk_values, seconds, before, top, scorer = score_ours(loaded, chunk, args.batch_size, cache_path,
                                                                    scorer=cold)
            values += chunk_values
            stats = scorer.last_stats
            accumulate(ours_side, seconds, before, top, stats.prefix_tokens + stats.padded_tokens if stats else
                       sum(len(e.context) + len(e.continuation) - 1
                           for e in encoded[chunk.first:chunk.first + len(chunk.requests)]))
            ours_side["forwards"] += stats.forwards if stats else 0
        if worker is not None:
            entry["lmeval"] = lmeval_side
        entry["ours"] = ours_side
        warm_values, warm_seconds, _, _, _ = score_ours(loaded, task, args.batch_size, cache_path)
        entry["ours"]["warm_seconds"] = warm_seconds
        assert warm_values == values, "the warm run returned different values"
        if args.check_plain:
            plain_values, plain_seconds, *_ = score_ours(loaded, task, args.batch_size, None, fast=False)
            entry["plain"] = {"seconds": plain_seconds,
                              "max_abs_diff": max(abs(a - b) for a, b in zip(values, plain_values))}
        if worker is not None:
            diffs = [abs(a - b) for a, b in zip(values, lmeval_values)]
            ours_metrics, theirs_metrics = metric_values(task, values), metric_values(task, lmeval_values)
            entry["agreement"] = {
                "max_abs_diff": max(diffs),
                "requests_over_1e-4": sum(d > 1e-4 for d in diffs),
                "metrics": {
                    name: {"ours": sum(ours_metrics[name]) / len(task.documents),
                           "lmeval": sum(theirs_metrics[name]) / len(task.documents),
                           "documents_differing": sum(a != b for a, b in zip(ours_metrics[name], theirs_metrics[name]))}
                    for name in ours_metrics
                },
            }
        report["tasks"].append(entry)
        print_entry(entry, peak, parameters)
        peak = max(peak, matmul_peak_gflops(1.5))  # a shared machine: the best of several measurements
    report["matmul_peak_gflops"] = peak
    if worker is not None:
        worker.close()
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2))
    print_summary(report, parameters)


def _rate_line(tool: str, entry: dict, side: dict, peak: float, parameters: int) -> str:
    seconds = side["seconds"]
    flops = 2 * parameters * side["computed_tokens"] / seconds / 1e9
    return (f"  {tool:<18} {seconds:8.1f}s  {entry['documents'] / seconds:7.2f} docs/s  "
            f"{entry['request_tokens'] / seconds:8.0f} req-tok/s  {side['computed_tokens']:>8} tok computed  "
            f"{flops:6.0f} GFLOP/s = {flops / peak:5.1%} of peak  "
            f"peak RSS {side['rss_peak'] / 2**20:6.0f} MiB (+{(side['rss_peak'] - side['rss_before']) / 2**20:.0f})")


def print_entry(entry: dict, peak: float, parameters: int) -> None:
    print(f"\n{entry['task']}: {entry['requests']} requests, {entry['request_tokens']} request tokens")
    if "lmeval" in entry:
        print(_rate_line("lm-eval 0.4.13", entry, entry["lmeval"], peak, parameters))
    print(_rate_line("pytest-modelbench", entry, entry["ours"], peak, parameters))
    ours = entry["ours"]
    print(f"  warm re-run: {ours['warm_seconds']:.2f}s = {ours['warm_seconds'] / ours['seconds']:.1%} of cold")
    if "plain" in entry:
        print(f"  our plain path: {entry['plain']['seconds']:.1f}s, max |Δ| fast vs plain "
              f"{entry['plain']['max_abs_diff']:.2e}")
    if "lmeval" in entry:
        agreement = entry["agreement"]
        print(f"  RATIO lm-eval/ours: {entry['lmeval']['seconds'] / ours['seconds']:.2f}x   "
              f"max |Δ loglik| {agreement['max_abs_diff']:.2e} ({agreement['requests_over_1e-4']} requests > 1e-4)")
        for name, m in agreement["metrics"].items():
            print(f"  {name}: ours {m['ours']:.4f}, lm-eval {m['lmeval']:.4f}, "
                  f"documents differing: {m['documents_differing']}")
    sys.stdout.flush()


def print_summary(report: dict, parameters: int) -> None:
    peak = report["matmul_peak_gflops"]
    print(f"\nsummary (fp32 matmul peak, best measurement of the run: {peak:.0f} GFLOP/s)")
    for entry in report["tasks"]:
        ours = entry["ours"]
        line = f"  {entry['task']:<45}"
        if "lmeval" in entry:
            line += f" ratio {entry['lmeval']['seconds'] / ours['seconds']:5.2f}x"
        line += f"  warm/cold {ours['warm_seconds'] / ours['seconds']:5.1%}"
        for tool, side in (("lm-eval", entry.get("lmeval")), ("ours", ours)):
            if side:
                share = 2 * parameters * side["computed_tokens"] / side["seconds"] / 1e9 / peak
                line += f"  {tool} {entry['documents'] / side['seconds']:.2f} docs/s ({share:.0%} of peak)"
        if "agreement" in entry:
            agreement = entry["agreement"]
            differing = sum(m["documents_differing"] for m in agreement["metrics"].values())
            line += f"  max|Δ| {agreement['max_abs_diff']:.1e}, metric differences {differing}"
        print(line)


if __name__ == "__main__":
    main()
