"""filter_list pipelines, exact_match options and generate_until config keys, against hand-worked lm-eval 0.4.13
behaviour (extraction.py, transformation.py, metrics.py::exact_match_hf_evaluate, config/task.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.metrics.exact_match import exact_match_options
from pytest_modelbench.tasks.filters import filter_pipelines
from pytest_modelbench.tasks.generation_settings import generation_settings

HERE = Path("task.yaml")


def answer(steps, generation, doc=None):
    [pipeline] = filter_pipelines([{"name": "p", "filter": steps}], HERE)
    return pipeline.apply(generation, doc or {}, "doc 0")


def test_regex_selects_the_match_its_first_non_empty_group_and_strips():
    gsm = [{"function": "regex", "regex_pattern": r"#### (\-?[0-9\.\,]+)"}, {"function": "take_first"}]
    assert answer(gsm, "so #### 42 and #### 7") == "42"
    last = [{"function": "regex", "regex_pattern": r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": -1}]
    assert answer(last, "first 12 then 7") == "7"  # second alternative's group, the first one is empty
    assert answer([{"function": "regex", "regex_pattern": r"\s*x\s*"}], "a x b") == "x"
    assert answer([{"function": "regex", "regex_pattern": r"(a)|(b)", "fallback": "none"}], "ccc") == "none"
    assert answer([{"function": "regex"}], "no hashes") == "[invalid]"


def test_regex_group_select_past_the_matches_names_the_document():
    with pytest.raises(DocumentError, match="doc 0, filter 'p': group_select 3 but the pattern matched 1 times"):
        answer([{"function": "regex", "regex_pattern": "a", "group_select": 3}], "a")


def test_transforms_and_map():
    assert answer([{"function": "remove_whitespace"}, {"function": "uppercase"}], "  c. \n") == "C."
    assert answer([{"function": "lowercase"}], "YeS") == "yes"
    mapping = {"function": "map", "mapping_dict": {"yes": "True"}, "default_value": "False"}
    assert answer([mapping], "yes") == "True"
    assert answer([mapping], "maybe") == "False"


def test_multi_choice_regex_falls_back_to_choice_text_then_to_colon_letters():
    doc = {"choices": ["Guilty", "Guilty of Romance", "Not guilty"]}
    step = {"function": "multi_choice_regex", "regex_pattern": r"(\([A-C]\))", "ignore_case": True,
            "ignore_punctuation": True}
    assert answer([step], "I pick (B) here", doc) == "(B)"
    assert answer([step], "it is guilty of romance!", doc) == "(B)"  # longest choice text first
    assert answer([step], "The answer: C", doc) == "(C)"
    assert answer([step], "nothing", doc) == "[invalid]"
    with pytest.raises(DocumentError, match="needs a 'choices' field"):
        answer([step], "x", {"choices": {"text": ["a"]}})


def test_take_first_before_other_steps_hands_them_the_first_response_character_by_character():
    # Outputs of lm-eval 0.4.13's own RegexFilter, TakeFirstFilter, MapFilter and LowercaseFilter on these inputs.
    mapping = {"function": "map", "mapping_dict": {"A": "zero", "B": "one"}, "default_value": "none"}
    polemo_like = [{"function": "regex", "regex_pattern": r"(\b[ABCD]\b)"}, {"function": "take_first"}, mapping,
                   {"function": "take_first"}]
    assert answer(polemo_like, "I say B.") == "one"
    assert answer(polemo_like, "nothing") == "none"  # '[invalid]' mapped one character at a time, first kept
    assert answer([{"function": "take_first"}, {"function": "lowercase"}, {"function": "take_first"}], "HeLLo") == "h"
    assert answer([{"function": "take_first"}, {"function": "take_first"}], "HeLLo") == "H"
    assert answer([{"function": "take_first"}], "HeLLo") == "HeLLo"


def test_take_first_of_an_empty_response_names_the_document():
    with pytest.raises(DocumentError, match="doc 0, filter 'p': take_first found no response"):
        answer([{"function": "take_first"}, {"function": "take_first"}], "")


@pytest.mark.parametrize("filter_list, message", [
    ([{"name": "p", "filter": [{"function": "take_first", "k": 2}]}], "'filter_list[0].filter[0].k' is not an arg"),
    ([{"name": "p", "filter": [{"function": "take_first_k"}]}], "filter 'take_first_k' needs 'k', a positive int"),
    ([{"name": "p", "filter": [{"function": "majority_vote", "k": 2}]}], ".k' is not an argument of filter 'majority_vote'"),
    ([{"name": "p", "filter": [{"function": "best_of"}]}], "filter 'best_of' is not supported"),
    ([{"name": "p", "filter": [{"function": "regex", "regex_pattern": "("}]}], "does not compile"),
    ([{"name": "p", "filter": [{"function": "regex", "pattern": "x"}]}], "'filter_list[0].filter[0].pattern' is not"),
    ([{"name": "p", "filter": [{"function": "map", "mapping_dict": {"a": 1}, "default_value": "x"}]}], "to strings"),
    ([{"name": "p", "filter": [{"function": "lowercase"}]}] * 2, "two pipelines are named 'p'"),
    ([{"filter": [{"function": "lowercase"}]}], "'filter_list[0]' needs a 'name'"),
    ({"name": "p"}, "must be a non-empty list"),
])
def test_bad_filter_lists_are_named(filter_list, message):
    with pytest.raises(TaskConfigError, match=re.escape(message)):
        filter_pipelines(filter_list, HERE)


def test_exact_match_options_in_lm_eval_order():
    plain = exact_match_options({}, HERE, "metric_list[0]")
    assert plain.score("C", "C") == 1.0 and plain.score("c", "C") == 0.0 and plain.score(" C", "C") == 0.0
    loose = exact_match_options({"ignore_case": True, "ignore_punctuation": True, "regexes_to_ignore": [r"\s+"]},
                                HERE, "metric_list[0]")
    assert loose.score(" (c). ", "C") == 1.0
    numbers = exact_match_options({"ignore_numbers": True}, HERE, "metric_list[0]")
    assert numbers.score("B12", "B") == 1.0
    assert plain.score("4", ("5", "4")) == 1.0 and plain.score("6", ("5", "4")) == 0.0  # any reference
    with pytest.raises(TaskConfigError, match="'metric_list\\[0\\].ignore_cases' is not an option of exact_match"):
        exact_match_options({"ignore_cases": True}, HERE, "metric_list[0]")


def test_generation_kwargs_defaults_follow_lm_eval():
    assert generation_settings(None, "\n\n", HERE).until == ("\n\n",)
    assert generation_settings(None, "\n\n", HERE).max_gen_toks == 256
    assert generation_settings({"max_gen_toks": 5}, "###", HERE).until == ("###",)
    assert generation_settings({"until": "Q:"}, "\n\n", HERE).until == ("Q:",)
    assert generation_settings({"until": [], "temperature": 0.7, "do_sample": False}, "\n\n", HERE).until == ()


@pytest.mark.parametrize("kwargs, decoding", [
    # lm-eval 0.4.13 normalize_gen_kwargs: temperature defaults to 0, do_sample unset becomes temperature > 0
    ({}, {"do_sample": False}),
    ({"temperature": 0.5}, {"do_sample": True, "temperature": 0.5}),
    ({"do_sample": True, "temperature": 0.8, "top_p": 0.95}, {"do_sample": True, "temperature": 0.8, "top_p": 0.95}),
    # greedy: HFLM._model_generate drops the temperature; transformers ignores the other sampling-only keys
    ({"do_sample": False, "temperature": 0.7, "top_p": 0.9, "top_k": 5}, {"do_sample": False}),
    ({"do_sample": False, "num_beams": 1, "max_new_tokens": 256}, {"do_sample": False, "num_beams": 1}),
    ({"num_beams": 10, "repetition_penalty": 1.1}, {"do_sample": False, "num_beams": 10, "repetition_penalty": 1.1}),
])
def test_decoding_settings_follow_lm_eval(kwargs, decoding):
    settings = generation_settings(kwargs, "\n\n", HERE)
    assert dict(settings.decoding) == decoding
    assert settings.sampling == decoding["do_sample"]


@pytest.mark.parametrize("kwargs, message", [
    ({"do_sample": True}, "'generation_kwargs.temperature' is 0.0: with do_sample true lm-eval passes it"),
    ({"do_sample": "yes"}, "'generation_kwargs.do_sample' must be true or false"),
    ({"temperature": "hot"}, "'generation_kwargs.temperature' must be a non-negative number"),
    ({"num_beams": 0}, "'generation_kwargs.num_beams' must be an integer of at least 1"),
    ({"max_length": 40}, "'generation_kwargs.max_length' is not supported .*use max_gen_toks"),
    ({"num_return_sequences": 2}, "'generation_kwargs.num_return_sequences' is not supported"),
    ({"beam_width": 4}, "'generation_kwargs.beam_width' is not a generation setting of transformers' generate"),
    ({"max_gen_toks": 0}, "'generation_kwargs.max_gen_toks' must be a positive integer"),
    ({"until": [1]}, "'generation_kwargs.until' must be a string or a list of strings"),
])
def test_bad_generation_kwargs_are_refused_by_file_and_key(kwargs, message):
    with pytest.raises(TaskConfigError, match=f"{HERE}: key {message}"):
        generation_settings(kwargs, "\n\n", HERE)
