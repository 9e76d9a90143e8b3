"""Integrity before quality (docs/integrity.md), through pytest with backends of the user's own (--backend): a backend
that cannot score a fifth of one task's requests leaves that task in `error` (not regressed) with its counts, gates
the healthy task beside it, exits 7 (the merge of its run record too) and caches nothing of the failed requests, so
the re-run asks the backend for exactly those; a generation task whose answers stop parsing regresses on its
invalid_output entry, and the failure (and the merge of its record) says why; a task of any output type with no
document scored is in `error`."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ElementTree

import jsonschema
import pytest

from pytest_modelbench.__main__ import main
from pytest_modelbench.gate.decision import EXIT_STATUS_INTEGRITY
from pytest_modelbench.outputs.results import RESULTS_SCHEMA

# Knows every answer; a question listed in failing.json is a request it cannot score or answer (as after a server's
# HTTP 500s); one listed in failing_once.json times out the first time each of its requests is asked (the re-send for
# an exact repeat of its document is answered).
BACKEND = '''
import json
from pathlib import Path

from pytest_modelbench.scoring.backend import BackendInfo, Unscored

HERE = Path(__file__).parent


def _failing(name="failing.json"):
    return set(json.loads((HERE / name).read_text())) if (HERE / name).exists() else set()


class FlakyBackend:
    def __init__(self, model):
        self.model = model
        self.asked = set()
        self.served = 0

    def loglikelihoods(self, requests, on_batch=None):
        failing, once = _failing(), _failing("failing_once.json")
        values = []
        with open(HERE / "asked.jsonl", "a", encoding="utf-8") as log:
            for request in requests:
                question, _, gold = request.context.partition("|")
                log.write(json.dumps([question, request.continuation]) + "\\n")
                first = (request.context, request.continuation) not in self.asked
                self.asked.add((request.context, request.continuation))
                if question in failing:
                    values.append(Unscored("HTTP 500 from the model server"))
                elif question in once and first:
                    values.append(Unscored("timed out"))
                else:
                    values.append(0.0 if request.continuation.strip() == gold.split("\\n")[0] else -1.0)
        if (HERE / "raise_after.txt").exists():
            self._serve_until_it_raises(requests, values, on_batch, int((HERE / "raise_after.txt").read_text()))
        return values

    def _serve_until_it_raises(self, requests, values, on_batch, limit):
        """Passes the values on in batches of 4 and raises, as an HTTP client whose server went away, once it has
        served `limit` requests of the flaky task."""
        for start in range(0, len(requests), 4):
            flaky = sum(r.context.startswith("flaky-") for r in requests[start:start + 4])
            if flaky and self.served + flaky > limit:
                raise ConnectionError("HTTPConnectionPool(host='model-server', port=8000): connection refused")
            self.served += flaky
            on_batch(list(range(start, min(start + 4, len(requests)))), values[start:start + 4])

    def generate(self, requests, on_batch=None):
        fmt = (HERE / "format.txt").read_text() if (HERE / "format.txt").exists() else "Answer: {}"
        failing = _failing()
        return [Unscored("HTTP 500 from the model server") if question in failing else fmt.format(gold.split("\\n")[0])
                for question, _, gold in (request.context.partition("|") for request in requests)]

    def greedy_loglikelihoods(self, requests, on_batch=None):
        failing = _failing()
        return [Unscored("HTTP 500 from the model server") if r.context.partition("|")[0] in failing else (-1.0, True)
                for r in requests]

    def rolling_loglikelihoods(self, requests, on_batch=None):
        failing = _failing()
        return [Unscored("HTTP 500 from the model server") if r.text in failing else -5.0 for r in requests]

    def describe(self):
        return BackendInfo(self.model, "flaky:v1", "causal", "", "cpu")

    def cache_namespace(self, shared_tokens):
        return "flaky:v1"

    def generation_cache_namespace(self):
        return None


def make(model, model_args, device):
    return FlakyBackend(model)
'''
CHOICE = """\
doc_to_text: "{{q}}|{{gold}}\\nAnswer:"
doc_to_target: 0
doc_to_choice: choices
modelbench:
  category_field: group
"""
# Each toy task's YAML after its common head (task_yaml): its output type and the rest.
TASKS = {
    "healthy": ("multiple_choice", CHOICE),
    "flaky": ("multiple_choice", CHOICE),
    "letters": ("generate_until", """\
