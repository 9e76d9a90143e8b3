"""Log-likelihoods of (context, continuation) pairs under a causal LM, tokenized and scored as lm-eval's HFLM does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

DEFAULT_MAX_LENGTH = 2048
MAX_AUTO_BATCH = 64


@dataclass(frozen=True)
class EncodedRequest:
    context: tuple[int, ...]
    continuation: tuple[int, ...]


def resolve_max_length(model, tokenizer) -> int:
    """lm-eval's order: n_positions, max_position_embeddings, n_ctx, tokenizer.model_max_length, 2048."""
    config = getattr(model.config, "text_config", None) or model.config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and model_max < 1e29:  # transformers' "infinite" sentinel is ~1e30
        return model_max
    return DEFAULT_MAX_LENGTH


class CausalTokenizer:
    """Encodes request pairs with lm-eval's seam rules (whitespace moves to the continuation; joint tokenization)."""

    def __init__(self, tokenizer, prefix_token_id: int | None = None, add_bos_token: bool | None = None):
        self.tokenizer = tokenizer
        if prefix_token_id is None:
            prefix_token_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        self.prefix_token_id = prefix_token_id
        self.add_bos_token = add_bos_token

    def encode(self, text: str) -> list[int]:
        add_special = True if self.add_bos_token is None else self.add_bos_token
        bos = self.tokenizer.bos_token
        if bos and text.startswith(bos):
            add_special = False
        return self.tokenizer.encode(text, add_special_tokens=add_special)

    def encode_pair(self, context: str, continuation: str) -> EncodedRequest:
        if context == "":
            cont = self.tokenizer.encode(continuation, add_special_tokens=False)
            ctx = [self.prefix_token_id]
            if cont and cont[0] == self.prefix_token_id:
                ctx, cont = cont[:1], cont[1:]
            return EncodedRequest(tuple(ctx), tuple(cont))
        trailing = len(context) - len(context.rstrip())
        if trailing:
            context, continuation = context[:-trailing], context[-trailing:] + continuation
        whole = self.encode(context + continuation)
        context_ids = self.encode(context)
        return EncodedRequest(tuple(context_ids), tuple(whole[len(context_ids):]))


class CausalLMScorer:
    """Sums log P(continuation | context); batches are sorted longest first and right-padded with id 0."""

    def __init__(self, model, tokenizer, *, batch_size: int | str = 1, device: str = "cpu",
                 prefix_token_id: int | None = None, add_bos_token: bool | None = None, max_length: int | None = None):
        self.model = model.eval()
        self.device = torch.device(device)
        self.encoder = CausalTokenizer(tokenizer, prefix_token_id, add_bos_token)
        self.max_length = max_length or resolve_max_length(model, tokenizer)
        self.batch_size = batch_size

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        encoded = [self.encoder.encode_pair(ctx, cont) for ctx, cont in requests]
        return self.score_encoded(encoded)

    def score_encoded(self, encoded: Sequence[EncodedRequest]) -> list[float]:
        rows = [self._model_input(req) for req in encoded]
        order = sorted(range(len(rows)), key=lambda i: (-len(rows[i][0]), rows[i][0]))
        batch_size = self._resolve_batch_size(max((len(r[0]) for r in rows), default=1))
        results = [0.0] * len(rows)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            for i, value in zip(chunk, self._forward([rows[i] for i in chunk])):
                results[i] = value
        return results

    def _model_input(self, req: EncodedRequest) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Left-truncate to max_length as lm-eval does: keep the last max_length+1 tokens, drop the final one."""
        if not req.continuation:
            raise ValueError("empty continuation after tokenization")
        if len(req.continuation) > self.max_length:
            raise ValueError(f"continuation of {len(req.continuation)} tokens exceeds max length {self.max_length}")
        full = (req.context + req.continuation)[-(self.max_length + 1):][:-1]
        return full, req.continuation

    @torch.inference_mode()
    def _forward(self, rows: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> list[float]:
        width = max(len(inp) for inp, _ in rows)
        batch = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (inp, _) in enumerate(rows):
            batch[r, : len(inp)] = torch.tensor(inp)
        logits = self.model(batch.to(self.device)).logits
        values = []
        for r, (inp, cont) in enumerate(rows):
            scored = logits[r, len(inp) - len(cont): len(inp)]
            logprobs = F.log_softmax(scored, dim=-1)
            target = torch.tensor(cont, device=logprobs.device).unsqueeze(-1)
            values.append(float(logprobs.gather(-1, target).sum()))
        return values

    def _resolve_batch_size(self, longest: int) -> int:
        if self.batch_size != "auto":
            return int(self.batch_size)
        return auto_batch_size(self.model, longest)


def auto_batch_size(model, sequence_length: int) -> int:
    """Largest batch (≤ 64) whose logits and activations fit in a quarter of the free memory."""
    config = getattr(model.config, "text_config", None) or model.config
    vocab = getattr(config, "vocab_size", 50_000)
    hidden = getattr(config, "hidden_size", 1024)
    bytes_per_row = sequence_length * (vocab + 16 * hidden) * 4
    free = _free_memory_bytes(next(model.parameters()).device)
    return max(1, min(MAX_AUTO_BATCH, int(free * 0.25 // max(bytes_per_row, 1))))


def _free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 * 1024**3
