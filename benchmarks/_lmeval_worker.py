"""lm-evaluation-harness side of bench_vs_lmeval.py: runs in lm-eval's own virtual environment (never imports
pytest_modelbench) and scores request lists with lm-eval's HFLM.loglikelihood, timed and memory-sampled.

Protocol: one JSON object per line on stdin, one reply per line on the original stdout (everything else lm-eval,
transformers or tqdm print goes to stderr):
    {"cmd": "load", "pretrained": DIR_OR_ID, "gguf_file": FILE|null, "dtype": "float32", "batch_size": 8,
     "device": "cpu", "threads": N|null}                    -> {"load_s": ..., "versions": {...}}
    {"cmd": "score", "requests": [[context, continuation], ...]}
                                                            -> {"loglikelihoods": [...], "seconds": ...,
                                                                "rss_before": bytes, "rss_peak": bytes}
    {"cmd": "generate", "requests": [[context, generation_kwargs], ...]}
                                                            -> {"generations": [...], "seconds": ...}
    {"cmd": "quit"}
"""

from __future__ import annotations

import json
import os
import sys
import time

from _memory import PeakRss, rss  # benchmarks/ is this script's folder, first on sys.path


def main() -> None:
    reply_stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from libraries go to stderr, not into the protocol
    sys.stdout = sys.stderr

    def reply(obj):
        reply_stream.write(json.dumps(obj) + "\n")
        reply_stream.flush()

    lm = None
    for line in sys.stdin:
        message = json.loads(line)
        if message["cmd"] == "quit":
            break
        if message["cmd"] == "load":
            import torch
            import lm_eval
            import transformers
            from lm_eval.models.huggingface import HFLM

            if message.get("threads"):
                torch.set_num_threads(int(message["threads"]))
            start = time.perf_counter()
            kwargs = {"pretrained": message["pretrained"], "dtype": message["dtype"],
                      "batch_size": message["batch_size"], "device": message["device"]}
            if message.get("gguf_file"):
                kwargs["gguf_file"] = message["gguf_file"]
            lm = HFLM(**kwargs)
            reply({"load_s": time.perf_counter() - start, "versions": {
                "lm_eval": getattr(lm_eval, "__version__", "?"), "torch": torch.__version__,
                "transformers": transformers.__version__, "threads": torch.get_num_threads()}})
        elif message["cmd"] == "score":
            from lm_eval.api.instance import Instance

            instances = [
                Instance(request_type="loglikelihood", doc={}, arguments=(ctx, cont), idx=i)
                for i, (ctx, cont) in enumerate(message["requests"])
            ]
            before = rss()
            with PeakRss() as peak:
                start = time.perf_counter()
                results = lm.loglikelihood(instances, disable_tqdm=True)
                seconds = time.perf_counter() - start
            reply({"loglikelihoods": [float(ll) for ll, _ in results], "seconds": seconds,
                   "rss_before": before, "rss_peak": peak.peak})
        elif message["cmd"] == "generate":  # HFLM.generate_until, as benchmarks/generation_vs_lmeval.py times it
            from lm_eval.api.instance import Instance

            instances = [
                Instance(request_type="generate_until", doc={}, arguments=(ctx, kwargs), idx=0)
                for ctx, kwargs in message["requests"]
            ]
            start = time.perf_counter()
            generations = lm.generate_until(instances, disable_tqdm=True)
            reply({"generations": generations, "seconds": time.perf_counter() - start})


if __name__ == "__main__":
    main()