doc_to_text: "{{q}}|{{gold}}\\n"
doc_to_target: gold
generation_kwargs:
  until: ["\\n"]
filter_list:
  - name: strict
    filter:
      - function: regex
        regex_pattern: "Answer: ([A-D])"
      - function: take_first
metric_list:
  - metric: exact_match
"""),
    "target": ("loglikelihood", """\
doc_to_text: "{{q}}|"
doc_to_target: gold
metric_list:
  - metric: acc
"""),
    "text": ("loglikelihood_rolling", """\
doc_to_text: ""
doc_to_target: "{{q}}"
metric_list:
  - metric: word_perplexity
"""),
}


def task_yaml(name: str) -> str:
    output_type, rest = TASKS[name]
    return (f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files: {{test: {name}.jsonl}}\n"
            f"test_split: test\noutput_type: {output_type}\n{rest}")


DOCUMENTS = 20


def rows(name: str, documents: int = DOCUMENTS) -> list[dict]:
    return [{"q": f"{name}-{i}", "gold": "ABCD"[i % 4], "choices": ["ABCD"[i % 4], "ABCD"[(i + 1) % 4]],
             "group": f"g{i % 2}"} for i in range(documents)]


def write_project(pytester, monkeypatch, names=tuple(TASKS)):
    """The toy suite's tasks `names`, the backend beside them and a score cache of their own."""
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    (pytester.path / "mybackend.py").write_text(textwrap.dedent(BACKEND), encoding="utf-8")
    suite = pytester.path / "suites" / "toy"
    suite.mkdir(parents=True)
    for name in names:
        (suite / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(name)), encoding="utf-8")
        (suite / f"{name}.yaml").write_text(task_yaml(name), encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")


@pytest.fixture
def project(pytester, monkeypatch):
    write_project(pytester, monkeypatch)
    return pytester


def run(project, *args: str):
    return project.runpytest("-p", "no:cacheprovider", "--backend=mybackend:make", "--model=m", *args)


def asked(project) -> list[list[str]]:
    log = project.path / "asked.jsonl"
    requests = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return requests


def test_failed_requests_are_the_runs_error_and_the_rerun_scores_only_them(project):
    run(project, "--snapshot-update", "--no-cache", "-k", "healthy or flaky").assert_outcomes(passed=2)
    asked(project)
    failing = [f"flaky-{i}" for i in range(0, DOCUMENTS, 5)]  # a fifth of its requests, two in each group
    (project.path / "failing.json").write_text(json.dumps(failing))
    out, junit, record = (project.path / name for name in ("r.json", "junit.xml", "record.json"))
    result = run(project, "-k", "healthy or flaky", f"--results-json={out}", f"--junitxml={junit}",
                 f"--run-record={record}", "--md-report=gate.md", "--html-report=gate.html")

    assert result.ret == EXIT_STATUS_INTEGRITY
    result.assert_outcomes(passed=1, failed=1)
    document = json.loads(out.read_text())
    jsonschema.validate(document, json.loads(RESULTS_SCHEMA.read_text()))
    gate = document["gate"]
    assert gate["toy/healthy"]["status"] == "pass"  # still gated beside it
    flaky = gate["toy/flaky"]
    assert flaky["status"] == "error" and flaky["entries"] == []
    counts = flaky["integrity"]
    assert (counts["documents"], counts["unscored"]) == (DOCUMENTS, len(failing))
    assert counts["by_category"] == {"g0": {"documents": 10, "unscored": 2, "invalid_outputs": 0},
                                     "g1": {"documents": 10, "unscored": 2, "invalid_outputs": 0}}
    assert counts["unscored_examples"][0] == {"doc_id": 0, "category": "g0",
                                              "problem": "HTTP 500 from the model server"}
    assert document["outcome"]["exit_status"] == EXIT_STATUS_INTEGRITY
    output = result.stdout.str()
    assert "error (the run, not the model): task 'toy/flaky': 4 of 20 documents unscored (20.0%, limit 1.0%)" \
        in output
    assert "toy/flaky: retried 0 requests, 4 of 20 documents unscored" in output
    markdown, page = ((project.path / name).read_text() for name in ("gate.md", "gate.html"))
    assert "| toy/flaky | error |" in markdown and ">error</span>" in page
    for text in (markdown, page):  # every report: the outcome, the counts, a document
        assert "retried 0 requests, 4 of 20 documents unscored" in text and "HTTP 500 from the model server" in text
    properties = {p.get("name") for p in ElementTree.parse(junit).iter("property")}
    assert "modelbench.gate-integrity" in properties
    assert main(["merge", str(record), "--", "-k", "healthy or flaky"]) == EXIT_STATUS_INTEGRITY  # as the run exited
    # re-scored from its record, the task's unscored documents stay unscored: the same error, the backend not asked
    rescored = run(project, "-k", "healthy or flaky", f"--rescore-from={record}", "--results-json=rescored.json")
    assert rescored.ret == EXIT_STATUS_INTEGRITY
    again = json.loads((project.path / "rescored.json").read_text())["gate"]
    assert again["toy/flaky"]["status"] == "error" and again["toy/flaky"]["integrity"]["unscored"] == len(failing)
    assert again["toy/healthy"]["status"] == "pass"

    first_asked = asked(project)
    assert len(first_asked) == 2 * 2 * DOCUMENTS  # two tasks, two choices each, nothing cached yet
    (project.path / "failing.json").unlink()
    rerun = run(project, "-k", "healthy or flaky")
    rerun.assert_outcomes(passed=2)
    assert rerun.ret == 0
    # nothing of a failed request was cached, everything else was: the backend is asked for those requests only
    assert sorted(q for q, _ in asked(project)) == sorted(2 * failing)


def test_a_backend_that_raises_halfway_is_the_runs_error_and_the_rerun_scores_only_what_it_never_served(project):
    """Issue 50: a backend wrapping an HTTP client raises ConnectionError after serving half of one task's requests
    (through on_batch): that task is `error` naming the exception and the documents scored, whatever its limits; the
    other task is gated; exit 7, the results JSON written, no traceback; what was served is cached, so the re-run with
    the backend healthy asks only for the rest."""
    run(project, "--snapshot-update", "--no-cache", "-k", "healthy or flaky").assert_outcomes(passed=2)
    asked(project)
    (project.path / "raise_after.txt").write_text("20")  # of the flaky task's 40 requests: documents 0-9 served
    out = project.path / "r.json"
    result = run(project, "-k", "healthy or flaky", "--max-unscored=1", f"--results-json={out}")

    assert result.ret == EXIT_STATUS_INTEGRITY
    result.assert_outcomes(passed=1, failed=1)
    document = json.loads(out.read_text())
    jsonschema.validate(document, json.loads(RESULTS_SCHEMA.read_text()))
    assert document["gate"]["toy/healthy"]["status"] == "pass"
    flaky = document["gate"]["toy/flaky"]
    assert flaky["status"] == "error" and flaky["entries"] == []
    failure = ("the backend raised ConnectionError: HTTPConnectionPool(host='model-server', port=8000): connection "
               "refused")
    assert flaky["integrity"]["backend_failure"] == failure
    assert flaky["integrity"]["unscored"] == DOCUMENTS // 2
    output = result.stdout.str()
    assert f"error (the run, not the model): task 'toy/flaky': {failure} while scoring the task (10 of 20 " \
           "documents scored)" in output
    assert "Traceback" not in output and "raise ConnectionError" not in output
    asked(project)

    (project.path / "raise_after.txt").unlink()
    rerun = run(project, "-k", "healthy or flaky")
    assert rerun.ret == 0
    rerun.assert_outcomes(passed=2)
    assert sorted(q for q, _ in asked(project)) == sorted(2 * [f"flaky-{i}" for i in range(DOCUMENTS // 2, DOCUMENTS)])


def test_a_limit_from_the_command_line_or_the_yaml_admits_a_few_unscored_documents(project):
    run(project, "--snapshot-update", "--no-cache", "-k", "flaky").assert_outcomes(passed=1)
    (project.path / "failing.json").write_text(json.dumps(["flaky-3"]))
    assert run(project, "-k", "flaky", "--no-cache").ret == EXIT_STATUS_INTEGRITY
    out = project.path / "r.json"
    result = run(project, "-k", "flaky", "--no-cache", "--max-unscored=0.1", f"--results-json={out}")
    result.assert_outcomes(passed=1)  # 1 of 20 (1 of 10 in its group) within 10%: compared on the other 19
    flaky = json.loads(out.read_text())["gate"]["toy/flaky"]
    assert flaky["status"] == "pass" and flaky["n_documents"] == DOCUMENTS - 1
    assert {e["n"] for e in flaky["entries"] if e["category"] is None} == {DOCUMENTS - 1}
    yaml = project.path / "suites" / "toy" / "flaky.yaml"
    yaml.write_text(yaml.read_text() + "  gate:\n    max_unscored: 0.1\n")
    run(project, "-k", "flaky", "--no-cache").assert_outcomes(passed=1)
    assert run(project, "-k", "flaky", "--no-cache", "--max-unscored=0").ret == EXIT_STATUS_INTEGRITY


def test_only_a_run_that_writes_a_baseline_needs_every_document_scored(project):
    """Issue 49, 4: a task whose baseline exists and is not rewritten is judged as in a plain run, under
    --snapshot-update-new-only and --snapshot-update alike; a baseline about to be written (missing, or not comparable)
    is written only from a run that scored every document, whatever the limit."""
    run(project, "--snapshot-update", "--no-cache", "-k", "flaky").assert_outcomes(passed=1)
    baseline = next((project.path / "baselines").rglob("flaky.json"))
    recorded = baseline.read_text()
    (project.path / "failing.json").write_text(json.dumps(["flaky-3"]))
    for update in ("--snapshot-update-new-only", "--snapshot-update"):
        result = run(project, "-k", "flaky", "--no-cache", "--max-unscored=0.1", update)
        assert result.ret == 0, update  # 1 of 20 within 10%, inside the band: nothing to write
    assert baseline.read_text() == recorded

    yaml = project.path / "suites" / "toy" / "flaky.yaml"
    yaml.write_text(yaml.read_text().replace("\\nAnswer:", "\\nAnswer?"))  # other prompts: re-baseline required
    result = run(project, "-k", "flaky", "--no-cache", "--max-unscored=0.1", "--snapshot-update")
    assert result.ret == EXIT_STATUS_INTEGRITY
    assert "1 of 20 documents unscored, and a baseline is recorded only from a run that scored every document" \
        in result.stdout.str()
    assert baseline.read_text() == recorded
    baseline.unlink()
    result = run(project, "-k", "flaky", "--no-cache", "--max-unscored=0.1", "--snapshot-update-new-only")
    assert result.ret == EXIT_STATUS_INTEGRITY and not baseline.exists()


def test_an_unscored_first_copy_of_a_repeated_document_leaves_out_its_own_key_everywhere(project):
    """Issue 49, 3: document 150 repeats document 7 exactly, and document 7 times out; the task is judged on the other
    199 documents, with one key per document, numbered over the whole task, in every record of the run."""
    suite = project.path / "suites" / "toy"
    documents = rows("flaky", 200)
    documents[150] = documents[7]
    (suite / "flaky.jsonl").write_text("".join(json.dumps(r) + "\n" for r in documents), encoding="utf-8")
    (suite / "flaky.yaml").write_text(task_yaml("flaky") + "  gate:\n    max_unscored: 0.05\n", encoding="utf-8")
    run(project, "--snapshot-update", "--no-cache", "-k", "flaky").assert_outcomes(passed=1)
    keys = list(json.loads(next((project.path / "baselines").rglob("flaky.json")).read_text())["documents"]["rows"])
    assert keys[150] == f"{keys[7]}#2"
    (project.path / "failing_once.json").write_text(json.dumps(["flaky-7"]))
    out, record = project.path / "r.json", project.path / "record.json"

    result = run(project, "-k", "flaky", "--no-cache", f"--results-json={out}", f"--run-record={record}")
    result.assert_outcomes(passed=1)
    assert "re-baseline" not in result.stdout.str()
    flaky = json.loads(out.read_text())["gate"]["toy/flaky"]
    assert (flaky["status"], flaky["n_documents"]) == ("pass", 199)
    assert flaky["integrity"]["unscored_keys"] == [keys[7]]
    recorded = json.loads(record.read_text())["results"][0]
    assert list(json.loads(recorded["candidate"])["documents"]["rows"]) == keys[:7] + keys[8:]
    assert main(["merge", str(record), "--", "-k", "flaky"]) == 0

    # --early-stop scores blocks apart: whichever copy is asked first times out, and keeps its own key
    early = run(project, "-k", "flaky", "--no-cache", "--early-stop", f"--results-json={out}")
    early.assert_outcomes(passed=1)
    assert "re-baseline" not in early.stdout.str()
    flaky = json.loads(out.read_text())["gate"]["toy/flaky"]
    assert flaky["status"] == "pass" and set(flaky["integrity"]["unscored_keys"]) <= {keys[7], keys[150]}


def test_a_groups_keys_are_numbered_over_all_its_leaf_tasks_documents_scored_or_not(project):
    """A group of `healthy` then `flaky`: flaky's document 15 repeats its document 7, and its document 19 repeats
    healthy's document 3; the first copy of each times out. The group is judged on its other 38 documents, each keyed
    as in its baseline (one numbering over the leaf tasks' documents in tree order), in every record of the run."""
    suite = project.path / "suites" / "toy"
    documents = rows("flaky")
    documents[15], documents[19] = documents[7], rows("healthy")[3]
    (suite / "flaky.jsonl").write_text("".join(json.dumps(r) + "\n" for r in documents), encoding="utf-8")
    (suite / "pair.yaml").write_text("group: pair\ntask:\n  - healthy\n  - flaky\naggregate_metric_list:\n"
                                     "  - metric: acc\nmodelbench:\n  gate:\n    max_unscored: 0.1\n", encoding="utf-8")
    run(project, "--snapshot-update", "--no-cache", "-k", "pair").assert_outcomes(passed=1)
    keys = list(json.loads(next((project.path / "baselines").rglob("pair.json")).read_text())["documents"]["rows"])
    assert (keys[20 + 15], keys[20 + 19]) == (f"{keys[20 + 7]}#2", f"{keys[3]}#2")
    (project.path / "failing_once.json").write_text(json.dumps(["healthy-3", "flaky-7"]))
    out, record = project.path / "r.json", project.path / "record.json"

    result = run(project, "-k", "pair", "--no-cache", f"--results-json={out}", f"--run-record={record}")
    result.assert_outcomes(passed=1)
    assert "re-baseline" not in result.stdout.str()
    pair = json.loads(out.read_text())["gate"]["toy/pair"]
    assert (pair["status"], pair["n_documents"]) == ("pass", 38)
    assert pair["integrity"]["unscored_keys"] == [keys[3], keys[20 + 7]]
    recorded = json.loads(record.read_text())["results"][0]
    scored = [key for i, key in enumerate(keys) if i not in (3, 20 + 7)]
    assert list(json.loads(recorded["candidate"])["documents"]["rows"]) == scored
    assert main(["merge", str(record), "--", "-k", "pair"]) == 0


def test_answers_that_stop_parsing_regress_the_invalid_output_entry_and_say_why(project):
    run(project, "--snapshot-update", "--no-cache", "-k", "letters").assert_outcomes(passed=1)
    (project.path / "format.txt").write_text("The answer is ({}).")  # a template change: no filter parses it
    record = project.path / "record.json"
    result = run(project, "-k", "letters", "--no-cache", f"--run-record={record}")
    assert result.ret == 1  # the model's answers, not the run: a regression
    output = result.stdout.str()
    why = "invalid_output: 20 of 20 answers no filter could parse (baseline: 0.0%), e.g. document 0: " \
          "'The answer is (A).'"
    assert f"why: {why}" in output
    invalid_row = next(line for line in output.splitlines() if line.lstrip().startswith("invalid_output"))
    assert "regressed" in invalid_row
    # the merge recomputes the verdict from the record and says the same why
    assert main(["merge", str(record), "--md-report=merged.md", "--", "-k", "letters"]) == 1
    assert why in (project.path / "merged.md").read_text()


@pytest.mark.parametrize("task", ["letters", "target", "text"])  # generate_until, loglikelihood, ..._rolling
def test_a_task_with_no_document_scored_is_the_runs_error(project, task):
    run(project, "--snapshot-update", "--no-cache", "-k", task).assert_outcomes(passed=1)
    (project.path / "failing.json").write_text(json.dumps([f"{task}-{i}" for i in range(DOCUMENTS)]))
    out = project.path / "r.json"
    result = run(project, "-k", task, "--no-cache", f"--results-json={out}")
    assert result.ret == EXIT_STATUS_INTEGRITY  # no filter, metric or gate ran on nothing
    gated = json.loads(out.read_text())["gate"][f"toy/{task}"]
    assert gated["status"] == "error" and gated["entries"] == []
    assert gated["integrity"]["unscored"] == DOCUMENTS
    assert f"task 'toy/{task}': 20 of 20 documents unscored (100.0%, limit 1.0%)" in result.stdout.str()
    # --score-only compares with no baseline, and still passes no scores of nothing (it used to pass the task)
    assert run(project, "-k", task, "--no-cache", "--score-only").ret == EXIT_STATUS_INTEGRITY
