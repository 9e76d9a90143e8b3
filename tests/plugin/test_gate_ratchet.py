"""Baselines ratchet per entry through pytest (issue 43, item 2): three releases, each accepted with --snapshot-update.

A backend of known answers (no model): 900 questions in categories c0, c1, c2 of 300; `--model=release-<n>` answers
right, in c0, the first 206 − 12(n − 1) questions, in c1 the first 150 + 30(n − 1), in c2 the first 207 − 12(n − 1):
each release fixes 30 answers in c1 (+10 points) and quietly loses 12 in each of c0 and c2 (−4 points). Margin 3 points.
"""

from __future__ import annotations

import json
import textwrap

import pytest

BACKEND = '''
from pytest_modelbench.scoring.backend import BackendInfo

RIGHT = {"c0": 206, "c1": 150, "c2": 207}
STEP = {"c0": -12, "c1": 30, "c2": -12}


class ReleaseBackend:
    def __init__(self, model):
        self.model, self.release = model, int(model.removeprefix("release-"))

    def knows(self, question):
        index = int(question.removeprefix("q"))
        category = f"c{index // 300}"
        return index % 300 < RIGHT[category] + STEP[category] * (self.release - 1)

    def loglikelihoods(self, requests, on_batch=None):
        return [0.0 if self.knows(r.context) == (r.continuation.strip() == "right") else -1.0 for r in requests]

    def describe(self):
        return BackendInfo(self.model, "releases:" + self.model, "causal", "", "cpu")


def make(model, model_args, device):
    return ReleaseBackend(model)
'''
TASK_YAML = """\
task: ratchet
dataset_path: json
dataset_kwargs:
  data_files: {test: ratchet.jsonl}
test_split: test
output_type: multiple_choice
doc_to_text: "{{q}}"
doc_to_target: 0
doc_to_choice: ["right", "wrong"]
metric_list:
  - metric: acc
modelbench:
  category_field: kind
"""
KEY = "quiz/ratchet"


@pytest.fixture
def releases(pytester, monkeypatch):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    (pytester.path / "releases.py").write_text(textwrap.dedent(BACKEND), encoding="utf-8")
    suite = pytester.path / "suites" / "quiz"
    suite.mkdir(parents=True)
    rows = [{"q": f"q{i}", "kind": f"c{i // 300}"} for i in range(900)]
    (suite / "ratchet.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (suite / "ratchet.yaml").write_text(TASK_YAML, encoding="utf-8")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    return pytester


def gate(pytester, release, *args):
    return pytester.runpytest("-p", "no:cacheprovider", "--backend=releases:make", f"--model=release-{release}",
                              "--gate-margin=0.03", "suites/quiz", *args)


def stored(pytester) -> dict:
    return json.loads((pytester.path / "baselines" / "default" / "quiz" / "ratchet.json").read_text())


def test_three_releases_raise_c1_keep_c0_c2_and_lower_only_what_is_accepted(releases):
    gate(releases, 1, "--snapshot-update").assert_outcomes(passed=1)
    first = stored(releases)
    assert "ratchet" not in first  # a first recording has no anchors to keep

    second = gate(releases, 2, "--snapshot-update", "--results-json=second.json")
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["*acc [[]c0]: kept at 0.6867 (accepts no change; this run -0.0400 against its anchor*",
                                 "*acc [[]c1]: raised 0.5000 → 0.6000 (accepts +0.1000)*"])
    references = json.loads((releases.path / "second.json").read_text())["gate"][KEY]["references"]
    assert any(line.startswith("acc [c1]: raised 0.5000 → 0.6000") for line in references), references
    anchors = {a["category"]: a for a in stored(releases)["ratchet"]["entries"]}
    assert anchors["c1"]["recording"] == stored(releases)["ratchet"]["recording"]
    assert anchors["c0"]["recording"] == anchors["c2"]["recording"] != anchors["c1"]["recording"]

    # release 3: 4 more points lost in c0 and c2 (within the band against release 2, 8 points past the anchors)
    third = gate(releases, 3)
    third.assert_outcomes(failed=1)
    third.stdout.fnmatch_lines(["*acc*c0*0.6867*0.6067*regressed*", "*acc*c2*0.6900*0.6100*regressed*"])
    written = (releases.path / "baselines" / "default" / "quiz" / "ratchet.json").read_bytes()
    update = gate(releases, 3, "--snapshot-update")
    update.assert_outcomes(failed=1)
    update.stdout.fnmatch_lines(["*not re-recorded: regressed entries no --accept-regression names: acc [[]c0], "
                                 "acc [[]c2]*"])
    assert (releases.path / "baselines" / "default" / "quiz" / "ratchet.json").read_bytes() == written

    accepted = gate(releases, 3, "--snapshot-update", f"--accept-regression={KEY}:acc:c0",
                    f"--accept-regression={KEY}:acc:c2", f"--accept-regression={KEY}:acc:C1",
                    "--accept-reason=c1 fix traded for c0 and c2")
    accepted.assert_outcomes(passed=1)
    accepted.stdout.fnmatch_lines([f"--accept-regression={KEY}:acc:C1 named no regressed entry of this run: nothing "
                                   "was lowered for it*"])
    assert f"--accept-regression={KEY}:acc:c0 named" not in accepted.stdout.str()
    accepted.stdout.fnmatch_lines(["*acc [[]c0]: lowered (regression accepted: c1 fix traded for c0 and c2) "
                                   "0.6867 → 0.6067 (accepts -0.0800)*"])
    anchors = {a["category"]: a for a in stored(releases)["ratchet"]["entries"]}
    assert {c for c, a in anchors.items() if a["accepted"] is not None} == {"c0", "c2"}
    assert anchors["c0"]["accepted"]["why"] == "c1 fix traded for c0 and c2"
    assert anchors[None]["recording"] != stored(releases)["ratchet"]["recording"]  # overall: not named, kept
    gate(releases, 3).assert_outcomes(passed=1)


@pytest.mark.parametrize("value", ["quiz/ratchet", "ratchet:acc:c0", "quiz/ratchet:acc:c0:more"])
def test_a_malformed_acceptance_is_a_usage_error_naming_it(releases, value):
    result = gate(releases, 1, "--snapshot-update", f"--accept-regression={value}", "--accept-reason=why")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--accept-regression='{value}': expected*"])


def test_early_stop_and_a_merge_compare_each_entry_with_its_anchor(releases, capsys):
    """Release 3 is within the band of release 2's values; only the entries' anchors (release 1's recording, kept
    in the ratcheted file) show its c0 and c2 regressions. An early stop and a shard's merge must see them too."""
    from pytest_modelbench.__main__ import main

    gate(releases, 1, "--snapshot-update").assert_outcomes(passed=1)
    gate(releases, 2, "--snapshot-update").assert_outcomes(passed=1)
    assert "ratchet" in stored(releases)

    early = gate(releases, 3, "--early-stop")
    early.assert_outcomes(failed=1)
    early.stdout.fnmatch_lines(["*acc*c0*0.6867*regressed*", "*acc*c2*0.6900*regressed*"])

    record = releases.path / "shard.json"
    gate(releases, 3, "--shard=1/1", f"--run-record={record}").assert_outcomes(failed=1)
    capsys.readouterr()
    assert main(["merge", str(record), f"--results-json={releases.path / 'merged.json'}", "--",
                 "--gate-margin=0.03"]) == 1
    entries = json.loads((releases.path / "merged.json").read_text())["gate"][KEY]
    assert entries["status"] == "regressed"
    assert "c0" in capsys.readouterr().out  # the merge names the regressed entry
