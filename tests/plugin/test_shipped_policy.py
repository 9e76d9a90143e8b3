"""The committed gate policy (baselines/default/gate-policy.json) is what the shipped suites' YAMLs and this code
record now. A change to a gate block, a margin default or the policy's format that is not recorded again would make
every `--baseline-ref` run of that session fail as `policy-changed` (docs/baseline-gate.md); this test names the
session and the command that records it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "baselines" / "default" / "gate-policy.json"
SESSIONS = sorted(json.loads(COMMITTED.read_text(encoding="utf-8"))["sessions"])
SELECTED = {"bbq": ["suites/bbq/bbq_sample.yaml"]}  # the full BBQ task (66 minutes) is not in its gated session


@pytest.mark.parametrize("session", SESSIONS)
def test_the_committed_policy_is_what_the_suites_record_now(session, tmp_path):
    suites = SELECTED.get(session) or [f"suites/{suite}" for suite in session.split(", ")]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--snapshot-update", "--collect-only",
               "--baseline-name=default", f"--baselines-dir={tmp_path}", "--allow-task-code", *suites]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = json.loads((tmp_path / "default" / "gate-policy.json").read_text(encoding="utf-8"))["sessions"]
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))["sessions"][session]
    assert recorded == {session: committed}, (
        f"session '{session}' of {COMMITTED.relative_to(REPO)} is not what its suites record now; record it again: "
        f"pytest --snapshot-update --collect-only --baseline-name=default --allow-task-code {' '.join(suites)}")
