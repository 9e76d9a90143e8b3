"""lm-eval 0.4.13's `filter_list`: named pipelines that turn a generation into the answer that is scored.

Each pipeline's name becomes the suffix of its metric keys (`exact_match,strict-match`); without `filter_list` there is
one pipeline, `none`, that takes the generation as it is. A step maps a document's list of responses (one response:
`repeats` is 1) to a new list; every pipeline ends by taking the first response. `take_first` may also stand before
other steps: lm-eval then hands the next step the first response itself, a string, which that step iterates one
character at a time, so here it becomes the list of its characters. Steps: regex (findall, `group_select`-th match,
the first non-empty group of a tuple, stripped, else `fallback`), multi_choice_regex (regex, then the document's
`choices` texts, then `: A`-style letters, each mapped to `(A)`...), lowercase, uppercase, remove_whitespace (strips
both ends), map (`mapping_dict`, `default_value`).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_modelbench.errors import DocumentError, TaskConfigError

Step = Callable[[list[str], Mapping[str, Any], str], list[str]]  # (responses, document, where) -> responses
DEFAULT_REGEX = r"#### (\-?[0-9\.\,]+)"
DEFAULT_FALLBACK = "[invalid]"


@dataclass(frozen=True)
class FilterPipeline:
    name: str
    steps: tuple[Step, ...] = ()

    def apply(self, generation: str, doc: Mapping[str, Any], where: str) -> str:
        responses = [generation]
        for step in self.steps:
            responses = step(responses, doc, f"{where}, filter '{self.name}'")
        return _first(responses, f"{where}, filter '{self.name}'")


def _first(responses: list[str], where: str) -> str:
    if not responses:  # only after a take_first of an empty string, as in lm-eval (IndexError there)
        raise DocumentError(f"{where}: take_first found no response (the response before it was empty)")
    return responses[0]


def _take_first(responses: list[str], doc: Mapping[str, Any], where: str) -> list[str]:
    return list(_first(responses, where))


NO_FILTER = (FilterPipeline("none"),)


def filter_pipelines(value: Any, path: Path) -> tuple[FilterPipeline, ...]:
    """The YAML's `filter_list`, checked; None gives lm-eval's default single `none` pipeline."""
    if value is None:
        return NO_FILTER
    if not isinstance(value, list) or not value:
        raise TaskConfigError(f"{path}: key 'filter_list' must be a non-empty list of {{name, filter}} mappings")
    pipelines = []
    for i, entry in enumerate(value):
        label = f"filter_list[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise TaskConfigError(f"{path}: key '{label}' needs a 'name'")
        steps = entry.get("filter")
        if not isinstance(steps, list) or not steps:
            raise TaskConfigError(f"{path}: key '{label}.filter' must be a non-empty list of steps")
        pipelines.append(FilterPipeline(entry["name"], _steps(steps, path, label)))
    names = [pipeline.name for pipeline in pipelines]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise TaskConfigError(f"{path}: key 'filter_list': two pipelines are named '{duplicate}'")
    return tuple(pipelines)


def _steps(entries: list[Any], path: Path, label: str) -> tuple[Step, ...]:
    steps = []
    for j, entry in enumerate(entries):
        where = f"{label}.filter[{j}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("function"), str):
            raise TaskConfigError(f"{path}: key '{where}' needs a 'function' name")
        function = entry["function"]
        kwargs = {key: value for key, value in entry.items() if key != "function"}
        if function == "take_first":
            if kwargs:
                raise TaskConfigError(f"{path}: key '{where}.{sorted(kwargs, key=str)[0]}' is not an argument of "
                                      "filter 'take_first'")
            if j != len(entries) - 1:  # as the last step it is the take_first that ends every pipeline
                steps.append(_take_first)
            continue
        if function not in _BUILDERS:
            raise TaskConfigError(
                f"{path}: key '{where}.function': filter {function!r} is not supported "
                f"(supported: {', '.join(sorted([*_BUILDERS, 'take_first']))})"
            )
        builder, allowed = _BUILDERS[function]
        unknown = sorted(set(kwargs) - allowed, key=str)
        if unknown:
            raise TaskConfigError(f"{path}: key '{where}.{unknown[0]}' is not an argument of filter '{function}'")
        steps.append(builder(kwargs, f"{path}: key '{where}'"))
    return tuple(steps)


# --- regex --------------------------------------------------------------------------------------------------------


def _compiled(pattern: Any, where: str) -> re.Pattern:
    if not isinstance(pattern, str):
        raise TaskConfigError(f"{where}: regex_pattern must be a string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise TaskConfigError(f"{where}: regex_pattern {pattern!r} does not compile: {exc}") from None


def _regex_settings(kwargs: dict[str, Any], where: str) -> tuple[re.Pattern, int, str]:
    regex = _compiled(kwargs.get("regex_pattern", DEFAULT_REGEX), where)
    group_select = kwargs.get("group_select", 0)
    if isinstance(group_select, bool) or not isinstance(group_select, int):
        raise TaskConfigError(f"{where}: group_select must be an integer")
    fallback = kwargs.get("fallback", DEFAULT_FALLBACK)
    if not isinstance(fallback, str):
        raise TaskConfigError(f"{where}: fallback must be a string")
    return regex, group_select, fallback


def _selected_match(regex: re.Pattern, group_select: int, text: str, where: str) -> str | None:
    """The `group_select`-th findall match, its first non-empty group if it has groups, stripped; None if nothing
    matched or the selected match's groups are all empty."""
    matches = regex.findall(text)
    if not matches:
        return None
    try:
        match = matches[group_select]
    except IndexError:
        raise DocumentError(
            f"{where}: group_select {group_select} but the pattern matched {len(matches)} times"
        ) from None
    if isinstance(match, tuple):
        match = next((group for group in match if group), None)
        if match is None:
            return None
    return match.strip()


