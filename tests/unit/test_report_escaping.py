"""The md report shows names and categories from task files and data as text: no HTML, link or table break passes
through to a rendered pull-request comment."""

from __future__ import annotations

import re

import numpy as np

from pytest_modelbench.gate.baseline import MetricInfo, Tolerance
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.decision import SessionOutcome
from pytest_modelbench.gate.result import GateResult
from pytest_modelbench.outputs.markdown import markdown
from tests.fixtures.gate_records import make_record

ACC = MetricInfo("acc", "higher", None, True)
HOSTILE = ['<img src=x onerror="alert(1)">', "[click me](https://example.invalid)", "a | b\n# heading",
           "**loud** _quiet_ `code`"]


def test_categories_with_markup_reach_the_md_report_as_text():
    categories = [HOSTILE[i % len(HOSTILE)] for i in range(400)]
    base = np.ones(400)
    cand = base.copy()
    cand[::3] = 0.0  # every category loses a third of its documents
    records = [make_record({"acc": v}, categories, metrics=[ACC], task="t") for v in (base, cand)]
    result = GateResult.from_comparison(compare(*records, Tolerance()), task="quiz/<b>t</b>", baseline="b.json",
                                        baseline_name="default")
    text = markdown([result], "default", SessionOutcome(("1 task(s) failed: quiz/<b>t</b>",)),
                    unused=["baselines/default/quiz/[x](y).json"])
    assert "<img" not in text and "<b>" not in text and "&lt;img" in text
    assert "](" not in text.replace("\\](", "")  # no link survives unescaped
    assert "\n# heading" not in text
    table = [line for line in text.splitlines() if line.startswith("| acc |")]
    assert len(table) == len(HOSTILE) + 1  # overall and each category
    for row in table:  # every row keeps the header's ten cells: no data pipe splits one
        assert len(re.findall(r"(?<!\\)\|", row)) == 11
    assert "**regressed**" in text  # the report's own emphasis is kept
