# Over 400 lines: lm-eval's filter catalogue, one small class per filter name, kept together as lm-eval keeps it.
"""lm-eval 0.4.13's `filter_list`: named pipelines that turn a generation into the answer that is scored. They are
built, and checked, when the task's YAML is read (tasks/config.py, as lm-eval's task builds its filter ensembles), and
run over a task's generations by run/evaluation.py.

Each pipeline's name becomes the suffix of its metric keys (`exact_match,strict-match`); without `filter_list` there is
one pipeline, `none`, that takes the generation as it is. As in lm-eval (api/filter.py FilterEnsemble), each step maps
the responses of all the task's documents at once, in document order: one entry per document, its list of responses
(its `repeats` generations: copies of the one greedy generation, or a sampled task's draws). `take_first` replaces a
document's list by its first response, a string; a later step that iterates it then reads one character at a time,
as lm-eval's steps do. `take_first_k` keeps the first `k` responses; `majority_vote` replaces the list by a list of
its most frequent response (a tie: the one seen first). The pipeline's answer is the string its last step leaves, or
the first response of the list it leaves; that list, one answer per draw, is what the metrics over samples read
(pass@K, metrics/generative.py). Steps: regex (findall, `group_select`-th match, the first non-empty group of a
tuple, stripped, else `fallback`), multi_choice_regex (regex, then the document's `choices` texts, then `: A`-style
letters, each mapped to `(A)`...), lowercase, uppercase, remove_whitespace (strips both ends), map (`mapping_dict`,
`default_value`).

Task code (--allow-task-code), called with lm-eval's contract:
- `function: custom` with `filter_fn: !function module.fn`: fn(resps, docs) once per task, with every document's
  responses and the documents (filters/custom.py CustomFilter);
- `function: !function module.SomeFilter` (its other keys are its arguments): lm-eval builds it as
  SomeFilter(**arguments) each time the pipeline runs and calls its apply(resps, docs), once per task (BBH's
  MultiChoiceRegexFilter, kormedmcqa's ExtractChoiceFilter).
What either returns must hold one entry per document, in order: a list of strings (the document's responses) or a
string (one response); anything else is an error naming the file, the filter and the document.
"""

from __future__ import annotations

import inspect
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pytest_modelbench.errors import DocumentError, TaskCodeError, TaskConfigError
from pytest_modelbench.tasks.task_code import Resolve, TaskFunction
from pytest_modelbench.tasks.yaml_loader import FunctionRef

# One document's responses as a step sees them: a list of responses, or after take_first one response (a string).
Responses = list[str] | str
# A step over the whole task: (each document's responses, the documents, where each document is named for errors,
# where the task is named) -> each document's new responses.
Step = Callable[[list[Responses], Sequence[Mapping[str, Any]], Sequence[str], str], list[Responses]]
# A step of one document, for the built-in filters: (responses, document, where) -> responses.
DocumentStep = Callable[[Responses, Mapping[str, Any], str], list[str]]
DEFAULT_REGEX = r"#### (\-?[0-9\.\,]+)"
DEFAULT_FALLBACK = "[invalid]"
# The gate's entry of a generate_until task: the share of answers no parsing pipeline could parse (invalid_outputs)
INVALID_OUTPUT = "invalid_output"
_PARSING_FILTERS = ("regex", "multi_choice_regex")  # the steps that answer their `fallback` when nothing matched


class Answers(dict):
    """One document's answers: each pipeline's answer by name, the string lm-eval scores; `samples` holds each
    pipeline's answers over the document's draws (a sampled task with `repeats`): what the steps leave when the
    pipeline does not end with take_first (one answer per draw), else its one answer for every draw."""

    def __init__(self, answers: Mapping[str, str], samples: Mapping[str, list[str]]):
        super().__init__(answers)
        self.samples = dict(samples)


