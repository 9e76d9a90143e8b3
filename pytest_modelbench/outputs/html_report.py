"""--html-report: the gate results as one self-contained HTML page (inline CSS and SVG, no script, no network).

Built from the same `GateResult` records as the markdown report. Per task: one chart per metric of each category's
change from the baseline (oriented, negative is worse) with its 95% interval (delta ± 1.96 standard errors) and the
margin band, regressions in red; the score table (a task scored but not compared, e.g. after a --limit change: this
run's scores); both runs' provenance, the rows that differ highlighted; the most changed documents of each category
(gate/changed_documents.py; for a bias pair, a flipped preference). The chart legend is printed only with charts.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any, Sequence

from pytest_modelbench.gate.provenance import COMPARABILITY_KEYS
from pytest_modelbench.gate.changed_documents import format_value
from pytest_modelbench.outputs.failure_messages import (
    LEGEND,
    SCORES_HEADER,
    TABLE_HEADER,
    compare_hint,
    entry_row,
    score_row,
)
from pytest_modelbench.gate.pooled import PooledEntry
from pytest_modelbench.gate.result import STATUS_COMPARED, STATUS_REBASELINE, GateResult, sorted_results
from pytest_modelbench.outputs.gate_summary import (
    POOLED_HEADER,
    POOLED_NOTE,
    alpha_share,
    baseline_ref_lines,
    error_rate_line,
    integrity_lines,
    pooled_rows,
    summary_counts,
)
from pytest_modelbench.text_format import format_delta, format_number

if TYPE_CHECKING:
    from pytest_modelbench.gate.decision import SessionOutcome

Z_95 = 1.959964  # two-sided 95% normal quantile: the interval drawn around each delta
VERDICT_COLOURS = {"regressed": "#c5221f", "error": "#7b1fa2",  # error: the run, not the model
                   "improved": "#188038", "inconclusive": "#e37400", "pass": "#1a73e8"}
CHART_WIDTH, LABEL_WIDTH, VALUE_WIDTH, ROW_HEIGHT, AXIS_HEIGHT = 760, 170, 90, 22, 34

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#202124;max-width:1200px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 6px;border-top:1px solid #dadce0;padding-top:14px}
h3{font-size:15px;margin:16px 0 6px}table{border-collapse:collapse;font-size:13px;margin:6px 0}
td,th{border:1px solid #dadce0;padding:3px 7px;text-align:left;vertical-align:top}th{background:#f1f3f4}
td.num{text-align:right;font-variant-numeric:tabular-nums}.badge{padding:1px 7px;border-radius:9px;color:#fff;font-size:12px}
.failed{color:#c5221f}.passed{color:#188038}.interrupted{color:#b06000}.note{color:#5f6368;font-size:13px}.legend{color:#5f6368;font-size:12px}
pre{white-space:pre-wrap;margin:0;font-size:12px}.gold{font-weight:600}svg text{font-size:11px;fill:#3c4043}
tr.differs td{background:#fef7e0}tr.differs.must-match td{background:#fce8e6;font-weight:600}
"""


