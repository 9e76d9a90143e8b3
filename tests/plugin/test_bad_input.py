"""Bad command-line values and unwritable output paths: a usage error naming the option, before anything runs."""

from __future__ import annotations

import os
import stat

import pytest

from pytest_modelbench.gate.decision import EXIT_STATUS_WRITE_FAILED

TASK = 'task: t\ntest_split: test\noutput_type: multiple_choice\ndoc_to_text: "q"\ndoc_to_target: 0\ndoc_to_choice: [a, b]\n'


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--limit=-3", "--limit must be a positive integer, got -3"),
        ("--limit=0", "--limit must be a positive integer, got 0"),
        ("--num-fewshot=-1", "--num-fewshot must be an integer >= 0, got -1"),
        ("--batch-size=-2", "--batch-size must be a positive integer or 'auto', got '-2'"),
        ("--batch-size=১২", "--batch-size must be a positive integer or 'auto', got '১২'"),
        ("--gate-margin=-0.1", "--gate-margin must be >= 0, got -0.1"),
        ("--gate-relative-margin=nan", "--gate-relative-margin must be a number, got nan"),
        ("--gate-alpha=0", "--gate-alpha must lie between 1e-09 and 0.5, got 0.0"),
        ("--gate-alpha=1e-300", "--gate-alpha must lie between 1e-09 and 0.5, got 1e-300"),
        ("--shard=1/99999999999999999999999", "--shard must be K/N with 1 <= K <= N <= 10,000*"),
        ("--results-json=", "--results-json needs a file path, got ''"),
        ("--md-report= ", "--md-report needs a file path, got ' '"),
        ("--model-args=max_length=-5", "--model-args max_length must be a positive integer, got -5"),
        ("--model-args=prefix_token_id=x", "--model-args prefix_token_id must be a token id*got 'x'"),
        ("--model-args=add_bos_token=1", "--model-args add_bos_token must be true or false, got 1"),
        ("--model-args=revision", "--model-args: expected key=value, got 'revision'"),
    ],
)
def test_invalid_numeric_options_are_usage_errors(pytester, option, message):
    pytester.makefile(".yaml", t=TASK)
    result = pytester.runpytest(option, "t.yaml", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


@pytest.mark.parametrize("value", ["-1", "soon", "inf"])
def test_invalid_progress_interval_is_a_usage_error(pytester, monkeypatch, value):
    monkeypatch.setenv("MODELBENCH_PROGRESS_INTERVAL", value)
    pytester.makefile(".yaml", t=TASK)
    result = pytester.runpytest("t.yaml", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*$MODELBENCH_PROGRESS_INTERVAL must be a number of seconds >= 0*got '{value}'*"])


@pytest.mark.parametrize("option", ["--results-json", "--md-report", "--html-report"])
def test_unwritable_output_path_is_a_usage_error_before_the_run(pytester, option):
    pytester.makefile(".yaml", t=TASK)
    (pytester.path / "taken").write_text("a file, not a folder")
    result = pytester.runpytest(f"{option}=taken/out.json", "t.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} taken/out.json: cannot create the file, *taken is not a folder*"])
    result = pytester.runpytest(f"{option}=.", "t.yaml")
    result.stderr.fnmatch_lines([f"*{option} .: is a folder, expected a file path*"])


@pytest.mark.parametrize("option", ["--results-json", "--md-report", "--html-report", "--run-record"])
def test_an_output_path_that_is_not_an_ordinary_writable_file_is_left_alone(pytester, option):
    """A pipe (as a device node would be) and a read-only file were replaced by the atomic rename at the end of the
    run; a virtual file system took the run and failed at its end."""
    pytester.makefile(".yaml", t=TASK)
    os.mkfifo(pytester.path / "pipe")
    read_only = pytester.path / "kept.json"
    read_only.write_text("mine")
    read_only.chmod(0o444)
    for target, message in (("pipe", "is not a regular file"), ("kept.json", "the file is read-only"),
                            ("/proc/modelbench-out.json", "folder /proc does not take new files")):
        result = pytester.runpytest(f"{option}={target}", "t.yaml", "--collect-only")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{option} {target}: {message}*"])
    assert stat.S_ISFIFO((pytester.path / "pipe").stat().st_mode)
    assert read_only.read_text() == "mine"


def test_output_path_that_fails_at_the_end_is_reported_without_a_traceback(pytester):
    """The folder existed when the run started and is gone (here: replaced by a file) when results are written."""
    pytester.makefile(".yaml", t=TASK)
    pytester.makeconftest(
        "import pathlib\n"
        "def pytest_collection_finish(session):\n"
        "    pathlib.Path('out').rmdir()\n"
        "    pathlib.Path('out').write_text('now a file')\n"
    )
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("--md-report=out/gate.md", "t.yaml")
    assert result.ret == EXIT_STATUS_WRITE_FAILED
    result.stdout.fnmatch_lines(["*modelbench: --md-report *out/gate.md: cannot write the file (File exists); it is "
                                 "left as it was*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
