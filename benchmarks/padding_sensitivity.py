"""How far lm-eval's own log-likelihood of a sentence moves with the width its batch is padded to.

    python benchmarks/padding_sensitivity.py [--max-tokens 12] [--extra 1,4,24] [--threads 2]

lm-eval 0.4.13 scores a batch by right-padding every row to the longest one (token id 0, no attention mask). A row's
log-likelihood does not depend on that width mathematically, but CPU kernels pick other code paths for other widths
and round differently. This script scores the CrowS-Pairs English sentences of at most `--max-tokens` input tokens
with lm-eval's procedure (our plain path, bit for bit lm-eval's) at their own length, which is lm-eval at batch size 1
and the stored reference in tests/reference, and again padded by each `--extra` number of tokens, and prints how far
the values move. It is the measurement behind the CrowS-Pairs paragraph of benchmarks/README.md: a path that shares
work between sentences cannot keep each sentence's padded width, so on the tokens this model computes with little
float32 headroom it cannot promise lm-eval's numbers to 1e-4.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from bench_vs_lmeval import SHARED_DATA, crows_pairs_english, load_script  # benchmarks/ is this script's folder, first on sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=12, help="sentences of at most this many input tokens")
    parser.add_argument("--extra", default="1,4,24", help="padding tokens to add, comma-separated")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--shared-data", type=Path, default=SHARED_DATA)
    args = parser.parse_args()

    import torch

    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as workdir:
        mirror = load_script("shared_data_mirror").build_mirror(Path(workdir) / "mirror", args.shared_data)
        prepared = crows_pairs_english(mirror)
    loaded = load_model(resolve_model_source("smollm2-135m"), dtype="float32")
    scorer = CausalLMScorer(loaded.model, loaded.tokenizer, **loaded.scorer_kwargs)
    sentences = [continuation for doc in prepared.documents for continuation in doc.continuations]
    rows = [scorer._model_input(request) for request in scorer.encoder.encode_pairs([("", s) for s in sentences])]
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, (inputs, _) in enumerate(rows):
        if len(inputs) <= args.max_tokens:
            by_length[len(inputs)].append(i)
    chosen = sorted(i for group in by_length.values() for i in group)
    extras = [int(x) for x in args.extra.split(",")]

    values = {extra: np.zeros(len(rows)) for extra in [0, *extras]}
    for length, members in sorted(by_length.items()):
        for extra in values:
            # A row of zeros `extra` tokens longer sets the batch width; lm-eval's procedure pads the others to it.
            filler = [((0,) * (length + extra), (0,))] if extra else []
            for i, value in zip(members, scorer._forward([rows[i] for i in members] + filler)):
                values[extra][i] = value

    print(f"{len(chosen)} CrowS-Pairs English sentences of at most {args.max_tokens} input tokens; "
          "lm-eval's procedure, float32, alone vs padded:")
    for extra in extras:
        moved = np.abs(values[extra][chosen] - values[0][chosen])
        print(f"  padded by {extra:>2} tokens: max |Δ| {moved.max():.2e}, {int((moved > 1e-4).sum())} move > 1e-4, "
              f"{int((moved > 3e-5).sum())} > 3e-5")
    spread = {i: max(values[e][i] for e in values) - min(values[e][i] for e in values) for i in chosen}
    print("largest spreads (own length, then each padding):")
    for i in sorted(chosen, key=lambda i: -spread[i])[:5]:
        numbers = " ".join(f"{values[e][i]:.5f}" for e in values)
        print(f"  {sentences[i][:60]!r:64} {len(rows[i][0]):>2} tokens: {numbers}")


if __name__ == "__main__":
    main()
