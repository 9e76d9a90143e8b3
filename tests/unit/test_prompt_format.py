"""Prompt formats: plain text with a system instruction, chat templates single- and multi-turn (lm-eval 0.4.13's
fewshot_context, build_qa_turn, multiturn_to_singleturn and maybe_delimit, worked by hand)."""

from __future__ import annotations

import json

import pytest

from pytest_modelbench.errors import ModelLoadError
from pytest_modelbench.tasks.prompt_format import PromptFormat, Shot, maybe_delimit, prompt_format

SHOTS = [Shot("Q: a?\nA:", "x", " ", "\n\n"), Shot("Q: b?\nA:", "", " ", "\n\n")]
QUESTION = Shot("Q: c?\nA:", "", " ", "")


def as_json(messages):
    return json.dumps(messages)


def test_maybe_delimit_adds_the_delimiter_only_between_non_space_ends():
    assert maybe_delimit("Be brief.", "Desc", "\n\n") == "Be brief.\n\nDesc"
    assert maybe_delimit("Be brief.\n", "Desc", "\n\n") == "Be brief.\nDesc"
    assert maybe_delimit(None, "Desc", "\n\n") == "Desc" and maybe_delimit("Be brief.", "", "\n\n") == "Be brief."


def test_plain_text_puts_the_system_instruction_before_the_description():
    plain = PromptFormat(system_instruction="Be brief.")
    assert plain.context("Desc:\n\n", SHOTS, QUESTION, "\n\n") == (
        "Be brief.\n\nDesc:\n\nQ: a?\nA: x\n\nQ: b?\nA:Q: c?\nA:")
    assert plain.continuation_delimiter(" ") == " "


def test_chat_single_turn_and_multi_turn_messages():
    single = PromptFormat("Be brief.", as_json, fewshot_as_multiturn=False)
    assert json.loads(single.context("Desc", SHOTS, QUESTION, "\n\n")) == [
        {"role": "system", "content": "Be brief.\n\nDesc"},
        {"role": "user", "content": "Q: a?\nA: x\n\nQ: b?\nA:Q: c?\nA:"},
    ]
    multi = PromptFormat(None, as_json, fewshot_as_multiturn=True)
    assert json.loads(multi.context("", SHOTS, QUESTION, "\n\n")) == [
        {"role": "user", "content": "Q: a?\nA:"}, {"role": "assistant", "content": "x"},
        {"role": "user", "content": "Q: b?\nA:"}, {"role": "user", "content": "Q: c?\nA:"},
    ]
    assert multi.continuation_delimiter(" ") == ""


def test_labels_name_what_the_provenance_must_tell_apart():
    class Tokenizer:
        chat_template = "{{ messages }}"

    assert prompt_format(None, False, None, False).label == ""
    with_instruction = prompt_format(None, False, "Be brief.", False).label
    chat = prompt_format(Tokenizer(), True, None, True).label
    assert with_instruction.startswith("system_instruction=") and "chat_template=" in chat
    assert chat.endswith("fewshot_as_multiturn") and chat != prompt_format(Tokenizer(), True, None, False).label
    Tokenizer.chat_template = None
    with pytest.raises(ModelLoadError, match="the model's tokenizer has no chat template"):
        prompt_format(Tokenizer(), True, None, True)


def test_fewshot_as_multiturn_option_follows_lm_eval_cli():
    from pytest_modelbench.pytest_plugin import cli_options

    assert cli_options.fewshot_as_multiturn(None, True) is True
    assert cli_options.fewshot_as_multiturn(None, False) is False
    assert cli_options.fewshot_as_multiturn("false", True) is False
    with pytest.raises(pytest.UsageError, match="--fewshot-as-multiturn true needs --apply-chat-template"):
        cli_options.fewshot_as_multiturn("true", False)


def test_gen_prefix_follows_the_question_and_precedes_each_shot_answer():
    shots = [Shot("Q: a?", "x", " ", "\n\n", "Answer:"), Shot("Q: b?\n", "y", " ", "\n\n", "Answer:")]
    question = Shot("Q: c?", "", " ", "", "Answer:")
    # target delimiter only where neither side has whitespace at the join; prefix and answer joined by a space
    assert PromptFormat().context("", shots, question, "\n\n") == (
        "Q: a? Answer: x\n\nQ: b?\nAnswer: y\n\nQ: c? Answer:")
    multi = PromptFormat(None, as_json, fewshot_as_multiturn=True)
    assert json.loads(multi.context("", shots[:1], question, "\n\n")) == [
        {"role": "user", "content": "Q: a?"}, {"role": "assistant", "content": "Answer: x"},
        {"role": "user", "content": "Q: c?"}, {"role": "assistant", "content": "Answer:"},
    ]
    single = PromptFormat(None, as_json)
    assert json.loads(single.context("", shots[:1], question, "\n\n")) == [
        {"role": "user", "content": "Q: a? Answer: x\n\nQ: c?"}, {"role": "assistant", "content": "Answer:"},
    ]
