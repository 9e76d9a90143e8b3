"""Libraries' progress bars and warnings stay out of a failure report unless -v asks for them."""

from __future__ import annotations

from tests.fixtures.gate_tasks import pool_documents, write_task


def test_loading_bars_are_hidden_from_a_failure_and_shown_with_verbose(pytester, tiny_model):
    write_task(pytester.path / "suites" / "probe", "probe_task", pool_documents(3))
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    # A baseline name whose folder lacks the task's baseline: the item fails ("no baseline"), after loading the model
    # and the data.
    (pytester.path / "baselines" / "absent").mkdir(parents=True)
    args = ("suites", f"--model={tiny_model}", "--baseline-name=absent", "-p", "no:cacheprovider")
    quiet = pytester.runpytest(*args)
    quiet.assert_outcomes(failed=1)
    assert "no baseline 'absent'" in quiet.stdout.str()
    assert "Loading weights" not in quiet.stdout.str()
    assert "Generating test split" not in quiet.stdout.str()

    verbose = pytester.runpytest(*args, "-v")
    verbose.assert_outcomes(failed=1)
    verbose.stdout.fnmatch_lines(["*Captured stderr call*", "*Loading weights*"])
