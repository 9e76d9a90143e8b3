"""Task-code filters under --allow-task-code, with lm-eval 0.4.13's contract (api/filter.py FilterEnsemble,
filters/custom.py CustomFilter, api/task.py where filter_list is built): `function: custom` calls
filter_fn(resps, docs) once over every document; `function: !function module.Class` builds Class(**arguments) each
time the pipeline runs and calls its apply(resps, docs). What they return is checked: one entry per document, a list
of strings or a string; anything else names the file, the filter and the document."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task

UTILS = '''
import json
import pathlib

LOG = pathlib.Path(__file__).with_name("calls.jsonl")

def log(*entry):
    with LOG.open("a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\\n")

def record(resps, docs):
    log(resps, docs)
    return [[r.upper() + "|" + doc["answer"] for r in responses] for responses, doc in zip(resps, docs)]

def strings(resps, docs):
    return map(lambda responses: responses[0].strip(), resps)

def tuples(resps, docs):
    return tuple((r + "!",) for r, in resps)

def seen_after_take_first(resps, docs):
    log(list(resps))
    return [[text] for text in resps]

class Suffix:
    def __init__(self, suffix="?", twice=False):
        self.suffix = suffix * (2 if twice else 1)
        log("built", suffix, twice)

    def apply(self, resps, docs):
        return [[r + self.suffix for r in responses] for responses in resps]

def suffix_factory(suffix="#"):
    return Suffix(suffix)

def not_a_filter_factory():
    return 42

class NoApply:
    pass

def too_few(resps, docs):
    return [["x"]]

def a_string(resps, docs):
    return "not one per document"

def a_number_for_one(resps, docs):
    return [["a"]] + [7] + [["c"]] * (len(resps) - 2)

def a_list_of_numbers(resps, docs):
    return [[1, 2]] * len(resps)

def raises(resps, docs):
    raise ValueError("filter broke")

def failing_generator(resps, docs):
    yield ["a"]
    raise KeyError("half way")

def one_argument(resps):
    return resps

def lm_eval_inside(resps, docs):
    from lm_eval.filters.extraction import RegexFilter
    return resps
'''
ROWS = [{"question": f"Question {i}?", "answer": f"a{i}"} for i in range(4)]


def write_task(tmp_path: Path, filter_list: str, utils: str = UTILS, extra: str = "") -> Path:
    (tmp_path / "utils.py").write_text(utils, encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (tmp_path / "task.yaml").write_text(textwrap.dedent("""
        task: custom_filters
        dataset_path: json
        dataset_kwargs:
          data_files: {test: test.jsonl}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{question}}"
        doc_to_target: answer
        """) + textwrap.dedent(extra) + "filter_list:\n" + textwrap.indent(textwrap.dedent(filter_list), "  "),
        encoding="utf-8")
    return tmp_path / "task.yaml"


class Answers:
    """A backend that generates ' answer <doc_id> ' for every document."""

    def generate_task(self, prepared):
        return [f" answer {doc.doc_id} " for doc in prepared.documents]


def evaluate(path: Path):
    config = load_task_config(path, allow_task_code=True)
    return evaluate_task(prepare_task(config, data_dir=path.parent), Answers())


def calls(tmp_path: Path) -> list:
    """What the task code was called with, one entry per call (utils.py logs them)."""
    log = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


LM_EVAL_INSTALLED = importlib.util.find_spec("lm_eval") is not None


def test_custom_filter_fn_is_called_once_with_every_documents_responses_and_the_documents(tmp_path):
    evaluation = evaluate(write_task(tmp_path, """
        - name: custom
          filter:
            - function: custom
              filter_fn: !function utils.record
            - function: take_first
        """))
    (resps, docs), = calls(tmp_path)  # one call for the whole task
    assert resps == [[f" answer {i} "] for i in range(4)]  # per document its list of responses (repeats: 1)
    assert docs == ROWS  # the documents, in order
    assert [a["custom"] for a in evaluation.answers] == [f" ANSWER {i} |a{i}" for i in range(4)]


def test_custom_filter_sees_repeats_copies_of_the_generation(tmp_path):
    evaluation = evaluate(write_task(tmp_path, """
        - name: custom
          filter:
            - function: custom
              filter_fn: !function utils.record
        """, extra="repeats: 3\n"))
    (resps, _), = calls(tmp_path)
    assert resps == [[f" answer {i} "] * 3 for i in range(4)]
    assert evaluation.answers[1]["custom"] == " ANSWER 1 |a1"  # no take_first: the first of the list


def test_a_custom_filter_may_return_one_string_per_document_which_is_the_answer(tmp_path):
    """darija_bench's strip: map(lambda r: r[0].strip(), resps), with no take_first after it. The string is the
    answer, not a list whose first character would be taken."""
    evaluation = evaluate(write_task(tmp_path, """
        - name: stripped
          filter:
            - function: custom
              filter_fn: !function utils.strings
        - name: then_first
          filter:
            - function: custom
              filter_fn: !function utils.strings
            - function: take_first
        - name: tuples
          filter:
            - function: custom
              filter_fn: !function utils.tuples
        """))
    assert [a["stripped"] for a in evaluation.answers] == [f"answer {i}" for i in range(4)]
    assert [a["then_first"] for a in evaluation.answers] == ["a"] * 4  # lm-eval's take_first of a string: r[0]
    assert [a["tuples"] for a in evaluation.answers] == [f" answer {i} !" for i in range(4)]


def test_after_take_first_a_custom_filter_gets_each_documents_response_as_a_string(tmp_path):
    evaluation = evaluate(write_task(tmp_path, """
        - name: p
          filter:
            - function: take_first
            - function: custom
              filter_fn: !function utils.seen_after_take_first
        """))
    assert calls(tmp_path) == [[[f" answer {i} " for i in range(4)]]]
    assert evaluation.answers[2]["p"] == " answer 2 "


def test_a_filter_class_is_built_with_its_arguments_each_run_and_applied_to_all_documents(tmp_path):
    path = write_task(tmp_path, """
        - name: cls
          filter:
            - function: !function utils.Suffix
              suffix: "!"
              twice: true
            - function: take_first
        - name: default_arguments
          filter:
            - function: !function utils.Suffix
        - name: factory
          filter:
            - function: !function utils.suffix_factory
              suffix: "#"
            - function: regex
              regex_pattern: "(\\\\d#)"
            - function: take_first
        """)
    config = load_task_config(path, allow_task_code=True)
    prepared = prepare_task(config, data_dir=tmp_path)
    evaluation = evaluate_task(prepared, Answers())
    assert [a["cls"] for a in evaluation.answers] == [f" answer {i} !!" for i in range(4)]
    assert [a["default_arguments"] for a in evaluation.answers] == [f" answer {i} ?" for i in range(4)]
    assert [a["factory"] for a in evaluation.answers] == ["[invalid]"] * 4  # the space before '#' stays
    built = [["built", "!", True], ["built", "?", False], ["built", "#", False]]
    assert calls(tmp_path) == built  # one instance per pipeline run, nothing built at collection
    evaluate_task(prepared, Answers())
    assert calls(tmp_path) == built * 2  # built anew on the next run, as in each lm-eval FilterEnsemble.apply


def test_task_code_filters_are_refused_without_allow_task_code_naming_the_option(tmp_path):
    custom = write_task(tmp_path, """
        - name: p
          filter:
            - function: custom
              filter_fn: !function utils.record
        """)
    with pytest.raises(TaskConfigError, match=r"task.yaml: key 'filter_list\[0\].filter\[0\].filter_fn' uses "
                                              r"'!function utils.record'.*pass --allow-task-code to allow it"):
        load_task_config(custom)
    cls = write_task(tmp_path, """
        - name: p
          filter:
            - function: take_first
            - function: !function utils.Suffix
        """)
    with pytest.raises(TaskConfigError, match=r"task.yaml: key 'filter_list\[0\].filter\[1\].function' uses "
                                              r"'!function utils.Suffix'.*pass --allow-task-code to allow it"):
        load_task_config(cls)


@pytest.mark.parametrize("filter_list, message", [
    ("- {name: p, filter: [{function: custom}]}",
     r"key 'filter_list\[0\].filter\[0\].filter_fn': filter 'custom' needs 'filter_fn: !function module.name'"),
    ("- {name: p, filter: [{function: custom, filter_fn: utils.record}]}",
     r"filter 'custom' needs 'filter_fn: !function module.name', a function of \(resps, docs\), got 'utils.record'"),
    ("- {name: p, filter: [{function: custom, filter_fn: !function utils.record, k: 2}]}",
     r"key 'filter_list\[0\].filter\[0\].k' is not an argument of filter 'custom'"),
    ("- {name: p, filter: [{function: custom, filter_fn: !function utils.one_argument}]}",
     r"filter_fn': utils.one_argument cannot be called as filter_fn\(resps, docs\)"),
    ("- {name: p, filter: [{function: !function utils.NoApply}]}",
     r"key 'filter_list\[0\].filter\[0\].function': class utils.NoApply is not a filter: it has no apply"),
    ("- {name: p, filter: [{function: !function utils.Suffix, prefix: x}]}",
     r"key 'filter_list\[0\].filter\[0\]': filter utils.Suffix does not take these arguments \(prefix\)"),
    ("- {name: p, filter: [{function: !function utils.record}]}",
     r"utils.record is a function that cannot be called with no arguments.*'function: custom' with "
     r"'filter_fn: !function utils.record'"),
    ("- {name: p, filter: [{function: !function utils.missing}]}", r"cannot load utils.missing"),
])
def test_bad_task_code_filters_are_collection_errors_naming_file_and_key(tmp_path, filter_list, message):
    with pytest.raises(TaskConfigError, match=r"task.yaml: .*" + message):
        load_task_config(write_task(tmp_path, filter_list), allow_task_code=True)


def custom(function):
    return f"- {{name: p, filter: [{{function: custom, filter_fn: !function utils.{function}}}, " \
           "{function: take_first}]}"


@pytest.mark.parametrize("filter_list, message", [
    (custom("too_few"), r"filter 'p': custom filter !function utils.too_few returned 1 entries for 4 documents; it "
                        r"must return one per document"),
    (custom("a_string"), r"filter 'p': custom filter !function utils.a_string returned str 'not one per document', "
                         r"not one entry per document"),
    (custom("a_number_for_one"), r"document 1, filter 'p': custom filter !function utils.a_number_for_one returned "
                                 r"int 7 for this document, not its responses"),
    (custom("a_list_of_numbers"), r"document 0, filter 'p': custom filter !function utils.a_list_of_numbers "
                                  r"returned the responses \[1, 2\], which hold int 1; a response must be a string"),
    (custom("raises"), r"filter 'p': custom filter !function utils.raises raised ValueError: filter broke"),
    (custom("failing_generator"), r"filter 'p': custom filter !function utils.failing_generator: reading its result "
                                  r"raised KeyError: 'half way'"),
    (custom("lm_eval_inside"), r"filter 'p': custom filter !function utils.lm_eval_inside: it imports module "
                               r"'lm_eval.*pytest-modelbench\[lmeval-task-code\]"),
    ("- {name: p, filter: [{function: !function utils.not_a_filter_factory}]}",
     r"filter 'p': filter !function utils.not_a_filter_factory gave int 42, which has no apply\(resps, docs\) "
     r"method"),
])
def test_wrong_output_of_task_code_filters_names_file_filter_and_document(tmp_path, filter_list, message):
    if "lm_eval" in message and LM_EVAL_INSTALLED:
        pytest.skip("lm-eval is installed here, so its import succeeds")
    with pytest.raises(DocumentError, match=r"task.yaml: task 'custom_filters', " + message):
        evaluate(write_task(tmp_path, filter_list))


def test_a_filter_class_that_imports_lm_eval_names_the_extra(tmp_path):
    path = write_task(tmp_path, "- {name: p, filter: [{function: !function utils.Suffix}]}",
                      utils="from lm_eval.filters.extraction import RegexFilter\n" + UTILS)
    if LM_EVAL_INSTALLED:
        assert evaluate(path).answers[0]["p"] == " answer 0 ?"
        return
    with pytest.raises(TaskConfigError, match=r"key 'filter_list\[0\].filter\[0\].function': cannot load "
                                              r"utils.Suffix: it imports module 'lm_eval'.*lmeval-task-code"):
        load_task_config(path, allow_task_code=True)


def test_builtin_filters_on_a_custom_filters_output_and_the_metrics_per_pipeline(tmp_path):
    evaluation = evaluate(write_task(tmp_path, """
        - name: p
          filter:
            - function: custom
              filter_fn: !function utils.record
            - function: regex
              regex_pattern: "\\\\|(a\\\\d)"
            - function: take_first
        """))
    assert [a["p"] for a in evaluation.answers] == [f"a{i}" for i in range(4)]
    np.testing.assert_array_equal(evaluation.scores.per_document["exact_match,p"], [1.0] * 4)