@dataclass(frozen=True)
class FilterPipeline:
    name: str
    steps: tuple[Step, ...] = ()
    # The `fallback` of each parsing step (regex, multi_choice_regex): an answer that is one could not be parsed.
    fallbacks: frozenset[str] = frozenset()

    def apply(self, generation: str, doc: Mapping[str, Any], where: str) -> str:
        """The answer of one document to one generation (a task of one document: custom steps see only it)."""
        value = self.apply_all([[generation]], [doc], [where], where)[0]
        return value if isinstance(value, str) else _first(value, f"{where}, filter '{self.name}'")

    def apply_all(self, responses: Sequence[list[str]], docs: Sequence[Mapping[str, Any]], wheres: Sequence[str],
                  task_where: str) -> list[Responses]:
        """What the steps leave of every document's responses (its list of `repeats` generations): a list, or a
        string after take_first; `wheres` names each document in errors, `task_where` the task."""
        label = f", filter '{self.name}'"
        at = [where + label for where in wheres]
        values: list[Responses] = [list(document_responses) for document_responses in responses]
        for step in self.steps:
            values = step(values, docs, at, task_where + label)
        return values


def filtered_answers(pipelines: Sequence[FilterPipeline], responses: Sequence[list[str]],
                     docs: Sequence[Mapping[str, Any]], doc_ids: Sequence[Any], task_where: str) -> list[Answers]:
    """Per document, the answers of each pipeline; each pipeline runs over all the documents at once. `responses`:
    per document its list of generations (lm-eval's `repeats` of them: copies of the one greedy generation, or the
    sampled draws)."""
    wheres = [f"{task_where}, document {doc_id}" for doc_id in doc_ids]
    at = {pipeline.name: [f"{where}, filter '{pipeline.name}'" for where in wheres] for pipeline in pipelines}
    left = {pipeline.name: pipeline.apply_all(responses, docs, wheres, task_where) for pipeline in pipelines}
    return [Answers({name: values[i] if isinstance(values[i], str) else _first(values[i], at[name][i])
                     for name, values in left.items()},
                    {name: [values[i]] * len(responses[i]) if isinstance(values[i], str) else list(values[i])
                     for name, values in left.items()})
            for i in range(len(responses))]


def invalid_outputs(pipelines: Sequence[FilterPipeline], answers: Sequence[Mapping[str, str]]) -> list[bool] | None:
    """Per document, whether no parsing pipeline (one with a regex or multi_choice_regex step) could parse its
    generation: each of them answered its step's fallback. None when no pipeline parses (nothing can be invalid;
    a task code filter's failures are its own and are not seen here)."""
    parsing = [pipeline for pipeline in pipelines if pipeline.fallbacks]
    if not parsing:
        return None
    return [all(answer[p.name] in p.fallbacks for p in parsing) for answer in answers]


def _first(responses: Responses, where: str) -> str:
    if not responses:  # only after a take_first of an empty string, as in lm-eval (IndexError there)
        raise DocumentError(f"{where}: take_first found no response (the response before it was empty)")
    return responses[0]


def _take_first(values: list[Responses], docs: Sequence[Mapping[str, Any]], wheres: Sequence[str],
                task_where: str) -> list[Responses]:
    return [_first(value, where) for value, where in zip(values, wheres)]


def _take_first_k(kwargs: dict[str, Any], where: str) -> Step:
    """lm-eval's take_first_k: each document's first `k` responses; fewer than `k` is an error (more repeats needed)."""
    k = kwargs.get("k")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise TaskConfigError(f"{where}: filter 'take_first_k' needs 'k', a positive integer, got {k!r}")

    def step(values: list[Responses], docs: Sequence[Mapping[str, Any]], wheres: Sequence[str],
             task_where: str) -> list[Responses]:
        for value, at in zip(values, wheres):
            if len(value) < k:
                raise DocumentError(f"{at}: take_first_k needs {k} responses and the document has {len(value)}: "
                                    f"set the task's repeats to {k} or more")
        return [value[:k] for value in values]

    return step


def _majority_vote(values: list[Responses], docs: Sequence[Mapping[str, Any]], wheres: Sequence[str],
                   task_where: str) -> list[Responses]:
    """lm-eval's majority_vote: each document's most frequent response, as a list of one; a tie goes to the
    response seen first."""
    return [[Counter(value).most_common(1)[0][0]] if value else [] for value in values]


