"""`--backend MODULE:FACTORY`: a backend of the user's own, written only against the documented seam
(scoring/backend.py) in a project of its own, runs a multiple_choice task end to end through pytest; a bad
MODULE:FACTORY is one clear error naming the option."""

from __future__ import annotations

import json
import textwrap

import pytest

# It knows three of the four gold answers and prefers a wrong one for the fourth: accuracy 3/4 by construction.
BACKEND = '''
from pytest_modelbench.scoring.backend import BackendInfo

PREFERRED = {"2 + 2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "blue", "Largest planet?": "Saturn"}


class KnowingBackend:
    """Log-likelihood 0 for the answer it prefers, -1 per character for any other."""

    def __init__(self, model, device):
        self.model, self.device = model, device

    def loglikelihoods(self, requests, on_batch=None):
        return [self.value(r.context.splitlines()[0].removeprefix("Question: "), r.continuation) for r in requests]

    def value(self, question, answer):
        return 0.0 if PREFERRED[question] == answer.strip() else -float(len(answer))

    def describe(self):
        return BackendInfo(self.model, "knowing:v1", "causal", "", self.device)


def make(model, model_args, device):
    return KnowingBackend(model, device)
'''
ROWS = [
    {"q": "2 + 2?", "choices": ["3", "4", "5"], "label": 1},
    {"q": "Capital of France?", "choices": ["Paris", "Rome"], "label": 0},
    {"q": "Colour of the sky?", "choices": ["green", "blue"], "label": 1},
    {"q": "Largest planet?", "choices": ["Jupiter", "Saturn"], "label": 0},
]
TASK = """\
task: toy
dataset_path: json
dataset_kwargs:
  data_files: {test: test.jsonl}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{q}}\\nAnswer:"
doc_to_target: label
doc_to_choice: choices
"""


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    (pytester.path / "mybackend.py").write_text(textwrap.dedent(BACKEND), encoding="utf-8")
    suite = pytester.path / "suites" / "toy"
    suite.mkdir(parents=True)
    (suite / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (suite / "toy.yaml").write_text(TASK, encoding="utf-8")
    return pytester


def test_a_backend_of_ones_own_runs_a_multiple_choice_task_through_pytest(project):
    out = project.path / "results.json"
    result = project.runpytest("--backend=mybackend:make", "--model=anything", "--score-only", "suites/toy",
                               f"--results-json={out}")
    result.assert_outcomes(passed=1)
    document = json.loads(out.read_text())
    [block] = document["results"].values()
    assert block["acc"] == 0.75
    assert document["config"]["model"] == "anything"


@pytest.mark.parametrize(("spec", "message"), [
    ("nope:make", "--backend nope:make: no module named 'nope' on sys.path or in the rootdir"),
    ("mybackend:nothing", "--backend mybackend:nothing: module mybackend (*mybackend.py) has no callable 'nothing'"),
    ("mybackend", "--backend mybackend: expected MODULE:FACTORY, e.g. --backend mybackend:make"),
])
def test_a_bad_backend_is_one_clear_error_naming_the_option(project, spec, message):
    result = project.runpytest(f"--backend={spec}", "--model=anything", "--score-only", "suites/toy")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{message}*"])
    result.stdout.no_fnmatch_line("*Traceback*")
