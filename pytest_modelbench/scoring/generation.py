"""Generation for generate_until tasks, as lm-eval 0.4.13's HFLM runs it.

Per request: the context encoded as for scoring (BOS by the tokenizer's default, none when the text starts with it),
cut on the left to `max_length - max_gen_toks` tokens; at most `max_gen_toks` new tokens with the KV cache
(transformers' `generate`, given the task's decoding settings: greedy, sampling, beams); a row stops at the model's
end-of-sequence token or once its decoded text holds one of the stop sequences (the task's `until` plus the
end-of-sequence text). The answer is the decoded new tokens (special tokens skipped) cut before the first stop
sequence. Requests run in lm-eval's order (longest context first, ties by context text) in batches, left-padded with
an attention mask; rows finish independently. At batch size 1 nothing is padded, which is lm-eval's reference setting.

Sampling draws from torch's random generator, seeded with the run's sampling seed (--sampling-seed; by default
lm-eval's torch seed) before a task's first batch (lm-eval seeds once per run, so a task that runs alone draws what
lm-eval draws). A document's `repeats` draws are adjacent requests, as lm-eval clones them. The generator's state is
restored afterwards, so a task's samples depend on neither the tasks before it nor the caller's random state.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from pytest_modelbench.errors import RequestError
from pytest_modelbench.tasks.generation_settings import SAMPLING_SEED, GenerationSettings


class _StopSequences(StoppingCriteria):
    """Per row: done once the text generated so far contains a stop sequence."""

    def __init__(self, tokenizer, stops: Sequence[str], prompt_width: int):
        self.tokenizer = tokenizer
        self.stops = [stop for stop in stops if stop]
        self.prompt_width = prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width:], skip_special_tokens=True)
        done = [any(stop in text for stop in self.stops) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def stop_sequences(tokenizer, settings: GenerationSettings) -> list[str]:
    """The task's `until` plus the model's end-of-sequence text (lm-eval adds it unless already there)."""
    until = list(settings.until)
    if tokenizer.eos_token_id is not None:
        eos = tokenizer.decode([tokenizer.eos_token_id], skip_special_tokens=False)
        if eos not in until:
            until.append(eos)
    return until


def cut_at_stops(text: str, stops: Sequence[str]) -> str:
    for stop in stops:
        if stop:
            text = text.split(stop)[0]
    return text


def padding_id(tokenizer) -> int:
    """lm-eval's choice: the pad token, else the unknown token, else end-of-sequence."""
    for token_id in (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    return 0


def context_limit(max_length: int, settings: GenerationSettings) -> int:
    limit = max_length - settings.max_gen_toks
    if limit < 1:
        raise RequestError(
            f"generation_kwargs.max_gen_toks {settings.max_gen_toks} leaves no room for a context within the model's "
            f"maximum length {max_length}"
        )
    return limit


def batch_plan(lengths: Sequence[int], texts: Sequence[str], batch_size: int) -> list[list[int]]:
    """lm-eval's batches: requests sorted by untruncated context length (longest first), ties by context text."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], texts[i]))
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


@torch.inference_mode()
def generate_batches(model, tokenizer, device, contexts: Sequence[Sequence[int]], settings: GenerationSettings,
                     batches: Sequence[Sequence[int]], on_done: Callable[[list[int], list[str]], None],
                     seed: int = SAMPLING_SEED) -> None:
    """Answers the encoded (already left-truncated) contexts batch by batch: `on_done(indices, answers)` per batch;
    a sampled task draws from torch's generator seeded with `seed`."""
    stops = stop_sequences(tokenizer, settings)
    pad = padding_id(tokenizer)
    decoding = dict(settings.decoding)
    with _seeded(model, settings.sampling, seed):
        for chunk in batches:
            width = max(len(contexts[i]) for i in chunk)
            input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                length = len(contexts[i])
                input_ids[row, width - length:] = torch.tensor(contexts[i], dtype=torch.long)
                attention_mask[row, width - length:] = 1
            output = model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                max_new_tokens=settings.max_gen_toks, use_cache=True, pad_token_id=pad,
                stopping_criteria=StoppingCriteriaList([_StopSequences(tokenizer, stops, width)]), **decoding,
            )
            texts = tokenizer.batch_decode(output[:, width:].tolist(), skip_special_tokens=True)
            on_done(list(chunk), [cut_at_stops(text, stops) for text in texts])


@contextmanager
def _seeded(model, sampling: bool, seed: int) -> Iterator[None]:
    if not sampling:
        yield
        return
    cuda = sorted({parameter.device.index or 0 for parameter in model.parameters() if parameter.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield
