"""lm-eval's value resolution for doc_to_text / doc_to_target / doc_to_choice, in a Jinja2 sandbox."""

from __future__ import annotations

import pytest

from pytest_modelbench.errors import DocumentError
from pytest_modelbench.tasks.templates import DocResolver, render

DOC = {
    "question": "Which gas?",
    "choices": {"text": ["Oxygen", "it's nitrogen"], "label": ["A", "B"]},
    "answerKey": "B",
    "answer": 1,
    "flag": True,
}
resolver = DocResolver(set(DOC), has_choices=True)


def test_field_name_returns_raw_value():
    assert resolver.target("answer", DOC, "d") == 1
    assert resolver.target("flag", DOC, "d") is True
    assert resolver.text("question", DOC, "d") == "Which gas?"


def test_digit_rendering_becomes_int():
    assert resolver.target("{{choices.label.index(answerKey)}}", DOC, "d") == 1


def test_list_rendering_becomes_list_target():
    assert resolver.target("{{[0, 1]}}", DOC, "d") == [0, 1]


def test_choice_template_renders_python_list_literal():
    # A list renders as its Python repr, quotes included, and literal_eval reads it back.
    assert render("{{choices.text}}", DOC, "d") == "['Oxygen', \"it's nitrogen\"]"
    assert resolver.choices("{{choices.text}}", DOC, "d") == ["Oxygen", "it's nitrogen"]


def test_choice_list_and_int_target_pass_through():
    assert resolver.choices(["yes", "no"], DOC, "d") == ["yes", "no"]
    assert resolver.target(0, DOC, "d") == 0


def test_missing_field_names_document():
    with pytest.raises(DocumentError, match=r"task 't', document 7: template reads a missing field"):
        resolver.text("{{nope}}", DOC, "task 't', document 7")


def test_keep_trailing_newline_and_regex_filter():
    assert render("{{question}}\n", DOC, "d") == "Which gas?\n"
    assert render("{{question | regex_replace('gas', 'metal')}}", DOC, "d") == "Which metal?"


def test_sandbox_blocks_python_internals():
    with pytest.raises(DocumentError):
        render("{{ question.__class__.__mro__[1].__subclasses__() }}", DOC, "d")


def test_choice_template_that_is_not_a_list():
    with pytest.raises(DocumentError, match="doc_to_choice must render a Python literal"):
        resolver.choices("{{question}}", DOC, "d")
