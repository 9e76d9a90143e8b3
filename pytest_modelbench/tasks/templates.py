"""Jinja2 rendering and lm-eval's resolution of doc_to_text / doc_to_target / doc_to_choice values."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any, Mapping

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pytest_modelbench.errors import DocumentError, TaskCodeError


def _regex_replace(string: str, pattern: str, repl: str, count: int = 0) -> str:
    return re.sub(pattern, repl, string, count=count)


_ENV = ImmutableSandboxedEnvironment(
    loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
)
_ENV.filters["regex_replace"] = _regex_replace


@lru_cache(maxsize=512)
def _compile(template: str) -> jinja2.Template:
    return _ENV.from_string(template)


def template_problem(template: str) -> str | None:
    """Why `template` does not compile (syntax error, unknown filter), or None."""
    try:
        _compile(template)
    except jinja2.TemplateError as exc:
        line = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        return f"template error{line}: {exc.message or exc}"
    return None


def render(template: str, doc: Mapping[str, Any], where: str) -> str:
    """Render `template` against one document; `where` names the task, key and document for errors."""
    try:
        return _compile(template).render(**doc)
    except jinja2.UndefinedError as exc:
        raise DocumentError(f"{where}: template reads a missing field ({exc.message})") from None
    except jinja2.TemplateError as exc:
        raise DocumentError(f"{where}: template error: {exc}") from None
    except Exception as exc:  # a template calling a method on bad data, e.g. list.index of a missing label
        raise DocumentError(f"{where}: template failed: {type(exc).__name__}: {exc}") from None


class DocResolver:
    """Turns the YAML's doc_to_* values into per-document text, target and choices (lm-eval semantics)."""

    def __init__(self, field_names: set[str], has_choices: bool):
        self.field_names = field_names
        self.has_choices = has_choices

    def text(self, spec: Any, doc: Mapping[str, Any], where: str) -> str:
        if callable(spec):
            value = _call(spec, doc, where, "doc_to_text")
            if not isinstance(value, str):
                raise DocumentError(
                    f"{where}: doc_to_text !function {spec.dotted_name} gave {_a(value)}, not a string"
                )
            return value
        if spec in self.field_names:
            value = doc[spec]
            if not isinstance(value, str):
                raise DocumentError(
                    f"{where}: doc_to_text field '{spec}' holds {_a(value)} ({value!r}), not a string "
                    "(lm-eval's multiple-input tasks, where it is an index, are not supported)"
                )
            return value
        rendered = render(spec, doc, where)
        if rendered.isdigit() and self.has_choices:
            raise DocumentError(
                f"{where}: doc_to_text rendered {rendered!r}, a number, which lm-eval reads as a choice index "
                "(multiple-input tasks are not supported)"
            )
        return rendered

    def target(self, spec: Any, doc: Mapping[str, Any], where: str) -> int | str | list:
        if callable(spec):
            value = _call(spec, doc, where, "doc_to_target")
        elif isinstance(spec, (int, list)):
            value = spec
        elif spec in self.field_names:
            value = doc[spec]
        else:
            value = self._rendered_target(render(spec, doc, where), where)
        if isinstance(value, list) and not value:
            raise DocumentError(f"{where}: the target is an empty list (no correct choice)")
        return value

    def _rendered_target(self, rendered: str, where: str) -> int | str | list:
        """lm-eval's rule: digits become an index; "[...]" a list when it is a literal, else stays text."""
        if rendered.isdigit() and self.has_choices:
            try:
                return ast.literal_eval(rendered)
            except (ValueError, SyntaxError):  # lm-eval 0.4.13 stops with a SyntaxError here
                raise DocumentError(
                    f"{where}: doc_to_target rendered {rendered!r}, which is not a Python integer literal (leading "
                    "zeros or non-ASCII digits; lm-eval cannot read it either): render the index in ASCII digits"
                ) from None
        if len(rendered) >= 2 and rendered[0] == "[" and rendered[-1] == "]":
            try:
                return ast.literal_eval(rendered)
            except _LITERAL_ERRORS:
                return rendered
        return rendered

    def choices(self, spec: Any, doc: Mapping[str, Any], where: str) -> list[str]:
        if callable(spec):
            value = _call(spec, doc, where, "doc_to_choice")
        elif isinstance(spec, list):
            value = spec
        elif isinstance(spec, dict):
            value = list(spec.values())
        elif spec in self.field_names:
            value = doc[spec]
        else:
            value = _literal(render(spec, doc, where), where, "doc_to_choice")
        if not isinstance(value, (list, tuple)) or not value:
            raise DocumentError(f"{where}: doc_to_choice must give a non-empty list, got {value!r}")
        return [str(choice) for choice in value]


_LITERAL_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)


def _a(value: Any) -> str:
    """'an int', 'a list', 'None': the type of a value, for messages."""
    if value is None:
        return "None"
    name = type(value).__name__
    return ("an " if name[0] in "aeiou" else "a ") + name


def _call(function: Any, doc: Mapping[str, Any], where: str, key: str) -> Any:
    try:
        return function(doc)
    except TaskCodeError as exc:
        raise DocumentError(f"{where}: {key}: {exc}") from None


def _literal(text: str, where: str, key: str) -> Any:
    try:
        return ast.literal_eval(text)
    except _LITERAL_ERRORS:
        raise DocumentError(f"{where}: {key} must render a Python literal, got {text!r}") from None
