"""The text of --show-prompts and --list-tasks, from hand-made documents and configs."""

from __future__ import annotations

from pathlib import Path

from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.listing import fewshot_setting
from pytest_modelbench.tasks.preview import document_lines
from pytest_modelbench.tasks.requests import DocumentRequests


def test_document_lines_show_context_lines_verbatim_and_every_gold():
    doc = DocumentRequests(
        doc_id=7, context="Intro\n\nQ: x \nA:", choices=("a", "b", "c"), continuations=(" a", " b", " c"),
        gold=(0, 2), category="age", doc={},
    )
    assert document_lines(doc) == [
        "  document 7, category age",
        "    context:",
        "      | Intro",
        "      | ",
        "      | Q: x ",
        "      | A:",
        "    continuations:",
        "      0: ' a'  <- gold",
        "      1: ' b'",
        "      2: ' c'  <- gold",
    ]


def test_bias_choices_are_marked_by_their_role_not_as_gold():
    doc = DocumentRequests(doc_id=0, context="", choices=("He cried.", "She cried."),
                           continuations=("He cried.", "She cried."), gold=0, category="gender", doc={})
    lines = document_lines(doc, ("more stereotypical", "less stereotypical"))
    assert lines[-2:] == ["      0: 'He cried.'  <- more stereotypical", "      1: 'She cried.'  <- less stereotypical"]


def test_fewshot_setting_follows_lm_evals_override_rule():
    pinned = TaskConfig(task="t", source=Path("t.yaml"), num_fewshot=0, test_split="test", training_split="train")
    unset = TaskConfig(task="t", source=Path("t.yaml"), test_split="test", training_split="train")
    assert fewshot_setting(pinned, 5) == "0"
    assert fewshot_setting(unset, None) == "0"
    assert fewshot_setting(unset, 2) == "2 from 'train' (default)"


def test_document_lines_of_generative_and_rolling_documents():
    generative = DocumentRequests(doc_id=1, context="Q: 2+2?\nA:", choices=(), continuations=(), gold="4",
                                  category=None, doc={})
    assert document_lines(generative) == ["  document 1", "    context:", "      | Q: 2+2?", "      | A:",
                                          "    target: '4'"]
    rolling = DocumentRequests(doc_id=2, context="", choices=(), continuations=(), gold="Some text.\n", category=None,
                               doc={})
    assert document_lines(rolling) == ["  document 2", "    text: 'Some text.\\n'"]


def test_fewshot_setting_names_inline_samples():
    config = TaskConfig(task="t", source=Path("t.yaml"), num_fewshot=2, fewshot_samples=({"q": "a"},))
    assert fewshot_setting(config, None) == "2 from fewshot_config.samples (default)"
