"""Bad input that used to end in a raw traceback (or a silently wrong number): each is a named project error
that says which file, key, document or option is at fault. docs/bad-input.md lists them."""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
import textwrap
from pathlib import Path

import pytest

from pytest_modelbench.errors import BaselineError, DatasetError, DocumentError, ModelLoadError, TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.gate.baseline_file import parse
from pytest_modelbench.tasks.config import TaskConfig, load_task_config
from pytest_modelbench.tasks.requests import DocumentRequests
from pytest_modelbench.tasks.task import PreparedTask, prepare_task
from pytest_modelbench.tasks.templates import DocResolver
from tests.fixtures.gate_records import make_record

SOURCE = Path("suite/toy.yaml")
WHERE = "suite/toy.yaml: task 'toy', document 3"


def prepared(*documents: tuple[str, tuple[str, ...]]) -> PreparedTask:
    config = TaskConfig(task="toy", source=SOURCE, test_split="test", doc_to_text="q", doc_to_target=0,
                        doc_to_choice=["a"], metric_list=TaskConfig.metric_list[:1])
    docs = [DocumentRequests(i, context, choices, choices, 0, None, {}) for i, (context, choices) in enumerate(documents)]
    return PreparedTask(config, docs, 0, None, "fingerprint")


def toy_task(tmp_path: Path, rows: list[dict], extra: str = "", **keys: str) -> TaskConfig:
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    lines = {"doc_to_text": '"{{q}}"', "doc_to_target": "label", "doc_to_choice": "choices", **keys}
    yaml = textwrap.dedent("""\
        task: toy
        dataset_path: json
        dataset_kwargs:
          data_files: {test: test.jsonl}
        test_split: test
        output_type: multiple_choice
        """) + "".join(f"{k}: {v}\n" for k, v in lines.items()) + textwrap.dedent(extra)
    (tmp_path / "toy.yaml").write_text(yaml, encoding="utf-8")
    return load_task_config(tmp_path / "toy.yaml", allow_task_code=True)


@pytest.mark.parametrize(
    ("keys", "extra", "message"),
    [
        ({}, "metric_list:\n  - metric: acc\n    aggregation: median\n",
         "key 'metric_list[0].aggregation': only 'mean' is supported, got 'median'"),
        ({}, "modelbench:\n  category_field: 3\n", "key 'modelbench.category_field' must be a field name"),
        ({"doc_to_choice": "[]"}, "", "key 'doc_to_choice' is an empty list"),
        ({"doc_to_text": "[q]"}, "", "key 'doc_to_text' must be a string (or !function), got ['q']"),
        ({"doc_to_text": '"{{q | shout}}"'}, "", "key 'doc_to_text': template error (line 1): No filter named 'shout'"),
        ({"process_docs": "utils.process"}, "", "key 'process_docs' must be a '!function module.name' reference"),
        ({}, "fewshot_config:\n  doc_to_target: 1.5\n", "key 'fewshot_config.doc_to_target' must be a string or a"),
    ],
)
def test_static_errors_name_file_and_key_at_load(tmp_path, keys, extra, message):
    with pytest.raises(TaskConfigError, match=f"toy\\.yaml: {re.escape(message)}"):
        toy_task(tmp_path, [], extra, **keys)


# --- non-finite log-likelihoods -------------------------------------------------------------------------------------


class FixedScorer:
    def __init__(self, values):
        self.values = values

    def score_task(self, prepared):
        return list(self.values)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_loglikelihood_names_document_and_choice(bad):
    task = prepared(("Q0", (" a", " b")), ("Q1", (" c", " d")))
    with pytest.raises(DocumentError, match=r"toy\.yaml: task 'toy', document 1, choice 1 \(' d'\): "
                                            r"the model gave a non-finite log-likelihood"):
        evaluate_task(task, FixedScorer([-1.0, -2.0, -3.0, bad]))


def test_half_precision_overflow_is_a_named_error(tiny_model):
    """A float16 model whose logits overflow: log_softmax of inf logits is NaN."""
    import torch

    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    loaded = load_model(resolve_model_source(str(tiny_model)), dtype="float16")
    with torch.no_grad():
        loaded.model.lm_head.weight.mul_(3e4)
    scorer = CausalLMScorer(loaded.model, loaded.tokenizer)
    with pytest.raises(DocumentError, match="document 0, choice 0.*non-finite log-likelihood.*--dtype float32"):
        evaluate_task(prepared(("The quick brown fox", (" jumps", " runs"))), scorer)


# --- baseline files -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_number_in_a_baseline_names_the_file(constant):
    text = make_record_text()
    assert '"alpha": 0.05' in text
    text = text.replace('"alpha": 0.05', f'"alpha": {constant}')
    with pytest.raises(BaselineError, match=rf"^b\.json: .*{constant} is not a number JSON allows.*--snapshot-update"):
        parse(text, "b.json")


def make_record_text() -> str:
    from pytest_modelbench.gate.baseline_file import dumps

    return dumps(make_record({"acc": [1, 0, 1, 1]}, ["a", "b", "a", "b"]))


# --- rendered values that look numeric ------------------------------------------------------------------------------


RESOLVER = DocResolver({"q", "label"}, has_choices=True)


@pytest.mark.parametrize("rendered", ["007", "১২", "²"])
def test_digits_that_are_not_python_literals_name_the_document(rendered):
    with pytest.raises(DocumentError, match=rf"^{WHERE}: doc_to_target rendered {rendered!r}, which is not"):
        RESOLVER.target("{{label}}", {"label": rendered, "q": "x"}, WHERE)