_SELECTIONS: dict[str, tuple[Callable[[dict[str, Any], str], Step], set[str]]] = {
    "take_first": (lambda kwargs, where: _take_first, set()),
    "take_first_k": (_take_first_k, {"k"}),
    "majority_vote": (lambda kwargs, where: _majority_vote, set()),
}


def _per_document(step: DocumentStep) -> Step:
    """A built-in filter's step, which maps each document's responses on its own."""

    def over_task(values: list[Responses], docs: Sequence[Mapping[str, Any]], wheres: Sequence[str],
                  task_where: str) -> list[Responses]:
        return [step(value, doc, where) for value, doc, where in zip(values, docs, wheres)]

    return over_task


NO_FILTER = (FilterPipeline("none"),)


def filter_pipelines(value: Any, path: Path, resolve: Resolve | None = None) -> tuple[FilterPipeline, ...]:
    """The YAML's `filter_list`, checked; None gives lm-eval's default single `none` pipeline. `resolve` turns a
    `!function` into the task's code (it refuses without --allow-task-code); without it task code is refused."""
    if value is None:
        return NO_FILTER
    if not isinstance(value, list) or not value:
        raise TaskConfigError(f"{path}: key 'filter_list' must be a non-empty list of {{name, filter}} mappings")
    resolve = resolve or _refuse_task_code(path)
    pipelines = []
    for i, entry in enumerate(value):
        label = f"filter_list[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise TaskConfigError(f"{path}: key '{label}' needs a 'name'")
        steps = entry.get("filter")
        if not isinstance(steps, list) or not steps:
            raise TaskConfigError(f"{path}: key '{label}.filter' must be a non-empty list of steps")
        fallbacks = frozenset(step.get("fallback", DEFAULT_FALLBACK) for step in steps
                              if isinstance(step, dict) and step.get("function") in _PARSING_FILTERS)
        pipelines.append(FilterPipeline(entry["name"], _steps(steps, path, label, resolve), fallbacks))
    names = [pipeline.name for pipeline in pipelines]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise TaskConfigError(f"{path}: key 'filter_list': two pipelines are named '{duplicate}'")
    return tuple(pipelines)


def _refuse_task_code(path: Path) -> Resolve:
    def refuse(key: str, ref: Any) -> Any:
        raise TaskConfigError(f"{path}: key '{key}' uses '{ref!r}', which runs Python code from the suite folder; "
                              "pass --allow-task-code to allow it")

    return refuse


def _steps(entries: list[Any], path: Path, label: str, resolve: Resolve) -> tuple[Step, ...]:
    steps = []
    for j, entry in enumerate(entries):
        where = f"{label}.filter[{j}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("function"), (str, FunctionRef)):
            raise TaskConfigError(f"{path}: key '{where}' needs a 'function' name")
        function = entry["function"]
        kwargs = {key: value for key, value in entry.items() if key != "function"}
        if isinstance(function, FunctionRef):
            steps.append(_filter_class(resolve(f"{where}.function", function), kwargs, path, where))
            continue
        if function == "custom":
            steps.append(_custom(kwargs, path, where, resolve))
            continue
        if function in _SELECTIONS:
            builder, allowed = _SELECTIONS[function]
            unknown = sorted(set(kwargs) - allowed, key=str)
            if unknown:
                raise TaskConfigError(f"{path}: key '{where}.{unknown[0]}' is not an argument of filter '{function}'")
            steps.append(builder(kwargs, f"{path}: key '{where}'"))
            continue
        if function not in _BUILDERS:
            raise TaskConfigError(
                f"{path}: key '{where}.function': filter {function!r} is not supported "
                f"(supported: {', '.join(sorted([*_BUILDERS, *_SELECTIONS, 'custom']))}, or a filter class as "
                "'!function module.Class' with --allow-task-code)"
            )
        builder, allowed = _BUILDERS[function]
        unknown = sorted(set(kwargs) - allowed, key=str)
        if unknown:
            raise TaskConfigError(f"{path}: key '{where}.{unknown[0]}' is not an argument of filter '{function}'")
        steps.append(_per_document(builder(kwargs, f"{path}: key '{where}'")))
    return tuple(steps)


