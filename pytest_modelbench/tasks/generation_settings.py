"""A generate_until task's `generation_kwargs`, read with lm-eval 0.4.13's defaults; only greedy decoding is run.

lm-eval's rules: without `generation_kwargs` the task stops at its `fewshot_delimiter` and generates at most 256
tokens (`max_gen_toks`, or its aliases max_new_tokens, max_tokens, max_completion_tokens, in that order); with them
but without `until`, `until` is `[fewshot_delimiter]`; a string `until` is a one-item list. The model's
end-of-sequence token is added as a stop by the scorer. `do_sample: true`, or a non-zero `temperature` without
`do_sample: false` (lm-eval then samples), are refused: a gate needs the same answer on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import TaskConfigError

DEFAULT_MAX_GEN_TOKS = 256
# lm-eval's names for the token budget, first found wins (models/utils.py normalize_gen_kwargs).
_MAX_TOKEN_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
# Keys read here; top_p and top_k only shape sampling, so greedy decoding ignores them (as transformers does).
_KNOWN_KEYS = {"until", "do_sample", "temperature", "top_p", "top_k", *_MAX_TOKEN_KEYS}


@dataclass(frozen=True)
class GenerationSettings:
    until: tuple[str, ...]  # the task's stop sequences, before the model's end-of-sequence text is added
    max_gen_toks: int = DEFAULT_MAX_GEN_TOKS


def generation_settings(value: Any, fewshot_delimiter: str, path: Path) -> GenerationSettings:
    if value is None:
        return GenerationSettings(until=(fewshot_delimiter,))
    if not isinstance(value, dict):
        raise TaskConfigError(f"{path}: key 'generation_kwargs' must be a mapping")
    unknown = sorted(set(value) - _KNOWN_KEYS, key=str)
    if unknown:
        raise TaskConfigError(
            f"{path}: key 'generation_kwargs.{unknown[0]}' is not supported (greedy decoding reads "
            f"{', '.join(sorted(_KNOWN_KEYS))})"
        )
    _check_greedy(value, path)
    until = value.get("until", [fewshot_delimiter])
    if isinstance(until, str):
        until = [until]
    if not isinstance(until, list) or not all(isinstance(stop, str) for stop in until):
        raise TaskConfigError(f"{path}: key 'generation_kwargs.until' must be a string or a list of strings")
    key = next((key for key in _MAX_TOKEN_KEYS if value.get(key) is not None), "max_gen_toks")
    max_gen_toks = value.get(key, DEFAULT_MAX_GEN_TOKS)
    if isinstance(max_gen_toks, bool) or not isinstance(max_gen_toks, int) or max_gen_toks < 1:
        raise TaskConfigError(f"{path}: key 'generation_kwargs.{key}' must be a positive integer")
    return GenerationSettings(tuple(until), max_gen_toks)


def _check_greedy(value: dict[str, Any], path: Path) -> None:
    do_sample = value.get("do_sample")
    if do_sample not in (None, False):
        raise TaskConfigError(
            f"{path}: key 'generation_kwargs.do_sample' is {do_sample!r}: only greedy decoding is supported "
            "(do_sample: false)"
        )
    temperature = value.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TaskConfigError(f"{path}: key 'generation_kwargs.temperature' must be a number")
    if temperature != 0 and do_sample is None:
        raise TaskConfigError(
            f"{path}: key 'generation_kwargs.temperature' is {temperature}: lm-eval samples at a non-zero temperature "
            "unless do_sample is false; only greedy decoding is supported (temperature: 0 or do_sample: false)"
        )
