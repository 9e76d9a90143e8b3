"""Collection: task YAMLs become items, selectable with -k and -m; no model or data is touched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARC_TASKS = [f"arc_challenge_mt_{lang}" for lang in "da de el es fi hu is it nb pl pt sv".split()]
BANGLA_TASKS = ["bangla_commonsenseqa", "bangla_mmlu", "boolqa_bn", "openbookqa_bn", "piqa_bn"]


def copy_suites(pytester):
    for suite in ("arc_mt", "bangla"):
        shutil.copytree(REPO / "suites" / suite, pytester.path / "suites" / suite)
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")


def collected(result) -> list[str]:
    return sorted(line.split("::")[-1] for line in result.outlines if "::" in line)


def test_shipped_suites_collect_17_tasks(pytester):
    copy_suites(pytester)
    result = pytester.runpytest("suites", "--collect-only", "-q")
    assert collected(result) == sorted(ARC_TASKS + BANGLA_TASKS)


def test_collect_only_imports_no_model_code(pytester):
    copy_suites(pytester)
    pytester.makeconftest(
        "import sys\n"
        "def pytest_collection_finish(session):\n"
        "    assert 'torch' not in sys.modules and 'datasets' not in sys.modules\n"
    )
    result = pytester.runpytest_subprocess("suites", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()


def test_keyword_and_tag_marker_selection(pytester):
    copy_suites(pytester)
    result = pytester.runpytest("suites", "--collect-only", "-q", "-k", "fi")
    assert collected(result) == ["arc_challenge_mt_fi"]
    result = pytester.runpytest("suites", "--collect-only", "-q", "-m", "arc_challenge_mt", "--strict-markers")
    assert collected(result) == sorted(ARC_TASKS)


def test_other_yaml_files_are_ignored(pytester):
    copy_suites(pytester)
    (pytester.path / "suites" / "workflow.yaml").write_text("on: push\njobs: {}\n")
    (pytester.path / "suites" / "_template_yaml").write_text("task: not_a_yaml_suffix\n")
    result = pytester.runpytest("suites", "--collect-only", "-q")
    assert len(collected(result)) == 17


def test_yaml_outside_suites_is_not_collected_unless_named(pytester):
    pytester.makefile(".yaml", stray="task: stray\ntest_split: test\noutput_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a]\n")
    assert collected(pytester.runpytest("--collect-only", "-q")) == []
    assert collected(pytester.runpytest("stray.yaml", "--collect-only", "-q")) == ["stray"]


def test_without_model_items_are_skipped_with_a_reason(pytester):
    copy_suites(pytester)
    result = pytester.runpytest("suites/arc_mt", "-rs")
    result.assert_outcomes(skipped=12)
    result.stdout.fnmatch_lines(["*no --model given*"])



@pytest.mark.parametrize(("text", "loader"), [
    ("task: broken\n", "load_task_config"),
    ("group: broken\ntask: [a, b]\n", "load_group"),
])
def test_an_unexpected_error_in_a_task_or_group_file_is_reported_as_a_collection_error(pytester, text, loader):
    """A failure other than a ModelbenchError gets pytest's own report (the traceback); not an INTERNALERROR from
    the one-line reporting of a ModelbenchError."""
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    pytester.mkdir("suites").joinpath("broken.yaml").write_text(text, encoding="utf-8")
    pytester.makeconftest(
        "from pytest_modelbench.pytest_plugin import plugin\n"
        "def fail(*args, **kwargs):\n"
        "    raise RuntimeError('unexpected failure while loading')\n"
        f"plugin.{loader} = fail\n"
    )
    result = pytester.runpytest_subprocess("suites", "--collect-only", "-q")
    assert result.ret == 2, result.stdout.str()
    result.stdout.fnmatch_lines(["*RuntimeError: unexpected failure while loading*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