# --- task code: custom filter functions and filter classes --------------------------------------------------------


def _custom(kwargs: dict[str, Any], path: Path, where: str, resolve: Resolve) -> Step:
    """`function: custom`: lm-eval's CustomFilter calls filter_fn(resps, docs) over all documents."""
    ref = kwargs.get("filter_fn")
    if not isinstance(ref, FunctionRef):
        got = "" if ref is None else f", got {ref!r}"
        raise TaskConfigError(f"{path}: key '{where}.filter_fn': filter 'custom' needs 'filter_fn: !function "
                              f"module.name', a function of (resps, docs){got}")
    unknown = sorted(set(kwargs) - {"filter_fn"}, key=str)
    if unknown:
        raise TaskConfigError(f"{path}: key '{where}.{unknown[0]}' is not an argument of filter 'custom' (lm-eval "
                              "calls filter_fn with the responses and the documents only)")
    function = resolve(f"{where}.filter_fn", ref)
    if _refuses(function, None, None):
        raise TaskConfigError(f"{path}: key '{where}.filter_fn': {ref.dotted_name} cannot be called as "
                              "filter_fn(resps, docs), which is how lm-eval calls a custom filter")
    def step(values: list[Responses], docs: Sequence[Mapping[str, Any]], wheres: Sequence[str],
             task_where: str) -> list[Responses]:
        try:
            result = function(values, list(docs))
        except TaskCodeError as exc:
            raise DocumentError(f"{task_where}: custom filter {exc}") from None
        return _checked(result, wheres, task_where, f"custom filter !function {ref.dotted_name}")

    return step


def _filter_class(cls: Any, kwargs: dict[str, Any], path: Path, where: str) -> Step:
    """`function: !function module.SomeFilter`: built as lm-eval builds it, SomeFilter(**kwargs), each time the
    pipeline runs; its apply(resps, docs) maps all documents' responses."""
    dotted = cls.dotted_name
    raw = cls.function
    if inspect.isclass(raw):
        if not callable(getattr(raw, "apply", None)):
            raise TaskConfigError(f"{path}: key '{where}.function': class {dotted} is not a filter: it has no "
                                  "apply(resps, docs) method (lm-eval's Filter interface)")
        problem = _refuses(raw, **kwargs)
        if problem:
            raise TaskConfigError(f"{path}: key '{where}': filter {dotted} does not take these arguments "
                                  f"({', '.join(sorted(kwargs, key=str)) or 'none'}): {problem}")
    elif inspect.isfunction(raw) and _refuses(raw, **kwargs):
        raise TaskConfigError(f"{path}: key '{where}.function': {dotted} is a function that cannot be called with "
                              f"{'the arguments ' + ', '.join(sorted(kwargs, key=str)) if kwargs else 'no arguments'}; "
                              "lm-eval builds a filter from it and calls the result's apply(resps, docs). A function "
                              "of (resps, docs) goes in 'function: custom' with 'filter_fn: !function "
                              f"{dotted}'")

    def step(values: list[Responses], docs: Sequence[Mapping[str, Any]], wheres: Sequence[str],
             task_where: str) -> list[Responses]:
        try:
            instance = cls(**kwargs)
        except TaskCodeError as exc:
            raise DocumentError(f"{task_where}: filter {exc}") from None
        apply = getattr(instance, "apply", None)
        if not callable(apply):
            raise DocumentError(f"{task_where}: filter !function {dotted} gave {type(instance).__name__} "
                                f"{instance!r:.80}, which has no apply(resps, docs) method; a function of (resps, "
                                f"docs) goes in 'function: custom' with 'filter_fn: !function {dotted}'")
        try:
            result = TaskFunction(f"{dotted}.apply", apply)(values, list(docs))
        except TaskCodeError as exc:
            raise DocumentError(f"{task_where}: filter {exc}") from None
        return _checked(result, wheres, task_where, f"filter !function {dotted}")

    return step


