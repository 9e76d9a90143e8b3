"""lm-eval 0.4.13's `exact_match` for one document: the filtered answer against the reference (or any of several).

Options, applied to both sides in this order: `regexes_to_ignore` (each removed with re.sub), `ignore_case`
(lower case), `ignore_punctuation` (ASCII punctuation removed), `ignore_numbers` (ASCII digits removed).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import TaskConfigError

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_DIGITS = str.maketrans("", "", string.digits)
_FLAGS = ("ignore_case", "ignore_punctuation", "ignore_numbers")


@dataclass(frozen=True)
class ExactMatch:
    regexes_to_ignore: tuple[re.Pattern, ...] = ()
    ignore_case: bool = False
    ignore_punctuation: bool = False
    ignore_numbers: bool = False

    def normalise(self, text: str) -> str:
        for regex in self.regexes_to_ignore:
            text = regex.sub("", text)
        if self.ignore_case:
            text = text.lower()
        if self.ignore_punctuation:
            text = text.translate(_PUNCTUATION)
        if self.ignore_numbers:
            text = text.translate(_DIGITS)
        return text

    def score(self, answer: str, reference: str | tuple[str, ...]) -> float:
        """1.0 when the answer equals the reference (any one of several references), else 0.0."""
        references = reference if isinstance(reference, tuple) else (reference,)
        answer = self.normalise(answer)
        return float(any(answer == self.normalise(ref) for ref in references))


def exact_match_options(options: dict[str, Any], path: Path, label: str, metric: str = "exact_match") -> ExactMatch:
    """The metric_list entry's options (`label` names it in errors, `metric` the metric that compares by exact
    match); unknown ones are refused."""
    unknown = sorted(set(options) - {"regexes_to_ignore", *_FLAGS}, key=str)
    if unknown:
        raise TaskConfigError(f"{path}: key '{label}.{unknown[0]}' is not an option of {metric}")
    for flag in _FLAGS:
        if not isinstance(options.get(flag, False), bool):
            raise TaskConfigError(f"{path}: key '{label}.{flag}' must be true or false")
    patterns = options.get("regexes_to_ignore") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise TaskConfigError(f"{path}: key '{label}.regexes_to_ignore' must be a list of regular expressions")
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise TaskConfigError(f"{path}: key '{label}.regexes_to_ignore': {pattern!r} does not compile: {exc}") \
                from None
    return ExactMatch(tuple(compiled), **{flag: options.get(flag, False) for flag in _FLAGS})
