"""--html-report: a regressed bias run's page, rendered in a real headless Chromium (charts drawn, no errors)."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from tests.fixtures.headless_browser import INSTALL_HINT, chromium, png_pixels, render
from tests.fixtures.shipped_suites import copy_suite
from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    _one_torch_thread,
    bad_model,
    bias_probe_mirror,
)

# task -> its gated metrics (CrowS-Pairs' two and its derived stereotype_preference): one chart each
TASKS = {"crows_pairs_english": 3, "stereoset_intrasentence": 3}


def test_regressed_bias_run_html_report_renders_its_charts_in_chromium(pytester, tiny_model, bad_model,
                                                                       bias_probe_mirror, tmp_path):
    copy_suite("bias", pytester.path / "suites" / "bias")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    common = ("-p", "no:cacheprovider", f"--data-dir={bias_probe_mirror}", "-k", " or ".join(TASKS))
    pytester.runpytest(f"--model={tiny_model}", *common, "--snapshot-update").assert_outcomes(passed=2, deselected=2)

    page = pytester.path / "out" / "gate.html"
    result = pytester.runpytest(f"--model={bad_model}", *common, "--html-report=out/gate.html")
    result.assert_outcomes(failed=2, deselected=2)
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "gate <b class=\"failed\">failed</b>" in html
    for task in TASKS:  # both runs' provenance
        assert f"baseline (baselines/default/bias/{task}.json)" in html
    assert str(tiny_model) in html and str(bad_model) in html
    # the probe's pairs: half flip to the stereotyped sentence under the bad model; they are listed with their text
    rows = (bias_probe_mirror / "jannalu/crows_pairs_multilingual/english/test.jsonl").read_text().splitlines()
    sent_more = {json.loads(row)["sent_more"] for row in rows}
    crows = html[html.index('id="task-bias/crows_pairs_english"'):]
    crows = crows[:crows.index("</section>")]
    listed = [unescape(text) for text in re.findall(r"<pre class=\"gold\">0: (.*?) ← gold</pre>", crows)]
    assert len(listed) >= 5 and set(listed) <= sent_more and crows.count("<b>flipped</b>") >= 5

    browser = chromium()
    if browser is None:
        pytest.skip(f"chromium not found: {INSTALL_HINT}")
    rendering = render(browser, page, tmp_path)
    charts = re.findall(r'<svg class="delta-chart" data-metric="([^"]+)"', rendering.dom)
    assert len(charts) == sum(TASKS.values()), charts
    assert {"pct_stereotype", "likelihood_diff", "stereotype_preference", "lms", "ss", "icat"} == set(charts)
    assert rendering.dom.count('class="entry regressed"') >= 3  # pct_stereotype, lms and icat overall at least
    assert not re.search(r"Uncaught|CONSOLE\(\d+\).*[Ee]rror|Refused to", rendering.console), rendering.console
    pixels = png_pixels(rendering.screenshot)
    assert pixels.shape[:2] == (2000, 1280) and rendering.screenshot.stat().st_size > 20_000
    colours = {tuple(p) for p in pixels[::7, ::7, :3].reshape(-1, 3).tolist()}
    assert len(colours) > 20  # text, charts, badges: not a blank page
    red = (pixels[..., 0] > 170) & (pixels[..., 1] < 80) & (pixels[..., 2] < 80)
    assert red.sum() > 50  # the regressions are drawn in red
