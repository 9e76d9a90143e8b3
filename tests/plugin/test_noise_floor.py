"""--noise-floor end to end on a tiny model: the second backend, the stored block, the warning at gate time, and the
usage error without --snapshot-update."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from pytest_modelbench.gate.baseline_file import read
from pytest_modelbench.gate.noise_floor import REASON_FLIPS, REASON_SHIFT
from pytest_modelbench.run.runner import BenchRunner, RunOptions
from tests.fixtures.gate_tasks import pool_documents, write_task
from tests.plugin.gate_project import SUITE, _one_torch_thread, baseline_file, run_gate  # noqa: F401 - fixture

TASK = "noise_probe"
METRICS = ("acc", "acc_norm", "likelihood_diff")


def _project(pytester) -> None:
    docs = [{**doc, "kind": "odd" if i % 2 else "even"} for i, doc in enumerate(pool_documents(16, seed=3))]
    write_task(pytester.path / "suites" / SUITE, TASK, docs, METRICS)
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")


def test_the_second_backend_differs_in_batch_size_path_and_cache_and_shares_the_model(tiny_model):
    runner = BenchRunner(RunOptions(model=str(tiny_model), dtype="float32", cache=True))
    noise = runner.noise_runner()
    assert noise is runner.noise_runner()  # built once
    assert noise.loaded_model() is runner.loaded_model()  # the model is not loaded twice
    assert (runner.batch_size_for("multiple_choice"), noise.batch_size_for("multiple_choice")) == ("auto", 1)
    assert (runner.batch_size_for("generate_until"), noise.batch_size_for("generate_until")) == (1, 8)
    assert noise.options.shared_prefixes is False and noise.options.cache is False
    assert noise.backend().fast is False and noise.backend().cache is None
    assert noise.scoring_setup("multiple_choice") == "batch size 1, plain path (--plain-scoring), score cache off"

    plain = BenchRunner(RunOptions(model=str(tiny_model), dtype="float32", batch_size=1, shared_prefixes=False))
    other = plain.noise_runner()
    assert other.batch_size_for("multiple_choice") == 8 and other.options.shared_prefixes is True
    assert other.backend().fast is True


def test_noise_floor_needs_snapshot_update(pytester, tiny_model):
    _project(pytester)
    for args in ((), ("--snapshot-update-new-only",)):
        result = run_gate(pytester, tiny_model, "--noise-floor", *args)
        assert result.ret == 4
        result.stderr.fnmatch_lines(["*--noise-floor measures the pipeline's noise while recording baselines*"
                                     "it needs --snapshot-update*"])


def test_record_with_noise_floor_then_a_tight_margin_warns(pytester, tiny_model, monkeypatch):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    _project(pytester)
    path = baseline_file(pytester, TASK)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    assert read(path).noise_floor is None  # not without --noise-floor
    before = path.read_bytes()

    result = run_gate(pytester, tiny_model, "--snapshot-update", "--noise-floor")
    result.assert_outcomes(passed=1)
    assert path.read_bytes() != before  # re-recorded although inside the band: the floor describes the stored scores
    record = read(path)  # the checksum covers the block
    floor = record.noise_floor
    assert floor is not None
    assert floor.measured_with == ("batch size 1, plain path (--plain-scoring), score cache off (first scoring: "
                                   "batch size auto, fast path (shared prefixes))")
    block = json.loads(path.read_text())["noise_floor"]
    assert block["measured_with"] == floor.measured_with
    categories = [None, "even", "odd"]
    assert {(e["metric"], e["category"]) for e in block["entries"]} == {(m, c) for m in METRICS for c in categories}
    assert all(0 <= e["flip_rate"] <= 1 and e["shift"] >= 0 for e in block["entries"])
    result.stdout.fnmatch_lines(["*noise_probe*updated*re-recorded with its noise floor*"])

    # The gate against that baseline with no margin at all: every entry the pipeline moved (or, for a 0/1 metric,
    # whose documents flipped) is below the noise floor. The expected entries come from the stored block.
    binary = {m.name for m in record.metrics if m.binary}
    expected = {(e.metric, e.category) for e in floor.entries
                if e.shift > 0 or (e.metric in binary and e.flip_rate > 0)}
    assert expected, f"the two scorings gave identical numbers on every entry: {floor}"
    junit = pytester.path / "junit.xml"
    result = run_gate(pytester, tiny_model, "--gate-margin=0", f"--junitxml={junit}")
    result.assert_outcomes(passed=1, warnings=1)
    out = result.stdout.str()
    assert "NoiseFloorWarning: probe/noise_probe:" in out and "margin below the pipeline's own noise" in out
    assert "margins below the noise floor" in out  # the task's row in the gate summary
    warned = {}
    for line in out.splitlines():
        if line.startswith("  noise floor   "):
            label = line.split("noise floor   ", 1)[1].split(":", 1)[0]
            metric, _, category = label.partition(" [")
            warned[(metric, category.rstrip("]") or None)] = line
    assert set(warned) == expected
    for (metric, category), line in warned.items():
        entry = floor.entry(metric, category)
        rule = f"margin 0 < measured shift {entry.shift:.3g}" if entry.shift > 0 else \
            f"margin 0 < half the flip rate {entry.flip_rate / 2:.3g}"
        assert rule in line
    heads = [json.loads(p.get("value")) for p in ET.parse(junit).getroot().iter("property")
             if p.get("name") == "modelbench.gate"]
    assert {(w["metric"], w["category"]) for w in heads[0]["noise_warnings"]} == expected
    assert {w["reason"] for w in heads[0]["noise_warnings"]} <= {REASON_SHIFT, REASON_FLIPS}

    # at the metrics' own margins (1 point of accuracy, 10% of likelihood_diff's baseline value) only the entries
    # whose noise reaches those margins warn
    def margin(metric, category):
        summary = record.overall[metric] if category is None else record.categories[category][metric]
        return 0.1 * abs(summary.value) if metric == "likelihood_diff" else 0.01

    expected = {(e.metric, e.category) for e in floor.entries if e.shift > margin(e.metric, e.category)
                or (e.metric in binary and e.flip_rate / 2 > margin(e.metric, e.category))}
    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(passed=1, warnings=1 if expected else 0)
    assert ("NoiseFloorWarning" in result.stdout.str()) == bool(expected)