def _badge(outcome: str) -> str:
    colour = VERDICT_COLOURS.get(outcome, "#5f6368")
    return f'<span class="badge" style="background:{colour}">{escape(outcome)}</span>'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = (),
           row_classes: Sequence[str] = ()) -> str:
    """A table of already-escaped cells; `numeric`: columns aligned right; `row_classes`: a class per row."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        (f'<tr class="{row_classes[r]}">' if r < len(row_classes) and row_classes[r] else "<tr>")
        + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for r, row in enumerate(rows)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _label(entry: dict[str, Any]) -> str:
    return "(all)" if entry["category"] is None else entry["category"]


def delta_chart(metric: str, entries: Sequence[dict[str, Any]]) -> str:
    """One metric's entries (overall first) as rows: margin band, 95% interval, delta; regressions red."""
    extent = max(max(abs(e["delta"]) + Z_95 * e["standard_error"], e["margin"]) for e in entries) * 1.1 or 1.0
    plot = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH
    height = AXIS_HEIGHT + ROW_HEIGHT * len(entries)

    def x(value: float) -> float:
        clipped = min(max(value, -extent), extent)
        return LABEL_WIDTH + (clipped + extent) / (2 * extent) * plot

    parts = [
        f'<svg class="delta-chart" data-metric="{escape(metric)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{CHART_WIDTH}" height="{height}" viewBox="0 0 {CHART_WIDTH} {height}" role="img">',
        f"<title>{escape(metric)}: change from the baseline per category (negative is worse)</title>",
    ]
    for tick in (-extent, -extent / 2, 0.0, extent / 2, extent):
        parts.append(f'<line x1="{x(tick):.1f}" y1="14" x2="{x(tick):.1f}" y2="{height}" stroke="#e8eaed"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="11" text-anchor="middle">{tick:+.3g}</text>')
    parts.append(f'<line x1="{x(0):.1f}" y1="14" x2="{x(0):.1f}" y2="{height}" stroke="#5f6368"/>')
    for row, entry in enumerate(entries):
        top = AXIS_HEIGHT - 12 + row * ROW_HEIGHT
        middle = top + ROW_HEIGHT / 2
        colour = VERDICT_COLOURS.get(entry["verdict"], "#5f6368")
        low, high = entry["delta"] - Z_95 * entry["standard_error"], entry["delta"] + Z_95 * entry["standard_error"]
        weight = "bold" if entry["verdict"] == "regressed" else "normal"
        parts += [
            f'<g class="entry {escape(entry["verdict"])}"><title>{escape(_label(entry))}: delta '
            f'{format_delta(entry["delta"])}, 95% interval [{low:+.4f}, {high:+.4f}], margin {format_number(entry["margin"])}, '
            f'{escape(entry["verdict"])}</title>',
            f'<rect class="margin-band" x="{x(-entry["margin"]):.1f}" y="{top + 3}" '
            f'width="{x(entry["margin"]) - x(-entry["margin"]):.1f}" height="{ROW_HEIGHT - 6}" fill="#e6f4ea"/>',
            f'<text x="{LABEL_WIDTH - 6}" y="{middle + 4}" text-anchor="end" font-weight="{weight}">'
            f"{escape(_label(entry))}</text>",
            f'<line class="interval" x1="{x(low):.1f}" y1="{middle}" x2="{x(high):.1f}" y2="{middle}" '
            f'stroke="{colour}" stroke-width="2"/>',
            f'<circle cx="{x(entry["delta"]):.1f}" cy="{middle}" r="4" fill="{colour}"/>',
            f'<text x="{CHART_WIDTH - VALUE_WIDTH + 8}" y="{middle + 4}" fill="{colour}">'
            f'{format_delta(entry["delta"])}{" ✗" if entry["verdict"] == "regressed" else ""}</text></g>',
        ]
    parts.append("</svg>")
    return "".join(parts)


def _charts(result: GateResult) -> str:
    metrics = list(dict.fromkeys(e["metric"] for e in result.entries))
    blocks = []
    for metric in metrics:
        rows = sorted((e for e in result.entries if e["metric"] == metric),
                      key=lambda e: (e["category"] is not None, e["category"] or ""))
        blocks.append(f"<h3>{escape(metric)} ({escape(rows[0]['direction'])})</h3>{delta_chart(metric, rows)}")
    return "".join(blocks)


def _score_table(result: GateResult) -> str:
    rows = [
        (escape(metric), escape(category), *numbers, _badge(verdict))
        for metric, category, *numbers, verdict in (
            entry_row(e)
            for e in sorted(result.entries, key=lambda e: (e["metric"], e["category"] is not None, e["category"] or ""))
        )
    ]
    return "<h3>Scores per category</h3>" + _table(TABLE_HEADER, rows, numeric=range(2, 9))


def _not_compared_scores(result: GateResult) -> str:
    rows = [(escape(metric), escape(category), *numbers) for metric, category, *numbers in map(score_row, result.scores)]
    return "<h3>Scores of this run (not compared)</h3>" + _table(SCORES_HEADER, rows, numeric=range(2, 5))


def _provenance(result: GateResult) -> str:
    """Both runs' provenance; rows that differ are highlighted, more strongly those a comparison needs equal."""
    baseline, candidate = result.baseline_provenance or {}, result.candidate_provenance or {}
    keys = list(dict.fromkeys([*baseline, *candidate]))
    rows, classes = [], []
    for key in keys:
        before, after = _plain(baseline.get(key, "-")), _plain(candidate.get(key, "-"))
        rows.append((escape(key), escape(before), escape(after)))
        differs = bool(baseline) and bool(candidate) and before != after
        classes.append("" if not differs else "differs must-match" if key in COMPARABILITY_KEYS else "differs")
    note = ""
    if any(classes):
        note = ('<p class="note">Highlighted: differs between the baseline and this run; in red, a setting that must '
                "match for the two to be compared (" + escape(", ".join(COMPARABILITY_KEYS.values())) + ").</p>")
    return ("<h3>Provenance</h3>" + _table(("", f"baseline ({result.baseline})", "candidate (this run)"), rows,
                                           row_classes=classes) + note)


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    return "-" if value is None else str(value)


