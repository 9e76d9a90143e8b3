"""The gate's modes are views of one computation (docs/gate-modes.md): generated scenarios, each gated in process in
every mode (plain, --early-stop, a merge of the recorded evidence, a cold and a warm score cache,
--snapshot-update-new-only, --snapshot-update and a re-run after it), and the invariants checked between them
(tests/fixtures/mode_invariants.py). tests/plugin/test_gate_modes.py shows the in-process driver decides what the
pytest wiring decides.

The fast tier is SCENARIOS scenarios from seed 0; the deep tier is the same test with more:
MODELBENCH_SCENARIOS=10000 (and MODELBENCH_SCENARIO_START to begin elsewhere), or benchmarks/gate_modes_deep.py."""

from __future__ import annotations

import os

import pytest

from tests.fixtures.mode_invariants import findings

SCENARIOS = int(os.environ.get("MODELBENCH_SCENARIOS", "64"))
START = int(os.environ.get("MODELBENCH_SCENARIO_START", "0"))
CHUNK = 8  # scenarios per test, so that xdist's two workers share them


@pytest.mark.parametrize("first", range(START, START + SCENARIOS, CHUNK))
def test_every_mode_keeps_the_invariants(first, tmp_path):
    found = []
    for seed in range(first, min(first + CHUNK, START + SCENARIOS)):
        found += findings(seed, tmp_path / str(seed))[0]
    assert not found, "\n".join(found)
