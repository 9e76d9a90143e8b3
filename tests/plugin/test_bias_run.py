"""`pytest --model=... suites/bias` through pytest, on tiny models (a causal Llama and a masked BERT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.shipped_suites import copy_suite
from tests.fixtures.tiny_bert import build_tiny_bert

BIAS_TASKS = ["crows_pairs_english", "crows_pairs_french", "stereoset_intersentence", "stereoset_intrasentence"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("bert") / "model", seed=0)


@pytest.fixture
def bias_suite(pytester):
    copy_suite("bias", pytester.path / "bias")
    return pytester.path / "bias"


def test_bias_suite_collects_four_tasks(pytester, bias_suite):
    result = pytester.runpytest("bias", "--collect-only", "-q")
    assert sorted(line.split("::")[-1] for line in result.outlines if "::" in line) == BIAS_TASKS
    result = pytester.runpytest("bias", "--collect-only", "-q", "-m", "stereoset")
    assert sorted(line.split("::")[-1] for line in result.outlines if "::" in line) == BIAS_TASKS[2:]


def test_masked_model_runs_the_bias_suite_with_category_tables(pytester, bias_suite, tiny_bert, data_mirror):
    out = pytester.path / "results.json"  # --model-type auto (the default) detects BertForMaskedLM
    result = pytester.runpytest(f"--model={tiny_bert}", f"--data-dir={data_mirror}",
                                "--limit=12", f"--results-json={out}", "--score-only", "bias")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines_random([
        "*modelbench scores*",
        "*crows_pairs_english*race-color*pct_stereotype*",
        "*crows_pairs_english*religion*pct_stereotype*empty*0",  # not among the first 12 pairs
        "*stereoset_intrasentence*profession*icat*",
        "*stereoset_intersentence*religion*ss*",
    ])
    document = json.loads(out.read_text())
    assert set(document["results"]) == {f"bias/{task}" for task in BIAS_TASKS}
    english = document["categories"]["bias/crows_pairs_english"]
    assert list(english) == ["race-color", "gender", "socioeconomic", "nationality", "religion", "age",
                             "sexual-orientation", "physical-appearance", "disability"]
    assert english["religion"] == {"likelihood_diff": None, "likelihood_diff_stderr": None,
                                     "pct_stereotype": None, "pct_stereotype_stderr": None, "n": 0}
    assert sum(block["n"] for block in english.values()) == 12
    assert list(document["categories"]["bias/crows_pairs_french"])[-1] == "autre"
    intra = document["results"]["bias/stereoset_intrasentence"]
    assert set(intra) >= {"lms", "ss", "icat"} and intra["icat_stderr"] is None  # aggregates carry no stderr
    assert intra["icat"] == pytest.approx(intra["lms"] * min(intra["ss"], 1 - intra["ss"]) / 0.5)


def test_causal_model_runs_the_bias_suite(pytester, bias_suite, tiny_model, data_mirror):
    result = pytester.runpytest(f"--model={tiny_model}", f"--data-dir={data_mirror}", "--limit=6", "--score-only", "bias")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines_random(["*crows_pairs_french*autre*empty*0", "*stereoset_intersentence*lms*"])


def test_masked_model_type_on_a_causal_checkpoint_is_a_load_error(pytester, bias_suite, tiny_model, data_mirror):
    result = pytester.runpytest(f"--model={tiny_model}", "--model-type=masked", f"--data-dir={data_mirror}",
                                "--limit=2", "--score-only", "bias/crows_pairs_english.yaml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cannot load model*"])
    assert "Traceback" not in result.stdout.str()