def _refuses(function: Any, *args: Any, **kwargs: Any) -> str | None:
    """Why `function` cannot be called with these arguments, from its signature; None if it can (or cannot tell)."""
    try:
        inspect.signature(getattr(function, "function", function)).bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature to read (a builtin): let the call decide
        return None
    return None


def _checked(result: Any, wheres: Sequence[str], task_where: str, what: str) -> list[Responses]:
    """A filter's output, as the next step and the metrics need it: one entry per document, each a list of strings
    (its responses) or a string (one response)."""
    if isinstance(result, (str, bytes, Mapping)) or not isinstance(result, Iterable):
        raise DocumentError(f"{task_where}: {what} returned {type(result).__name__} {result!r:.80}, not one entry "
                            "per document (a list of each document's responses, in document order)")
    try:
        entries = list(result)
    except Exception as exc:  # a generator of the task's code failed while it was read
        raise DocumentError(f"{task_where}: {what}: reading its result raised {type(exc).__name__}: {exc}") from None
    if len(entries) != len(wheres):
        raise DocumentError(f"{task_where}: {what} returned {len(entries)} entries for {len(wheres)} documents; it "
                            "must return one per document, in the order it was given them")
    checked: list[Responses] = []
    for entry, where in zip(entries, wheres):
        if isinstance(entry, str):
            checked.append(entry)
            continue
        if isinstance(entry, (list, tuple)):
            bad = next((item for item in entry if not isinstance(item, str)), None)
            if bad is None:
                checked.append(list(entry))
                continue
            raise DocumentError(f"{where}: {what} returned the responses {entry!r:.80}, which hold "
                                f"{type(bad).__name__} {bad!r:.40}; a response must be a string")
        raise DocumentError(f"{where}: {what} returned {type(entry).__name__} {entry!r:.80} for this document, not "
                            "its responses (a list of strings) or one response (a string)")
    return checked


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


def _regex(kwargs: dict[str, Any], where: str) -> DocumentStep:
    regex, group_select, fallback = _regex_settings(kwargs, where)

    def step(responses: list[str], doc: Mapping[str, Any], at: str) -> list[str]:
        extracted = []
        for response in responses:
            match = _selected_match(regex, group_select, response, at)
            extracted.append(fallback if match is None else match)
        return extracted

    return step


def _multi_choice_regex(kwargs: dict[str, Any], where: str) -> DocumentStep:
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


def _each(transform: Callable[[str], str]) -> Callable[[dict[str, Any], str], DocumentStep]:
    def build(kwargs: dict[str, Any], where: str) -> DocumentStep:
        return lambda responses, doc, at: [transform(response) for response in responses]

    return build


def _map(kwargs: dict[str, Any], where: str) -> DocumentStep:
    mapping = kwargs.get("mapping_dict") or {}
    default = kwargs.get("default_value")
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise TaskConfigError(f"{where}: mapping_dict must map responses to strings")
    if not isinstance(default, str):
        raise TaskConfigError(f"{where}: default_value must be a string (the answer for an unmapped response)")
    return lambda responses, doc, at: [mapping.get(response, default) for response in responses]


_REGEX_ARGS = {"regex_pattern", "group_select", "fallback"}
_BUILDERS: dict[str, tuple[Callable[[dict[str, Any], str], DocumentStep], set[str]]] = {
    "regex": (_regex, _REGEX_ARGS),
    "multi_choice_regex": (
        _multi_choice_regex, _REGEX_ARGS | {"ignore_case", "ignore_punctuation", "regexes_to_ignore"},
    ),
    "lowercase": (_each(str.lower), set()),
    "uppercase": (_each(str.upper), set()),
    "remove_whitespace": (_each(str.strip), set()),
    "map": (_map, {"mapping_dict", "default_value"}),
}
