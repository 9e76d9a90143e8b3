"""The repository's own custom test (suites/bias/test_custom_bias.py with the top-level conftest.py) runs on the
tiny model through the modelbench_model fixture, and is skipped without --model."""

from __future__ import annotations

import shutil

from tests.fixtures.shipped_suites import SUITES

CUSTOM_TEST = "suites/bias/test_custom_bias.py"


def _project(pytester) -> None:
    shutil.copytree(SUITES / "bias", pytester.path / "suites" / "bias")  # with its custom test
    shutil.copy(SUITES.parent / "conftest.py", pytester.path / "conftest.py")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")


def test_repository_custom_test_uses_the_session_model(pytester, tiny_model, data_mirror):
    _project(pytester)
    result = pytester.runpytest(f"--model={tiny_model}", "--limit=20", f"--data-dir={data_mirror}",
                                "-p", "no:cacheprovider", CUSTOM_TEST, "-v")
    result.assert_outcomes(passed=2)
    # evaluate() ran the task once, in the session's runner: its scores are in the session's table
    result.stdout.fnmatch_lines(["*modelbench scores*", "bias/crows_pairs_english*pct_stereotype*20"])


def test_custom_test_without_a_model_is_skipped_with_the_reason(pytester):
    _project(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider", CUSTOM_TEST, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*modelbench_model: no --model given (try --model=smollm2-135m)*"])


def test_evaluate_names_a_task_it_cannot_find(pytester, tiny_model):
    _project(pytester)
    pytester.makepyfile(test_unknown="def test_unknown(modelbench_model):\n"
                                     "    modelbench_model.evaluate('no_such_task')\n")
    result = pytester.runpytest(f"--model={tiny_model}", "-p", "no:cacheprovider", "test_unknown.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TaskConfigError: modelbench_model.evaluate: no task named 'no_such_task' in the "
                                 "modelbench_suites folders*"])