def _regex(kwargs: dict[str, Any], where: str) -> Step:
    regex, group_select, fallback = _regex_settings(kwargs, where)

    def step(responses: list[str], doc: Mapping[str, Any], at: str) -> list[str]:
        extracted = []
        for response in responses:
            match = _selected_match(regex, group_select, response, at)
            extracted.append(fallback if match is None else match)
        return extracted

    return step


def _multi_choice_regex(kwargs: dict[str, Any], where: str) -> Step:
    regex, group_select, fallback = _regex_settings(kwargs, where)
    ignore = _ChoiceNormaliser(kwargs, where)

    def step(responses: list[str], doc: Mapping[str, Any], at: str) -> list[str]:
        choices = doc.get("choices")
        if not isinstance(choices, list) or not all(isinstance(choice, str) for choice in choices):
            raise DocumentError(f"{at}: multi_choice_regex needs a 'choices' field holding a list of strings")
        letters = [chr(ord("A") + i) for i in range(len(choices))]
        by_text = {ignore(choice.strip()): f"({letter})" for choice, letter in zip(choices, letters)}
        # Longest first, so that a choice that is a prefix of another cannot shadow it.
        texts = sorted((re.escape(ignore(choice.strip())) for choice in choices), key=len, reverse=True)
        by_text_regex = re.compile("|".join(texts))
        by_letter_regex = re.compile(rf":[\s]*({'|'.join(letters)})")
        by_letter = {letter: f"({letter})" for letter in letters}
        extracted = []
        for response in responses:
            match = _selected_match(regex, group_select, response, at)
            if not match:
                match = _mapped(_selected_match(by_text_regex, group_select, ignore(response), at), by_text)
            if not match:
                match = _mapped(_selected_match(by_letter_regex, group_select, response, at), by_letter)
            extracted.append(match or fallback)
        return extracted

    return step


def _mapped(match: str | None, table: dict[str, str]) -> str | None:
    return table.get(match, match) if match else match


class _ChoiceNormaliser:
    """multi_choice_regex's matching of choice texts: regexes removed, lower case, Unicode punctuation removed."""

    def __init__(self, kwargs: dict[str, Any], where: str):
        self.regexes = [_compiled(pattern, where) for pattern in kwargs.get("regexes_to_ignore") or []]
        self.ignore_case = bool(kwargs.get("ignore_case", False))
        self.ignore_punctuation = bool(kwargs.get("ignore_punctuation", False))

    def __call__(self, text: str) -> str:
        for regex in self.regexes:
            text = regex.sub("", text)
        if self.ignore_case:
            text = text.lower()
        if self.ignore_punctuation:
            text = text.translate(_unicode_punctuation())
        return text


@lru_cache(maxsize=1)
def _unicode_punctuation() -> dict[int, None]:
    return dict.fromkeys(i for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P"))


# --- simple transforms --------------------------------------------------------------------------------------------


def _each(transform: Callable[[str], str]) -> Callable[[dict[str, Any], str], Step]:
    def build(kwargs: dict[str, Any], where: str) -> Step:
        return lambda responses, doc, at: [transform(response) for response in responses]

    return build


def _map(kwargs: dict[str, Any], where: str) -> Step:
    mapping = kwargs.get("mapping_dict") or {}
    default = kwargs.get("default_value")
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise TaskConfigError(f"{where}: mapping_dict must map responses to strings")
    if not isinstance(default, str):
        raise TaskConfigError(f"{where}: default_value must be a string (the answer for an unmapped response)")
    return lambda responses, doc, at: [mapping.get(response, default) for response in responses]


_REGEX_ARGS = {"regex_pattern", "group_select", "fallback"}
_BUILDERS: dict[str, tuple[Callable[[dict[str, Any], str], Step], set[str]]] = {
    "regex": (_regex, _REGEX_ARGS),
    "multi_choice_regex": (
        _multi_choice_regex, _REGEX_ARGS | {"ignore_case", "ignore_punctuation", "regexes_to_ignore"},
    ),
    "lowercase": (_each(str.lower), set()),
    "uppercase": (_each(str.upper), set()),
    "remove_whitespace": (_each(str.strip), set()),
    "map": (_map, {"mapping_dict", "default_value"}),
}