def test_plain_digits_still_become_an_index():
    assert RESOLVER.target("{{label}}", {"label": "12", "q": "x"}, WHERE) == 12


def test_bracketed_text_that_is_not_a_literal_stays_a_string_as_in_lm_eval():
    assert RESOLVER.target("{{label}}", {"label": "[yes]", "q": "x"}, WHERE) == "[yes]"


def test_bengali_numeral_as_prompt_is_named():
    with pytest.raises(DocumentError, match=rf"^{WHERE}: doc_to_text rendered '১২', a number"):
        RESOLVER.text("{{q}}", {"q": "১২"}, WHERE)


# --- prompt fields, targets, task code -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [7, None, ["a"], 1.5])
def test_non_string_prompt_field_names_field_and_document(value):
    with pytest.raises(DocumentError, match=rf"^{WHERE}: doc_to_text field 'q' holds .*, not a string"):
        RESOLVER.text("q", {"q": value}, WHERE)


def test_empty_target_list_names_the_document(tmp_path):
    config = toy_task(tmp_path, [{"q": "Q", "choices": ["a", "b"], "label": []}])
    with pytest.raises(DocumentError, match=r"toy\.yaml: task 'toy', document 0: the target is an empty list"):
        prepare_task(config)


def test_exception_in_task_code_names_function_and_document(tmp_path):
    (tmp_path / "utils.py").write_text("def text(doc):\n    return doc['missing']\n", encoding="utf-8")
    config = toy_task(tmp_path, [{"q": "Q", "choices": ["a", "b"], "label": 0}], doc_to_text="!function utils.text")
    with pytest.raises(DocumentError, match=r"toy\.yaml: task 'toy', document 0: doc_to_text: "
                                            r"!function utils\.text raised KeyError: 'missing'"):
        prepare_task(config)


def test_function_returning_a_non_string_prompt_is_named(tmp_path):
    (tmp_path / "utils.py").write_text("def text(doc):\n    return 3\n", encoding="utf-8")
    config = toy_task(tmp_path, [{"q": "Q", "choices": ["a", "b"], "label": 0}], doc_to_text="!function utils.text")
    with pytest.raises(DocumentError, match=r"document 0: doc_to_text !function utils\.text gave an int, not a string"):
        prepare_task(config)


def test_exception_in_process_docs_names_the_function(tmp_path):
    (tmp_path / "utils.py").write_text("def process(dataset):\n    return dataset.map(lambda d: 1 / 0)\n", "utf-8")
    config = toy_task(tmp_path, [{"q": "Q", "choices": ["a", "b"], "label": 0}], process_docs="!function utils.process")
    with pytest.raises(DatasetError, match=r"toy\.yaml: task 'toy': process_docs !function utils\.process raised "
                                           r"ZeroDivisionError: division by zero \(split 'test'\)"):
        prepare_task(config)


def test_a_split_without_documents_is_an_error_not_an_empty_pass(tmp_path):
    (tmp_path / "utils.py").write_text("def none(dataset):\n    return dataset.filter(lambda d: False)\n", "utf-8")
    config = toy_task(tmp_path, [{"q": "Q", "choices": ["a", "b"], "label": 0}], process_docs="!function utils.none")
    with pytest.raises(DatasetError, match=r"toy\.yaml: task 'toy': split 'test' has no documents \(after process_docs"):
        prepare_task(config)


# --- continuations --------------------------------------------------------------------------------------------------


def test_empty_continuation_names_document_and_choice(tiny_loaded):
    from pytest_modelbench.scoring.causal import CausalLMScorer

    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer)
    task = prepared(("Q0", (" a", " b")), ("Q1", (" c", "")))
    with pytest.raises(DocumentError, match=r"toy\.yaml: task 'toy', document 1, choice 1 \(''\): "
                                            r"the continuation is empty after tokenization"):
        evaluate_task(task, scorer)


def test_over_long_continuation_names_document_and_choice(tiny_loaded):
    from pytest_modelbench.scoring.causal import CausalLMScorer

    scorer = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, max_length=8, fast=True)
    task = prepared(("Q0", (" a", " the quick brown fox jumps over the lazy dog near the river")))
    with pytest.raises(DocumentError, match=r"document 0, choice 1 \(' the quick.*'\): the continuation has \d+ "
                                            r"tokens, more than the model's maximum length 8"):
        evaluate_task(task, scorer)


# --- model folders and the score cache ------------------------------------------------------------------------------


def test_unreadable_file_in_a_model_folder_names_the_file(tiny_model, tmp_path):
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    (folder / "training_args.bin").symlink_to(tmp_path / "gone.bin")  # a dangling link, e.g. a pruned hub cache
    with pytest.raises(ModelLoadError, match=r"cannot read .*training_args\.bin"):
        load_model(resolve_model_source(str(folder)), dtype="float32")


@pytest.mark.parametrize("value", ["'abc'", "X'00'", "'1e999'"])
def test_score_cache_row_of_the_wrong_shape_is_a_miss_with_a_warning(tmp_path, value):
    from pytest_modelbench.scoring.score_cache import ScoreCache, request_key

    cache = ScoreCache(tmp_path / "scores.sqlite")
    good, bad = request_key("ns", "c", " good"), request_key("ns", "c", " bad")
    cache.put_many([(good, -1.5)])
    with sqlite3.connect(cache.path) as connection:
        connection.execute(f"INSERT INTO scores (key, value, created) VALUES (?, {value}, 0)", (bad,))
    with pytest.warns(UserWarning, match=r"scores\.sqlite: 1 row\(s\) hold a value that is not a finite number; recomputing"):
        found = cache.get_many([good, bad])
    assert found == {good: -1.5}
