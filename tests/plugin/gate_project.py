"""Shared set-up for the baseline-gate pytester tests: two tiny models, a probe task, a project folder."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.gate_tasks import probe_documents, write_task

REPO = Path(__file__).resolve().parents[2]
SUITE = "probe"
TASK = "gate_probe"


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Two-core machines shared with other jobs: one intra-op thread is many times faster than two."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def bad_model(tmp_path_factory) -> Path:
    """Same architecture and tokenizer as tiny_model, another random seed."""
    from tests.fixtures.tiny_models import build_tiny_causal_lm

    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_seed1") / "model", seed=1)


@pytest.fixture(scope="session")
def probe_docs(tiny_model, bad_model, tmp_path_factory) -> list[dict]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return probe_documents(tiny_model, bad_model, tmp_path_factory.mktemp("probe_pool"), per_kind=20, pool=800)
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def bias_probe_mirror(tiny_model, bad_model, data_mirror, tmp_path_factory) -> Path:
    """CrowS-Pairs English and StereoSet intrasentence rows on which bad_model is worse by construction."""
    import torch

    from tests.fixtures.bias_probe import build_bias_probe_mirror

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return build_bias_probe_mirror(tiny_model, bad_model, REPO / "suites" / "bias", data_mirror,
                                       tmp_path_factory.mktemp("bias_probe"))
    finally:
        torch.set_num_threads(before)


def run_gate(pytester, model, *args):
    return pytester.runpytest(f"--model={model}", "-p", "no:cacheprovider", *args)


def make_project(pytester, docs, tasks=(TASK,), metrics=("acc",)) -> Path:
    suite = pytester.path / "suites" / SUITE
    for task in tasks:
        write_task(suite, task, docs, metrics)
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    return suite


def baseline_file(pytester, task=TASK, name="default") -> Path:
    return pytester.path / "baselines" / name / SUITE / f"{task}.json"


def gate_heads(junit_xml: Path, key: str = "tasks") -> dict[str, Any]:
    """task → its gate head's `key` (default: the number of gated tasks its alpha was shared by), from the JUnit XML."""
    import json

    heads = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "modelbench.gate":
                heads[case.get("name")] = json.loads(prop.get("value"))[key]
    return heads


def gate_entries(junit_xml: Path) -> dict[str, dict[tuple[str, str | None], str]]:
    """task → {(metric, category): verdict} from the JUnit XML properties."""
    import json

    found = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        verdicts = {}
        for prop in case.iter("property"):
            name = prop.get("name")
            if name.startswith("modelbench.gate."):
                entry = json.loads(prop.get("value"))
                verdicts[(entry["metric"], entry["category"])] = entry["verdict"]
        found[case.get("name")] = verdicts
    return found
