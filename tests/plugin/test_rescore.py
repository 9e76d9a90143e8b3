"""--rescore-from RECORD: a run recorded with --run-record is re-scored and re-gated with the task's current filters
and metrics without loading the model (the backend's factory and the local loader raise if called); a task whose
prompt changed is refused naming the task and the document; a damaged or missing record is one usage error."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET

import pytest

from tests.plugin.gate_project import gate_entries

# A toy model per --model: `good` answers every product right; `cand` is one off on every other question. Its
# factory raises under MODELBENCH_TEST_NO_MODEL, so a run that builds the model fails.
BACKEND = '''
import os

from pytest_modelbench.scoring.backend import BackendInfo


class ToyModel:
    def __init__(self, model):
        self.model = model

    def product(self, context):
        numbers = [int(word.strip("?")) for word in context.split() if word.strip("?").isdigit()]
        a, b = numbers[-2:]
        return a * b + (1 if self.model == "cand" and a % 2 == 0 else 0)

    def generate(self, requests, on_batch=None):
        return [f" The answer is {self.product(r.context)}." for r in requests]

    def loglikelihoods(self, requests, on_batch=None):
        return [-abs(self.product(r.context) - int(r.continuation)) - 0.5 for r in requests]

    def describe(self):
        return BackendInfo(self.model, f"toy:{self.model}", "causal", "", "cpu")


def make(model, model_args, device):
    if os.environ.get("MODELBENCH_TEST_NO_MODEL"):
        raise AssertionError("MODEL FACTORY CALLED")
    return ToyModel(model)
'''
ROWS = [{"q": f"What is {a} times {b}?", "answer": str(a * b), "choices": [str(a * b), str(a * b + 1)], "label": 0}
        for a in range(2, 10) for b in range(3, 8)]
GENERATION = """\
task: products
dataset_path: json
dataset_kwargs:
  data_files: {test: data.jsonl}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{q}}\\nAnswer:"
doc_to_target: answer
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 16
filter_list:
  - name: number
    filter:
      - function: regex
        regex_pattern: "%s"
      - function: take_first
metric_list:
  - metric: exact_match
"""
BUGGY, FIXED = "answer: (\\\\d+)", "answer is (\\\\d+)"  # the buggy pattern never matches: every answer is invalid
CHOICE = """\
task: products_mc
dataset_path: json
dataset_kwargs:
  data_files: {test: data.jsonl}
test_split: test
output_type: multiple_choice
doc_to_text: "%s"
doc_to_target: label
doc_to_choice: choices
metric_list:
  - metric: %s
