"""A pytest run with `--model-args device_map=...` (part of the tiny model offloaded to disk) scores as the unsharded
run; a bad placement argument is one named error. Tolerance: see tests/unit/test_sharded.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_modelbench.run import runner
from pytest_modelbench.scoring.loading import load_model

REPO = Path(__file__).resolve().parents[2]


def loglikelihoods(pytester, tiny_model, data_mirror, out: Path, *args) -> list[float]:
    result = pytester.runpytest(
        f"--model={tiny_model}", f"--data-dir={data_mirror}", "--limit=4", "--no-cache", "arc_mt", "-k", "fi",
        f"--results-json={out}", "--log-samples", *args,
    )
    result.assert_outcomes(passed=1)
    samples = json.loads(out.read_text())["samples"]["arc_mt/arc_challenge_mt_fi"]
    return [value for sample in samples for value in sample["loglikelihoods"]]


def test_sharded_run_scores_as_the_unsharded_one(pytester, tiny_model, data_mirror, monkeypatch):
    shutil.copytree(REPO / "suites" / "arc_mt", pytester.path / "arc_mt")
    placements = []

    def recording_load_model(*args, **kwargs):
        loaded = load_model(*args, **kwargs)
        placements.append(set(getattr(loaded.model, "hf_device_map", {"": "unsharded"}).values()))
        return loaded

    monkeypatch.setattr(runner, "load_model", recording_load_model)
    expected = loglikelihoods(pytester, tiny_model, data_mirror, pytester.path / "plain.json", "--score-only")
    got = loglikelihoods(
        pytester, tiny_model, data_mirror, pytester.path / "sharded.json", "--batch-size=auto", "--snapshot-update",
        f"--model-args=device_map=auto,max_memory=cpu:150KB,offload_folder={pytester.path / 'offload'}",
    )
    assert placements == [{"unsharded"}, {"cpu", "disk"}]
    baseline = json.loads(next((pytester.path / "baselines").rglob("arc_challenge_mt_fi.json")).read_text())
    assert baseline["provenance"]["device"] == "cpu+disk"
    assert len(got) == len(expected) == 16
    assert got == pytest.approx(expected, abs=1e-5)


def test_bad_device_map_is_one_named_error(pytester, tiny_model, data_mirror):
    shutil.copytree(REPO / "suites" / "arc_mt", pytester.path / "arc_mt")
    result = pytester.runpytest(f"--model={tiny_model}", f"--data-dir={data_mirror}", "--limit=2", "arc_mt", "-k", "fi",
                                "--score-only", "--model-args=device_map=gpu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--model-args device_map: unknown device 'gpu'*"])
    result.stdout.no_fnmatch_line("*Traceback*")
