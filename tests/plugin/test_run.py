"""Running tasks through pytest on a tiny model: scores, results JSON, and one clear error per bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.bangla_data import write_bangla_fixtures

REPO = Path(__file__).resolve().parents[2]
GOOD_TASK = """
task: {name}
dataset_path: LumiOpen/arc_challenge_mt
dataset_name: fi
test_split: test
output_type: multiple_choice
training_split: train
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
doc_to_choice: "{{{{choices.text}}}}"
"""


@pytest.fixture
def arc_suite(pytester):
    shutil.copytree(REPO / "suites" / "arc_mt", pytester.path / "arc_mt")
    return pytester.path / "arc_mt"


def run(pytester, tiny_model, data_mirror, *args):
    return pytester.runpytest(f"--model={tiny_model}", f"--data-dir={data_mirror}", "--limit=5", "--score-only", *args)


def test_scores_summary_and_results_json(pytester, tiny_model, data_mirror, arc_suite):
    out = pytester.path / "results.json"
    result = run(pytester, tiny_model, data_mirror, "arc_mt", "-k", "fi or sv", "--num-fewshot=2",
                 f"--results-json={out}", "--log-samples")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*modelbench scores*", "*arc_challenge_mt_fi*acc_norm*±*5*"])
    document = json.loads(out.read_text())
    assert set(document["results"]) == {"arc_mt/arc_challenge_mt_fi", "arc_mt/arc_challenge_mt_sv"}
    block = document["results"]["arc_mt/arc_challenge_mt_fi"]
    assert set(block) >= {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr"}
    samples = document["samples"]["arc_mt/arc_challenge_mt_fi"]
    assert [s["doc_id"] for s in samples] == list(range(5))
    first = samples[0]
    assert len(first["requests"]) == len(first["loglikelihoods"]) == 4
    assert first["requests"][0][0].count("Question:") == 3  # two shots and the question
    assert block["acc"] == pytest.approx(sum(s["metrics"]["acc"] for s in samples) / 5)


def test_bangla_suite_runs_on_fixtures(pytester, tiny_model, tmp_path):
    shutil.copytree(REPO / "suites" / "bangla", pytester.path / "bangla")
    write_bangla_fixtures(tmp_path)
    result = pytester.runpytest(f"--model={tiny_model}", f"--data-dir={tmp_path}", "--num-fewshot=2", "--limit=4",
                                "--score-only", "bangla")
    result.assert_outcomes(passed=5)


def test_static_task_errors_are_collection_errors_naming_file_and_key(pytester, tiny_model, data_mirror):
    pytester.makefile(".yaml", good=GOOD_TASK.format(name="good"))
    pytester.makefile(".yaml", broken="task: broken\ndoc_to_text: [unclosed\n")
    pytester.makefile(".yaml", unknown=GOOD_TASK.format(name="unknown") + "shots: 3\n")
    pytester.makefile(".yaml", cycle="include: cycle.yaml\ntask: cycle\n")
    pytester.makefile(".yaml", metric=GOOD_TASK.format(name="metric") + "metric_list:\n  - metric: bleu\n")
    pytester.makefile(".yaml", syntax=GOOD_TASK.format(name="syntax").replace("{{question}}", "{{question}"))
    pytester.makefile(".yaml", margin=GOOD_TASK.format(name="margin") + "modelbench:\n  gate:\n    alpha: 1.5\n")
    pytester.makefile(".yaml", delimiter=GOOD_TASK.format(name="delimiter") + "target_delimiter: 7\n")
    files = ["good.yaml", "broken.yaml", "unknown.yaml", "cycle.yaml", "metric.yaml", "syntax.yaml", "margin.yaml",
             "delimiter.yaml"]
    expected = [
        "*broken.yaml: malformed YAML*",
        "*unknown.yaml: unknown key 'shots'*",
        "*cycle.yaml: include cycle*",
        "*metric.yaml: unknown metric 'bleu'*",
        "*syntax.yaml: key 'doc_to_text': template error (line 1): *",
        "*margin.yaml: key 'modelbench.gate.alpha' must lie between 1e-09 and 0.5, got 1.5",
        "*delimiter.yaml: key 'target_delimiter' must be a string, got 7",
    ]
    for args in (["--collect-only"], []):  # a lint step without a model, and a run without --model
        result = pytester.runpytest(*args, *files)
        assert result.ret == pytest.ExitCode.INTERRUPTED
        result.assert_outcomes(errors=7)
        result.stdout.fnmatch_lines_random(expected)
        assert "Traceback" not in result.stdout.str()
    # pytest's own switch lets the good tasks run anyway
    result = run(pytester, tiny_model, data_mirror, "--continue-on-collection-errors", *files)
    result.assert_outcomes(passed=1, errors=7)


def test_document_errors_name_the_document(pytester, tiny_model, data_mirror):
    pytester.makefile(".yaml", field=GOOD_TASK.format(name="field").replace("{{question}}", "{{stem}}"))
    pytester.makefile(".yaml", target=GOOD_TASK.format(name="target").replace(
        "{{choices.label.index(answerKey)}}", "{{answerKey}}x"))
    result = run(pytester, tiny_model, data_mirror, "field.yaml", "target.yaml")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random([
        "*field.yaml: task 'field', document 0: template reads a missing field ('stem' is undefined)*",
        "*target.yaml: task 'target', document 0: target 'Cx' is not among the choices*",
    ])


def test_missing_dataset_and_split(pytester, tiny_model, data_mirror):
    pytester.makefile(".yaml", nodata=GOOD_TASK.format(name="nodata").replace("dataset_name: fi", "dataset_name: xx")
                      .replace("LumiOpen", "nobody"))
    pytester.makefile(".yaml", nosplit=GOOD_TASK.format(name="nosplit").replace("test_split: test", "test_split: dev"))
    result = run(pytester, tiny_model, data_mirror, "nodata.yaml", "nosplit.yaml")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random([
        "*nodata.yaml: task 'nodata': cannot load split 'test' of dataset 'nobody/arc_challenge_mt'*--data-dir*",
        "*nosplit.yaml: task 'nosplit': split 'dev' not found in local mirror*(has: test, train, validation)*",
    ])


def test_model_that_cannot_be_loaded(pytester, data_mirror, tmp_path):
    pytester.makefile(".yaml", a=GOOD_TASK.format(name="a"), b=GOOD_TASK.format(name="b"))
    (tmp_path / "empty_model").mkdir()
    result = pytester.runpytest(f"--model={tmp_path / 'empty_model'}", f"--data-dir={data_mirror}", "--limit=2",
                                "--score-only", "a.yaml", "b.yaml")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*cannot load model*empty_model*"])
    assert "Traceback" not in result.stdout.str()



def one_request_at_a_time(loaded, requests) -> list[float]:
    """lm-eval's procedure written out for batch size 1: one forward pass per request, no padding, summed
    log-softmax at the continuation's positions (the tokenization seam is the engine's, CausalTokenizer)."""
    import torch

    from pytest_modelbench.scoring.tokenization import CausalTokenizer

    encoder, values = CausalTokenizer(loaded.tokenizer), []
    with torch.inference_mode():
        for context, continuation in requests:
            encoded = encoder.encode_pair(context, continuation)
            tokens = (encoded.context + encoded.continuation)[:-1]
            logits = loaded.model(torch.tensor([tokens])).logits[0, len(tokens) - len(encoded.continuation):]
            logprobs = torch.log_softmax(logits, dim=-1)
            values.append(float(logprobs.gather(-1, torch.tensor(encoded.continuation).unsqueeze(-1)).sum()))
    return values


@pytest.mark.parametrize("plain", [False, True])
def test_plain_scoring_option_selects_lm_evals_procedure(pytester, tiny_model, tiny_loaded, data_mirror, arc_suite,
                                                         plain, monkeypatch):
    from pytest_modelbench.scoring.prefix_sharing import PrefixSharingRunner

    shared_prefix_batches = []
    score = PrefixSharingRunner.score

    def counting(self, *args, **kwargs):
        shared_prefix_batches.append(len(args[0]))
        return score(self, *args, **kwargs)

    monkeypatch.setattr(PrefixSharingRunner, "score", counting)
    extra = ["--plain-scoring"] if plain else []
    out = pytester.path / "results.json"
    run(pytester, tiny_model, data_mirror, "arc_mt", "-k", "fi", "--no-cache", "--batch-size=1", "--log-samples",
        f"--results-json={out}", *extra).assert_outcomes(passed=1)
    document = json.loads(out.read_text())
    assert document["config"]["shared_prefixes"] is not plain
    # the shared-prefix path ran exactly when --plain-scoring was not given
    assert bool(shared_prefix_batches) is not plain
    samples = document["samples"]["arc_mt/arc_challenge_mt_fi"]
    requests = [tuple(request) for sample in samples for request in sample["requests"]]
    values = [value for sample in samples for value in sample["loglikelihoods"]]
    expected = one_request_at_a_time(tiny_loaded, requests)
    if plain:
        assert values == expected  # lm-eval's procedure: bit for bit
    else:
        assert values == pytest.approx(expected, abs=1e-4)