def _document_text(document: dict[str, Any]) -> str:
    gold = document["gold"] if isinstance(document["gold"], list) else [document["gold"]]
    parts = [f"<pre>{escape(document['context'])}</pre>"] if document["context"] else []
    for i, choice in enumerate(document["choices"]):
        marker = ' class="gold"' if i in gold else ""
        parts.append(f"<pre{marker}>{i}: {escape(str(choice))}{' ← gold' if i in gold else ''}</pre>")
    return "".join(parts)


def _changes(document: dict[str, Any]) -> str:
    return "<br>".join(
        f"{escape(metric)} {format_value(change['baseline'])} → {format_value(change['candidate'])}"
        + (" <b>flipped</b>" if change["flipped"] else "")
        for metric, change in document["changes"].items()
    )


def _changed_documents(result: GateResult) -> str:
    if not result.changed_documents:
        return ""
    rows = [
        (escape("(none)" if d["category"] is None else d["category"]), str(d["doc_id"]), _changes(d), _document_text(d))
        for d in result.changed_documents
    ]
    return (
        "<h3>Most changed documents, per category</h3><p class=\"note\">Flipped outcomes first (for a bias pair: "
        "which sentence the model prefers), then the largest changes; the gold choice is the one the metric counts.</p>"
        + _table(("category", "doc", "change", "text"), rows)
    )


def _has_charts(result: GateResult) -> bool:
    return result.status == STATUS_COMPARED and bool(result.entries)


def _task_section(result: GateResult) -> str:
    parts = [f'<section class="task" id="task-{escape(result.task)}"><h2>{escape(result.task)} {_badge(result.outcome)}</h2>']
    if result.note:
        parts.append(f'<p class="note">{escape(result.note)}</p>')
    parts += [f'<p class="note">{escape(line.strip())}</p>' for line in integrity_lines(result)]
    if result.status == STATUS_REBASELINE:
        parts.append(f'<p class="note">{escape(compare_hint(result.baseline_name))}</p>')
    if _has_charts(result):
        parts += [_charts(result), _score_table(result)]
    elif result.scores:
        parts.append(_not_compared_scores(result))
    parts += [_provenance(result), _changed_documents(result), "</section>"]
    return "".join(parts)


def html_page(results: Sequence[GateResult], baseline_name: str, outcome: SessionOutcome,
              unused: Sequence[str] = (), pooled: Sequence[PooledEntry] = ()) -> str:
    """`outcome`: the session's (gate/decision.py), which its exit status says too."""
    results = sorted_results(results)
    head = f'Baseline <b>{escape(baseline_name)}</b> · gate <b class="{outcome.status}">{outcome.status}</b>'
    if results:
        head += f" · {len(results)} task(s): {escape(summary_counts(results))}"
    notes = [*outcome.reasons]
    notes += [line for line in (error_rate_line(results, pooled), *baseline_ref_lines(results)) if line]
    if unused:
        notes.append(f"Unused baselines ({len(unused)}): " + ", ".join(unused))
    overview = _table(
        ("task", "gate", "alpha share", "baseline file", "working tree differs from ref"),
        [(f'<a href="#task-{escape(r.task)}">{escape(r.task)}</a>', _badge(r.outcome), escape(alpha_share(r)),
          escape(r.baseline), "yes" if r.working_tree_differs else "-" if r.baseline_ref is None else "no")
         for r in results],
    )
    if pooled:
        overview += _table(POOLED_HEADER, [tuple(escape(c) for c in row[:-1]) + (_badge(row[-1]),)
                                           for row in pooled_rows(pooled)])
        overview += f'<p class="note">{escape(POOLED_NOTE)}</p>'
    body = "".join(_task_section(r) for r in results) if results else "<p>No modelbench task ran.</p>"
    legend = "" if not any(_has_charts(r) for r in results) else (
        '<p class="legend">Charts: each row is a category\'s change from the baseline (dot), its 95% interval '
        f"(line) and the margin band (green); a dot left of zero is worse. {escape(LEGEND)}</p>"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>pytest-modelbench gate: {outcome.status}</title><style>{STYLE}</style></head><body>"
        f"<h1>pytest-modelbench baseline gate</h1><p>{head}</p>"
        + "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
        + overview + body + legend + "</body></html>\n"
    )
