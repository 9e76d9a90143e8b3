"""A generate_until task's `generation_kwargs`, read as lm-eval 0.4.13's HF backend reads them.

lm-eval's rules (models/utils.py normalize_gen_kwargs, models/huggingface.py HFLM._model_generate): without
`generation_kwargs` the task stops at its `fewshot_delimiter` and generates at most 256 tokens (`max_gen_toks`, or its
aliases max_new_tokens, max_tokens, max_completion_tokens, in that order); with them but without `until`, `until` is
`[fewshot_delimiter]`; a string `until` is a one-item list. The model's end-of-sequence token is added as a stop by
the scorer. `temperature` defaults to 0; `do_sample` unset becomes `temperature > 0`; `do_sample: false` drops the
temperature (greedy). Every other key goes to transformers' `generate` as it is, so here it must be one of
transformers' generation settings; the sampling-only ones (temperature, top_p, top_k, ...) are dropped when not
sampling, where transformers ignores them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import TaskConfigError

DEFAULT_MAX_GEN_TOKS = 256
SAMPLING_SEED = 1234  # a sampled task's torch seed: lm-eval 0.4.13's default (simple_evaluate's torch_random_seed)
# lm-eval's names for the token budget, first found wins (models/utils.py normalize_gen_kwargs).
_MAX_TOKEN_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
# Read by transformers only when it samples (its logits warpers), so greedy and beam decoding leave them out.
_SAMPLING_ONLY_KEYS = {"temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h"}
# Generation settings that the scorer sets itself, or that change what `generate` returns (one sequence per row).
_REFUSED_KEYS = {
    "max_length": "lm-eval reads it as prompt plus generation length; use max_gen_toks",
    "num_return_sequences": "one generation per document is scored",
    "return_dict_in_generate": "the scorer reads generated token ids",
    "output_scores": "the scorer reads generated token ids",
    "output_logits": "the scorer reads generated token ids",
    "output_attentions": "the scorer reads generated token ids",
    "output_hidden_states": "the scorer reads generated token ids",
    "pad_token_id": "the scorer pads with lm-eval's padding token",
    "use_cache": "the scorer always generates with the KV cache",
    "stop_strings": "stop sequences are given by 'until'",
}
_NUMBER_KEYS = {"temperature", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h",
                "repetition_penalty"}
_INTEGER_KEYS = {"top_k", "num_beams", "no_repeat_ngram_size", "min_new_tokens", "min_length"}


@dataclass(frozen=True)
class GenerationSettings:
    until: tuple[str, ...]  # the task's stop sequences, before the model's end-of-sequence text is added
    max_gen_toks: int = DEFAULT_MAX_GEN_TOKS
    # What goes to transformers' `generate` besides the prompt, the token budget and the stops, sorted by key.
    decoding: tuple[tuple[str, Any], ...] = (("do_sample", False),)

    @property
    def sampling(self) -> bool:
        return dict(self.decoding).get("do_sample") is True

    def label(self) -> str:
        """The decoding settings as `key=value`, e.g. 'do_sample=True, temperature=0.8, top_p=0.95'."""
        return ", ".join(f"{key}={value!r}" for key, value in self.decoding)


def generation_settings(value: Any, fewshot_delimiter: str, path: Path) -> GenerationSettings:
    if value is None:
        return GenerationSettings(until=(fewshot_delimiter,))
    if not isinstance(value, dict):
        raise TaskConfigError(f"{path}: key 'generation_kwargs' must be a mapping")
    until = value.get("until", [fewshot_delimiter])
    if isinstance(until, str):
        until = [until]
    if not isinstance(until, list) or not all(isinstance(stop, str) for stop in until):
        raise TaskConfigError(f"{path}: key 'generation_kwargs.until' must be a string or a list of strings")
    key = next((key for key in _MAX_TOKEN_KEYS if value.get(key) is not None), "max_gen_toks")
    max_gen_toks = value.get(key, DEFAULT_MAX_GEN_TOKS)
    if isinstance(max_gen_toks, bool) or not isinstance(max_gen_toks, int) or max_gen_toks < 1:
        raise TaskConfigError(f"{path}: key 'generation_kwargs.{key}' must be a positive integer")
    passed = {key: item for key, item in value.items() if key != "until" and key not in _MAX_TOKEN_KEYS}
    return GenerationSettings(tuple(until), max_gen_toks, _decoding(passed, path))


def _decoding(passed: dict[str, Any], path: Path) -> tuple[tuple[str, Any], ...]:
    """lm-eval's do_sample/temperature rules, then the checked keys for `generate`."""
    for key, item in passed.items():
        _check_key(key, item, path)
    do_sample = passed.get("do_sample")
    temperature = passed.get("temperature", 0.0)
    if do_sample is None:
        do_sample = temperature > 0
    if do_sample and temperature <= 0:
        raise TaskConfigError(
            f"{path}: key 'generation_kwargs.temperature' is {temperature}: with do_sample true lm-eval passes it to "
            "transformers, which refuses a temperature that is not positive; set temperature > 0 or do_sample: false"
        )
    decoding = {**passed, "do_sample": do_sample}
    if not do_sample:
        decoding = {key: item for key, item in decoding.items() if key not in _SAMPLING_ONLY_KEYS}
    return tuple(sorted(decoding.items()))


def _check_key(key: Any, item: Any, path: Path) -> None:
    where = f"{path}: key 'generation_kwargs.{key}'"
    if key in _REFUSED_KEYS:
        raise TaskConfigError(f"{where} is not supported ({_REFUSED_KEYS[key]})")
    if key == "do_sample":
        if item is not None and not isinstance(item, bool):
            raise TaskConfigError(f"{where} must be true or false")
    elif key in _NUMBER_KEYS:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or item < 0:
            raise TaskConfigError(f"{where} must be a non-negative number")
    elif key in _INTEGER_KEYS:
        least = 0 if key == "top_k" else 1
        if isinstance(item, bool) or not isinstance(item, int) or item < least:
            raise TaskConfigError(f"{where} must be an integer of at least {least}")
    elif not _is_transformers_setting(key):
        raise TaskConfigError(
            f"{where} is not a generation setting of transformers' generate (lm-eval passes the keys it does not "
            "read itself to it)"
        )
    elif not isinstance(item, (bool, int, float, str, type(None))):
        raise TaskConfigError(f"{where} must be a number, a string or a boolean")


def _is_transformers_setting(key: Any) -> bool:
    from transformers import GenerationConfig

    return isinstance(key, str) and not key.startswith("_") and key in GenerationConfig().to_dict()
