"""The gate's settings as the command line sets them: --gate-margin and --gate-relative-margin replace every margin,
absolute and relative, of the metrics and of the YAML (issue 18, item 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.pytest_plugin.gate_hooks import GATE_KEY
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.identity import identify
from tests.fixtures.gate_records import DIFF, make_record

REPO = Path(__file__).resolve().parents[2]
# likelihood_diff: 10% of the baseline, pct_stereotype: 0.02; each perplexity: 2% of the baseline
CROWS = REPO / "suites" / "bias" / "crows_pairs_english.yaml"
PERPLEXITY = REPO / "suites" / "perplexity" / "arc_challenge_question_ppl.yaml"

YAML_MARGINS = """\
task: own_margins
dataset_path: json
dataset_kwargs:
  data_files:
    test: data.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{text}}"
doc_to_choice: "{{options}}"
doc_to_target: "{{label}}"
metric_list:
  - metric: acc
modelbench:
  gate:
    relative_margin: 0.2
    metrics:
      acc: {absolute_margin: 0.03, relative_margin: 0.5}
"""


def tolerance(pytester, yaml_path: Path, *options: str):
    """The Tolerance the gate resolves for the task under these command-line options (no model, no data)."""
    session = pytester.parseconfigure(*options).stash[GATE_KEY]
    task_config = load_task_config(yaml_path, allow_task_code=True)
    key = identify(task_config.source, task_config.task, session.suite_roots).key
    return session.policy.tolerance(task_config, session.alpha_split, key,  # as the gate resolves a gated item's
                                   resolve_metrics(task_config))


@pytest.mark.parametrize(("yaml_path", "metrics"), [
    (CROWS, ("likelihood_diff", "pct_stereotype")),
    (PERPLEXITY, ("word_perplexity", "byte_perplexity", "bits_per_byte")),
])
def test_gate_margin_zero_leaves_no_margin_at_all(pytester, yaml_path, metrics):
    zero = tolerance(pytester, yaml_path, "--gate-margin=0")
    assert {name: zero.margin(name).at(4.6) for name in metrics} == {name: 0.0 for name in metrics}


def test_gate_margin_zero_blocks_a_likelihood_diff_drift_its_own_margin_allows(pytester):
    """CrowS-Pairs' likelihood_diff of 4.6 nats, 0.3 nats worse on every pair: inside its own 0.46-nat margin, a
    regression against no change (--gate-margin=0)."""
    rng = np.random.default_rng(3)
    base = rng.normal(4.6, 1.0, 300)
    cand = base + 0.3 + rng.normal(0, 0.01, 300)
    baseline, candidate = (make_record({"likelihood_diff": v}, metrics=[DIFF]) for v in (base, cand))
    (own,) = compare(baseline, candidate, tolerance(pytester, CROWS)).entries
    (none,) = compare(baseline, candidate, tolerance(pytester, CROWS, "--gate-margin=0")).entries
    assert own.margin == pytest.approx(0.1 * base.mean()) and own.verdict is Verdict.PASS
    assert none.margin == 0.0 and none.verdict is Verdict.REGRESSED


def test_a_command_line_margin_replaces_the_yamls_margins_too(pytester):
    pytester.path.joinpath("own_margins.yaml").write_text(YAML_MARGINS, encoding="utf-8")
    yaml_path = pytester.path / "own_margins.yaml"
    # the YAML's own: max(0.03, 0.5 × 0.8)
    assert tolerance(pytester, yaml_path).margin("acc").at(0.8) == pytest.approx(0.4)
    assert tolerance(pytester, yaml_path, "--gate-margin=0").margin("acc").at(0.8) == 0.0
    assert tolerance(pytester, yaml_path, "--gate-margin=0.005").margin("acc").at(0.8) == 0.005
    assert tolerance(pytester, yaml_path, "--gate-relative-margin=0.01").margin("acc").at(0.8) == pytest.approx(0.008)


def test_relative_alone_and_both_options(pytester):
    only_relative = tolerance(pytester, CROWS, "--gate-relative-margin=0.01")
    assert only_relative.margin("pct_stereotype").at(0.5) == pytest.approx(0.005)  # its own 0.02 is gone
    both = tolerance(pytester, CROWS, "--gate-margin=0.001", "--gate-relative-margin=0.01")
    assert both.margin("likelihood_diff").at(4.6) == pytest.approx(0.046)
    assert both.margin("pct_stereotype").at(0.5) == pytest.approx(0.005)
    assert both.margin("pct_stereotype").at(0.05) == pytest.approx(0.001)
    untouched = tolerance(pytester, CROWS)  # without a command-line margin, the metrics' own
    assert untouched.margin("likelihood_diff").at(4.6) == pytest.approx(0.46)
    assert untouched.margin("pct_stereotype").at(0.5) == pytest.approx(0.02)
