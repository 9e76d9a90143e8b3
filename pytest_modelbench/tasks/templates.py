"""Jinja2 rendering and lm-eval's resolution of doc_to_text / doc_to_target / doc_to_choice values."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any, Mapping

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pytest_modelbench.errors import DocumentError


def _regex_replace(string: str, pattern: str, repl: str, count: int = 0) -> str:
    return re.sub(pattern, repl, string, count=count)


_ENV = ImmutableSandboxedEnvironment(
    loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
)
_ENV.filters["regex_replace"] = _regex_replace


@lru_cache(maxsize=512)
def _compile(template: str) -> jinja2.Template:
    return _ENV.from_string(template)


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
            return spec(doc)
        if isinstance(spec, int):
            raise DocumentError(f"{where}: doc_to_text as an integer (multiple-input tasks) is not supported")
        if spec in self.field_names:
            return doc[spec]
        rendered = render(spec, doc, where)
        if rendered.isdigit() and self.has_choices:
            raise DocumentError(f"{where}: doc_to_text rendered a number (multiple-input tasks are not supported)")
        return rendered

    def target(self, spec: Any, doc: Mapping[str, Any], where: str) -> int | str | list:
        if callable(spec):
            return spec(doc)
        if isinstance(spec, (int, list)):
            return spec
        if spec in self.field_names:
            return doc[spec]
        rendered = render(spec, doc, where)
        if rendered.isdigit() and self.has_choices:
            return _literal(rendered, where, "doc_to_target")  # digits need not be a literal: "007", "০"
        if len(rendered) >= 2 and rendered[0] == "[" and rendered[-1] == "]":
            return _literal(rendered, where, "doc_to_target")
        return rendered

    def choices(self, spec: Any, doc: Mapping[str, Any], where: str) -> list[str]:
        if callable(spec):
            value = spec(doc)
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


def _literal(text: str, where: str, key: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise DocumentError(f"{where}: {key} must render a Python literal, got {text!r}") from None