"""


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    (pytester.path / "toymodel.py").write_text(textwrap.dedent(BACKEND), encoding="utf-8")
    suite = pytester.path / "suites" / "arith"
    suite.mkdir(parents=True)
    (suite / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    return pytester


def write_generation(project, pattern, prompt="Question: {{q}}\\nAnswer:"):
    text = GENERATION % pattern
    (project.path / "suites" / "arith" / "products.yaml").write_text(
        text.replace("Question: {{q}}\\nAnswer:", prompt), encoding="utf-8")


def run(project, model, *args):
    """A run of the toy model `model` (None: no --model)."""
    model_args = () if model is None else (f"--model={model}",)
    return project.runpytest("--backend=toymodel:make", *model_args, "-p", "no:cacheprovider", *args)


def no_model(monkeypatch):
    """From here on, building or loading any model fails the run."""
    monkeypatch.setenv("MODELBENCH_TEST_NO_MODEL", "1")

    def refuse(*args, **kwargs):
        raise AssertionError("LOCAL MODEL LOADED")

    monkeypatch.setattr("pytest_modelbench.run.runner.load_model", refuse)
    monkeypatch.setattr("pytest_modelbench.run.runner.load_tokenizer", refuse)


def verdicts(junit):
    return {case.get("name"): [prop.get("value") for prop in case.iter("property")
                               if prop.get("name") == "modelbench.gate"]
            for case in ET.parse(junit).getroot().iter("testcase")}


def test_a_filter_fixed_after_a_run_re_gates_from_the_record_as_a_fresh_run_does(project, monkeypatch):
    write_generation(project, BUGGY)
    run(project, "good", "--snapshot-update").assert_outcomes(passed=1)
    record = project.path / "cand.json"
    run(project, "cand", f"--run-record={record}").assert_outcomes(passed=1)  # the buggy filter hides the drop
    write_generation(project, FIXED)
    run(project, "good", "--snapshot-update").assert_outcomes(passed=1)  # re-baselined with the fixed filter

    fresh_junit, fresh_json = project.path / "fresh.xml", project.path / "fresh.json"
    run(project, "cand", f"--junitxml={fresh_junit}", f"--results-json={fresh_json}").assert_outcomes(failed=1)
    no_model(monkeypatch)
    junit, results = project.path / "rescored.xml", project.path / "rescored.json"
    rescored = run(project, "cand", f"--rescore-from={record}", f"--junitxml={junit}", f"--results-json={results}")
    rescored.assert_outcomes(failed=1)
    assert rescored.ret == 1
    assert gate_entries(junit) == gate_entries(fresh_junit)
    assert gate_entries(junit)["products"][("exact_match,number", None)] == "regressed"
    fresh, again = json.loads(fresh_json.read_text()), json.loads(results.read_text())
    assert again["results"] == fresh["results"] and again["results"]["arith/products"]["exact_match,number"] == 0.5
    assert again["gate"] == fresh["gate"]
    assert (fresh["config"]["rescored_from"], again["config"]["rescored_from"]) == ([], [str(record)])
    rescored.stdout.fnmatch_lines([f"modelbench: re-scored from {record} (model 'cand', weights toy:cand)*"])
    rescored.stdout.no_fnmatch_line("*MODEL FACTORY CALLED*")
    rescored.stdout.no_fnmatch_line("*LOCAL MODEL LOADED*")


def test_a_prompt_changed_since_the_run_is_refused_naming_the_task_and_document(project, monkeypatch):
    write_generation(project, FIXED)
    run(project, "good", "--snapshot-update").assert_outcomes(passed=1)
    record = project.path / "good.json"
    run(project, "good", f"--run-record={record}").assert_outcomes(passed=1)
    baseline = project.path / "baselines" / "default" / "arith" / "products.json"
    stored = baseline.read_text()
    write_generation(project, FIXED, prompt="Q: {{q}}\\nA:")
    no_model(monkeypatch)
    results = project.path / "rescored.json"
    refused = run(project, "good", f"--rescore-from={record}", "--snapshot-update", f"--results-json={results}")
    refused.assert_outcomes(failed=1)
    assert refused.ret != 0
    refused.stdout.fnmatch_lines([f"*products.yaml: task 'products', document 0: its prompt differs from the one "
                                  f"recorded in {record}*"])
    refused.stdout.no_fnmatch_line("*Traceback*")
    assert baseline.read_text() == stored and not results.exists()


def test_a_multiple_choice_run_replays_its_log_likelihoods_under_a_fixed_metric(project, monkeypatch):
    task = project.path / "suites" / "arith" / "products_mc.yaml"
    task.write_text(CHOICE % ("{{q}}", "acc"), encoding="utf-8")
    record = project.path / "cand.json"
    run(project, "cand", "--score-only", f"--run-record={record}").assert_outcomes(passed=1)
    task.write_text(CHOICE % ("{{q}}", "acc_norm"), encoding="utf-8")
    fresh = project.path / "fresh.json"
    run(project, "cand", "--score-only", f"--results-json={fresh}").assert_outcomes(passed=1)
    no_model(monkeypatch)
    results = project.path / "rescored.json"
    run(project, None, "--score-only", f"--rescore-from={record}", f"--results-json={results}").assert_outcomes(
        passed=1)  # the record names the model
    rescored = json.loads(results.read_text())["results"]["arith/products_mc"]
    assert rescored == json.loads(fresh.read_text())["results"]["arith/products_mc"]
    assert "acc_norm" in rescored and rescored["acc_norm"] == 0.5
    task.write_text(CHOICE % ("Compute: {{q}}", "acc_norm"), encoding="utf-8")
    refused = run(project, "cand", "--score-only", f"--rescore-from={record}")
    refused.assert_outcomes(failed=1)
    refused.stdout.fnmatch_lines(["*task 'products_mc', document 0: its prompt differs*"])


@pytest.mark.parametrize("damage", ["missing", "edited", "other model"])
def test_a_missing_or_damaged_record_or_another_model_is_one_usage_error(project, monkeypatch, damage):
    (project.path / "suites" / "arith" / "products_mc.yaml").write_text(CHOICE % ("{{q}}", "acc"), encoding="utf-8")
    record = project.path / "cand.json"
    run(project, "cand", "--score-only", f"--run-record={record}").assert_outcomes(passed=1)
    model = "cand"
    if damage == "missing":
        record.unlink()
        message = f"ERROR: --rescore-from {record}: no such run record"
    elif damage == "edited":
        record.write_text(record.read_text().replace('"toy:cand"', '"toy:good"'), encoding="utf-8")
        message = f"ERROR: --rescore-from {record}: its content does not match its digest*"
    else:
        model = "good"
        message = f"ERROR: --rescore-from {record}: it is a run of model 'cand', not of --model 'good'*"
    no_model(monkeypatch)
    result = run(project, model, "--score-only", f"--rescore-from={record}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
