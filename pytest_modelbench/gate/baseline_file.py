# Over 400 lines: one file format, its writer and its validating reader, kept side by side so they agree key for key.
"""A stored baseline's file: its JSON layout, writing it, and reading it back with validation that names the file
on any problem (the data model is baseline.py's).

One file per task and baseline name (``baselines/<name>/<suite>/<task>.json``). It holds, per metric, the
value, stderr and n overall and per category; the per-document outcomes the paired tests need (document hash →
doc id, category, one value per metric; for bleu/chrf/ter a list, the sentence statistics of the corpus score; for a
process_results list value (IFEval's per-instruction outcomes, metric flagged "lists") a list of its own length); the
tolerance in force when it was recorded; optionally its noise floor (--noise-floor: per entry, how much it moved when
the same checkpoint was scored a second time); and provenance (model and weights fingerprint, task config hash, dataset
fingerprint, limit, few-shot count, scoring protocol, dtype, batch size, package versions, date). A ``checksum`` over the canonical content makes any hand edit or partial
write detectable.

Layout (abridged)::

    {
      "format": "pytest-modelbench-baseline/1",
      "task": "bangla_mmlu", "suite": "bangla", "baseline_name": "default",
      "provenance": {"model": "org/ckpt-v1", "model_fingerprint": "hub:org/ckpt-v1@3f2a...", ...},
      "gate": {"absolute_margin": 0.01, "relative_margin": 0.0, "alpha": 0.05, "tasks": 21, "weight": 1.0,
               "total_weight": 21.0, "metric_margins": {"acc": {"absolute": 0.01, "relative": 0.0}}},
      "metrics": {"acc": {"direction": "higher", "ideal": null, "binary": true}},
      "category_field": "subject",
      "scores": {"overall": {"acc": {"value": 0.41, "stderr": 0.02, "n": 500}},
                 "categories": {"biology": {"acc": {"value": 0.45, "stderr": 0.07, "n": 51}}, ...}},
      "documents": {
        "columns": ["doc_id", "category", "acc"],
        "rows": {
          "9c1e0a7d4b2f8e61": [0, "biology", 1],
          ...
        }
      },
      "noise_floor": {                                             (optional: recorded under --noise-floor)
        "measured_with": "batch size 1, plain path, score cache off (first scoring: batch size auto, fast path)",
        "entries": [{"metric": "acc", "category": null, "flip_rate": 0.004, "shift": 0.002}, ...]
      },
      "checksum": "sha256:..."
    }

Rows are written one per line in document order, so a flipped outcome is a one-line diff in review.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_modelbench.errors import BaselineError
from pytest_modelbench.gate.baseline import (
    Acceptance, BaselineRecord, EntryAnchor, MetricInfo, NoiseEntry, NoiseFloor, Ratchet, Recording, Summary,
    Tolerance,
)
from pytest_modelbench.gate.provenance import Provenance
from pytest_modelbench.metrics.registry import Margin

FORMAT = "pytest-modelbench-baseline/1"
# A record with per-entry anchors (gate/ratchet.py): its `ratchet` block. A record without one is still written as /1.
FORMAT_RATCHET = "pytest-modelbench-baseline/2"
CATEGORY_COLUMN = "category"
DOC_ID_COLUMN = "doc_id"
_HASH_RE = re.compile(r"^[0-9a-f]{16}(#[1-9][0-9]*)?$")
_RECREATE_HINT = "restore it from version control, or re-create it with --snapshot-update"


# --------------------------------------------------------------------------- serialization


def _number(value: float | np.ndarray, binary: bool) -> int | float | list[float] | None:
    if np.ndim(value):  # a corpus score's per-document statistics (metrics/translation.py), or a list value
        return [float(item) for item in value]
    if math.isnan(value):  # a group metric on a document of a task that does not score it
        return None
    return int(value) if binary else float(value)


def _metric_json(metric: MetricInfo) -> dict[str, Any]:
    block: dict[str, Any] = {"direction": metric.direction, "ideal": metric.ideal, "binary": metric.binary}
    if metric.aggregate:
        block["aggregate"] = True
    if not metric.per_document:
        block["per_document"] = False
    if metric.lists:
        block["lists"] = True
    return block


def _summary_json(summary: Summary) -> dict[str, Any]:
    return {"value": summary.value, "stderr": summary.stderr, "n": summary.n}


def _columns(record: BaselineRecord) -> list[str]:
    columns = [DOC_ID_COLUMN]
    if record.category_field is not None:
        columns.append(CATEGORY_COLUMN)
    return columns + [m.name for m in record.row_metrics]


def _rows(record: BaselineRecord) -> dict[str, list[Any]]:
    rows = {}
    metrics = record.row_metrics
    for i, key in enumerate(record.doc_keys):
        row: list[Any] = [record.doc_ids[i]]
        if record.category_field is not None:
            row.append(record.doc_categories[i])
        row += [_number(record.values[m.name][i], m.binary) for m in metrics]
        rows[key] = row
    return rows


def to_document(record: BaselineRecord) -> dict[str, Any]:
    """The JSON document (without checksum)."""
    p = record.provenance
    document = {
        "format": FORMAT,
        "task": record.task,
        "suite": record.suite,
        "baseline_name": record.baseline_name,
        "provenance": {
            "model": p.model,
            "model_fingerprint": p.model_fingerprint,
            "task_config_hash": p.task_config_hash,
            "data_fingerprint": p.data_fingerprint,
            "limit": p.limit,
            "num_fewshot": p.num_fewshot,
            "scoring_protocol": p.scoring_protocol,
            "dtype": p.dtype,
            "batch_size": p.batch_size,
            "device": p.device,
            "packages": dict(sorted(p.packages.items())),
            "created": p.created,
            **({"sampling": p.sampling} if p.sampling else {}),  # only a sampled task's: other files stay as they were
        },
        "gate": {
            "absolute_margin": record.tolerance.absolute_margin,
            "relative_margin": record.tolerance.relative_margin,
            "alpha": record.tolerance.alpha,
            "tasks": record.tolerance.task_count,
            "weight": record.tolerance.weight,
            "total_weight": record.tolerance.total_weight,
            "metric_margins": {
                name: {"absolute": m.absolute, "relative": m.relative}
                for name, m in sorted(record.tolerance.metric_margins.items())
            },
        },
        "metrics": {m.name: _metric_json(m) for m in record.metrics},
        "category_field": record.category_field,
        **({"category_members": {k: list(v) for k, v in record.category_members.items()}}
           if record.category_members else {}),
        "scores": {
            "overall": {name: _summary_json(s) for name, s in record.overall.items()},
            "categories": {
                category: {name: _summary_json(s) for name, s in block.items()}
                for category, block in sorted(record.categories.items())
            },
        },
        "documents": {"columns": _columns(record), "rows": _rows(record)},
        **({"noise_floor": _noise_floor_json(record.noise_floor)} if record.noise_floor is not None else {}),
        **({"ratchet": _ratchet_json(record)} if record.ratchet is not None else {}),
    }
    if record.ratchet is not None:
        document["format"] = FORMAT_RATCHET
    return document


def _ratchet_json(record: BaselineRecord) -> dict[str, Any]:
    ratchet = record.ratchet
    assert ratchet is not None
    return {
        "recording": ratchet.recording,
        "reset": None if ratchet.reset is None else {"when": ratchet.reset[0], "why": ratchet.reset[1]},
        "entries": [
            {"metric": a.metric, "category": a.category, "recording": a.recording, "origin": a.origin,
             "origin_created": a.origin_created,
             "accepted": None if a.accepted is None else {"when": a.accepted.when, "why": a.accepted.why,
                                                          "previous": a.accepted.previous, "value": a.accepted.value}}
            for a in ratchet.entries
        ],
        "earlier": [
            {"id": r.id, "model": r.model, "created": r.created,
             "columns": {m.name: [_number(v, m.binary) for v in r.values[m.name]] for m in record.row_metrics}}
            for r in ratchet.earlier
        ],
    }


def _noise_floor_json(floor: NoiseFloor) -> dict[str, Any]:
    return {
        "measured_with": floor.measured_with,
        "entries": [{"metric": e.metric, "category": e.category, "flip_rate": e.flip_rate, "shift": e.shift}
                    for e in floor.entries],
    }


def checksum(document: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(document, without=("checksum",))).hexdigest()


def canonical_json(document: Mapping[str, Any], *, without: Sequence[str]) -> bytes:
    """The document's fields but `without` as canonical JSON (sorted keys, no spaces, UTF-8): the bytes a checksum,
    digest or signature covers, whatever the file's layout."""
    body = {k: v for k, v in document.items() if k not in without}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _render(value: Any, level: int = 0) -> str:
    """JSON with 2-space indents where a container holding only scalars stays on one line (a row, a summary), and so
    does a list whose items are scalars or lists of scalars (a row holding a corpus score's sentence statistics)."""
    if isinstance(value, (dict, list)) and value:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        if all(not isinstance(v, (dict, list)) or not v or (isinstance(value, list) and _flat(v)) for _, v in items):
            return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
        pad, inner = "  " * level, "  " * (level + 1)
        if isinstance(value, dict):
            body = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_render(v, level + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(body) + f"\n{pad}}}"
        body = [f"{inner}{_render(v, level + 1)}" for v in value]
        return "[\n" + ",\n".join(body) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _flat(value: Any) -> bool:
    return isinstance(value, list) and not any(isinstance(item, (dict, list)) for item in value)


def dumps(record: BaselineRecord) -> str:
    """Readable, diff-friendly JSON: indented, one document row (or summary) per line, checksum last."""
    document = to_document(record)
    document["checksum"] = checksum(document)
    return _render(document) + "\n"


# --------------------------------------------------------------------------- parsing and validation


class _Invalid(Exception):
    pass


class _NonFinite(Exception):
    """NaN, Infinity or an overflowing literal such as 1e999: Python's json reads them, JSON does not allow them."""


def _reject_non_finite(name: str) -> float:
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise _Invalid(message)


def _get(mapping: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    label = f"{where}.{key}" if where else key
    _require(isinstance(mapping, dict), f"key '{where}' must be an object")
    _require(key in mapping, f"key '{label}' is missing")
    value = mapping[key]
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    _require(ok, f"key '{label}' has the wrong type ({type(value).__name__})")
    return value


def _optional_number(value: Any, label: str) -> float | None:
    if value is None:
        return None
    _require(isinstance(value, (int, float)) and not isinstance(value, bool), f"key '{label}' must be a number or null")
    _require(math.isfinite(value), f"key '{label}' must be finite")
    return float(value)


def _cell(value: Any, metric: MetricInfo, key: str) -> float | list[float]:
    """A document's value of a metric: a number, or for an aggregate metric a list of numbers (the per-document
    statistics of a corpus score, metrics/translation.py)."""
    label = f"documents.rows.{key}.{metric.name}"
    if metric.lists:  # any length, empty included; every item a finite number
        _require(isinstance(value, list) and None not in value, f"document {key}: '{metric.name}' must be a list of "
                 "numbers")
        return [_optional_number(item, label) for item in value]
    if isinstance(value, list) and metric.aggregate:
        _require(bool(value) and None not in value, f"document {key}: '{metric.name}' must be a list of numbers")
        return [_optional_number(item, label) for item in value]
    number = _optional_number(value, label)
    if number is None:  # counted against the metric's n (a group's task that does not score it)
        return math.nan
    if metric.binary:
        _require(number in (0.0, 1.0), f"document {key}: '{metric.name}' is binary, found {value!r}")
    return number


def _column(cells: list[Any], name: str, lists: bool = False) -> np.ndarray:
    if lists:  # one float array per document, each of its own length
        column = np.empty(len(cells), dtype=object)
        for i, cell in enumerate(cells):
            column[i] = np.array(cell, dtype=float)
        return column
    shapes = {len(cell) if isinstance(cell, list) else None for cell in cells}
    _require(len(shapes) <= 1, f"key 'documents.rows': the documents' values of '{name}' differ in shape")
    return np.array(cells, dtype=float) if cells else np.empty(0)


def _parse_summary(raw: Any, label: str) -> Summary:
    _require(isinstance(raw, dict), f"key '{label}' must be an object")
    n = _get(raw, "n", int, label)
    _require(n >= 0, f"key '{label}.n' must be >= 0")
    return Summary(_optional_number(raw.get("value"), f"{label}.value"), _optional_number(raw.get("stderr"), f"{label}.stderr"), n)


def parse(text: str, source: str | os.PathLike) -> BaselineRecord:
    """Parse and validate a stored baseline; any problem is a BaselineError naming `source`."""
    record, problem = parse_or_problem(text)
    if problem is not None:
        raise BaselineError(f"{source}: {problem}")
    return record


def parse_or_problem(text: str) -> tuple[BaselineRecord | None, str | None]:
    """(record, None) for a valid baseline, else (None, what is wrong with it) — without the file name."""
    try:
        document = json.loads(text, parse_constant=_reject_non_finite, parse_float=_finite_float)
    except _NonFinite as exc:
        return None, f"invalid baseline: {exc} is not a number JSON allows (a baseline holds finite numbers); {_RECREATE_HINT}"
    except json.JSONDecodeError as exc:
        return None, (
            f"corrupt baseline, not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); {_RECREATE_HINT}"
        )
    try:
        return _parse_document(document), None
    except _Invalid as exc:
        return None, f"invalid baseline: {exc}; {_RECREATE_HINT}"


def _parse_document(document: Any) -> BaselineRecord:
    _require(isinstance(document, dict), "the file must hold a JSON object")
    fmt = document.get("format")
    _require(fmt in (FORMAT, FORMAT_RATCHET),
             f"unsupported format {fmt!r} (this version reads {FORMAT!r} and {FORMAT_RATCHET!r})")
    _require(("ratchet" in document) == (fmt == FORMAT_RATCHET),
             f"key 'ratchet' belongs to format {FORMAT_RATCHET!r} and only there")
    stored_sum = document.get("checksum")
    _require(isinstance(stored_sum, str), "key 'checksum' is missing")
    _require(
        stored_sum == checksum(document),
        "checksum mismatch: the file was edited by hand or damaged (baselines are written only by "
        "--snapshot-update)",
    )
    task = _get(document, "task", str, "")
    suite = _get(document, "suite", str, "")
    name = _get(document, "baseline_name", str, "")

    raw_p = _get(document, "provenance", dict, "")
    limit = raw_p.get("limit")
    _require(limit is None or (isinstance(limit, int) and not isinstance(limit, bool)), "key 'provenance.limit' must be an integer or null")
    batch_size = raw_p.get("batch_size")
    _require(isinstance(batch_size, (int, str)) and not isinstance(batch_size, bool), "key 'provenance.batch_size' must be an integer or 'auto'")
    packages = raw_p.get("packages", {})
    _require(isinstance(packages, dict) and all(isinstance(v, str) for v in packages.values()), "key 'provenance.packages' must map names to versions")
    provenance = Provenance(
        model=_get(raw_p, "model", str, "provenance"),
        model_fingerprint=_get(raw_p, "model_fingerprint", str, "provenance"),
        task_config_hash=_get(raw_p, "task_config_hash", str, "provenance"),
        data_fingerprint=_get(raw_p, "data_fingerprint", str, "provenance"),
        limit=limit,
        num_fewshot=_get(raw_p, "num_fewshot", int, "provenance"),
        scoring_protocol=_get(raw_p, "scoring_protocol", str, "provenance"),
        dtype=_get(raw_p, "dtype", str, "provenance"),
        batch_size=batch_size,
        device=_get(raw_p, "device", str, "provenance"),
        packages=packages,
        created=_get(raw_p, "created", str, "provenance"),
        sampling=_get(raw_p, "sampling", str, "provenance") if "sampling" in raw_p else "",
    )

    raw_gate = _get(document, "gate", dict, "")
    # "tasks", "metric_margins", "weight" and "total_weight" were added later: baselines recorded without them read
    # as one task, no per-metric margins, every task weighing 1 (the gate uses the candidate's settings in any case).
    tasks = raw_gate.get("tasks", 1)
    _require(isinstance(tasks, int) and not isinstance(tasks, bool) and tasks >= 1, "key 'gate.tasks' must be an integer >= 1")
    weight = float(_get(raw_gate, "weight", float, "gate")) if "weight" in raw_gate else 1.0
    total_weight = float(_get(raw_gate, "total_weight", float, "gate")) if "total_weight" in raw_gate else None
    _require(weight > 0 and (total_weight is None or total_weight >= weight),
             "keys 'gate.weight' and 'gate.total_weight' must be > 0, the total at least the weight")
    raw_margins = raw_gate.get("metric_margins", {})
    _require(isinstance(raw_margins, dict), "key 'gate.metric_margins' must be an object")
    tolerance = Tolerance(
        absolute_margin=float(_get(raw_gate, "absolute_margin", float, "gate")),
        relative_margin=float(_get(raw_gate, "relative_margin", float, "gate")),
        alpha=float(_get(raw_gate, "alpha", float, "gate")),
        task_count=tasks,
        weight=weight,
        total_weight=total_weight,
        metric_margins={
            name: Margin(float(_get(spec, "absolute", float, f"gate.metric_margins.{name}")),
                         float(_get(spec, "relative", float, f"gate.metric_margins.{name}")))
            for name, spec in raw_margins.items()
        },
    )

    raw_metrics = _get(document, "metrics", dict, "")
    _require(bool(raw_metrics), "key 'metrics' must name at least one metric")
    metrics = []
    for metric_name, spec in raw_metrics.items():
        label = f"metrics.{metric_name}"
        direction = _get(spec, "direction", str, label)
        _require(direction in ("higher", "lower", "ideal"), f"key '{label}.direction' must be higher, lower or ideal")
        ideal = _optional_number(spec.get("ideal"), f"{label}.ideal")
        _require((ideal is not None) == (direction == "ideal"), f"key '{label}.ideal' must be set exactly for an ideal direction")
        aggregate = spec.get("aggregate", False)
        per_document = spec.get("per_document", True)
        lists = spec.get("lists", False)
        _require(all(isinstance(flag, bool) for flag in (aggregate, per_document, lists)),
                 f"key '{label}' has a bad flag")
        _require(per_document or aggregate, f"key '{label}': a metric without per-document values needs an aggregate")
        _require(not lists or (aggregate and per_document), f"key '{label}': a metric with lists needs an aggregate")
        binary = _get(spec, "binary", bool, label)
        metrics.append(MetricInfo(metric_name, direction, ideal, binary, aggregate, per_document, lists))
    metric_names = [m.name for m in metrics]
    row_metrics = [m for m in metrics if m.per_document]

    category_field = document.get("category_field")
    _require(category_field is None or isinstance(category_field, str), "key 'category_field' must be a string or null")

    raw_scores = _get(document, "scores", dict, "")
    raw_overall = _get(raw_scores, "overall", dict, "scores")
    _require(sorted(raw_overall) == sorted(metric_names), "key 'scores.overall' must hold exactly the metrics listed in 'metrics'")
    overall = {m: _parse_summary(raw_overall[m], f"scores.overall.{m}") for m in metric_names}
    categories = {}
    for category, block in _get(raw_scores, "categories", dict, "scores").items():
        _require(isinstance(block, dict) and sorted(block) == sorted(metric_names), f"key 'scores.categories.{category}' must hold one entry per metric")
        categories[category] = {m: _parse_summary(block[m], f"scores.categories.{category}.{m}") for m in metric_names}

    raw_docs = _get(document, "documents", dict, "")
    columns = _get(raw_docs, "columns", list, "documents")
    expected = [DOC_ID_COLUMN] + ([CATEGORY_COLUMN] if category_field is not None else []) + [m.name for m in row_metrics]
    _require(columns == expected, f"key 'documents.columns' must be {expected}, found {columns}")
    rows = _get(raw_docs, "rows", dict, "documents")
    has_category = category_field is not None
    first_metric = 2 if has_category else 1
    doc_ids, doc_categories = [], []
    cells: dict[str, list[Any]] = {m.name: [] for m in row_metrics}
    for key, row in rows.items():
        _require(bool(_HASH_RE.match(key)), f"document key {key!r} is not a document hash")
        _require(isinstance(row, list) and len(row) == len(columns), f"document {key}: expected {len(columns)} values")
        _require(isinstance(row[0], int) and not isinstance(row[0], bool), f"document {key}: doc_id must be an integer")
        doc_ids.append(row[0])
        if has_category:
            _require(isinstance(row[1], str), f"document {key}: category must be a string")
            doc_categories.append(row[1])
        else:
            doc_categories.append(None)
        for metric, value in zip(row_metrics, row[first_metric:]):
            cells[metric.name].append(_cell(value, metric, key))
    values = {m.name: _column(cells[m.name], m.name, m.lists) for m in row_metrics}
    raw_members = document.get("category_members", {})
    _require(isinstance(raw_members, dict) and all(
        isinstance(v, list) and v and all(isinstance(c, str) and c in doc_categories for c in v)
        for v in raw_members.values()), "key 'category_members' must map categories to lists of document categories")

    for info in metrics:
        metric = info.name
        summary = overall[metric]
        scored = len(rows)
        if info.per_document and values[metric].ndim == 1 and not info.lists:
            scored = int(np.count_nonzero(~np.isnan(values[metric])))
        counted = f"there are {scored} documents" if scored == len(rows) else f"{scored} of {len(rows)} documents have a value"
        _require(summary.n == scored, f"key 'scores.overall.{metric}.n' is {summary.n} but {counted}")
        if scored and summary.value is not None and info.per_document and not info.aggregate:
            recomputed = float(np.nanmean(values[metric]))
            _require(
                math.isclose(summary.value, recomputed, rel_tol=1e-9, abs_tol=1e-12),
                f"key 'scores.overall.{metric}.value' ({summary.value}) does not match the per-document outcomes ({recomputed})",
            )

    noise_floor = _parse_noise_floor(document["noise_floor"]) if "noise_floor" in document else None
    ratchet = _parse_ratchet(document["ratchet"], row_metrics, tuple(rows)) if "ratchet" in document else None

    return BaselineRecord(
        task=task,
        suite=suite,
        baseline_name=name,
        provenance=provenance,
        tolerance=tolerance,
        metrics=tuple(metrics),
        category_field=category_field,
        overall=overall,
        categories=categories,
        doc_keys=tuple(rows),
        doc_ids=tuple(doc_ids),
        doc_categories=tuple(doc_categories),
        values=values,
        category_members={k: tuple(v) for k, v in raw_members.items()},
        noise_floor=noise_floor,
        ratchet=ratchet,
    )


def _optional_text(raw: Any, key: str, label: str) -> str | None:
    _require(key in raw and (raw[key] is None or isinstance(raw[key], str)), f"key '{label}.{key}' must be a string "
             "or null")
    return raw[key]


def _parse_ratchet(raw: Any, row_metrics: Sequence[MetricInfo], keys: tuple[str, ...]) -> Ratchet:
    """The `ratchet` block: the record's own recording id, why its anchors were last reset, each entry's anchor (a
    recording listed here, once per entry) and the earlier recordings' per-document columns, in document order."""
    _require(isinstance(raw, dict), "key 'ratchet' must be an object")
    recording = _get(raw, "recording", str, "ratchet")
    reset = raw.get("reset")
    _require(reset is None or isinstance(reset, dict), "key 'ratchet.reset' must be an object or null")
    if reset is not None:
        reset = (_get(reset, "when", str, "ratchet.reset"), _get(reset, "why", str, "ratchet.reset"))
    earlier = []
    for i, item in enumerate(_get(raw, "earlier", list, "ratchet")):
        label = f"ratchet.earlier[{i}]"
        _require(isinstance(item, dict), f"key '{label}' must be an object")
        columns = _get(item, "columns", dict, label)
        _require(sorted(columns) == sorted(m.name for m in row_metrics),
                 f"key '{label}.columns' must hold one column per metric stored per document")
        cells = {}
        for metric in row_metrics:
            column = columns[metric.name]
            _require(isinstance(column, list) and len(column) == len(keys),
                     f"key '{label}.columns.{metric.name}' must hold one value per document ({len(keys)})")
            cells[metric.name] = _column([_cell(v, metric, k) for v, k in zip(column, keys)], metric.name, metric.lists)
        earlier.append(Recording(_get(item, "id", str, label), _get(item, "model", str, label),
                                 _get(item, "created", str, label), cells))
    ids = [recording] + [r.id for r in earlier]
    _require(all(i.isdigit() for i in ids), "key 'ratchet': a recording id must be a string of digits")
    _require(len(set(ids)) == len(ids), "key 'ratchet': a recording id is listed twice")
    entries, seen = [], set()
    for i, item in enumerate(_get(raw, "entries", list, "ratchet")):
        label = f"ratchet.entries[{i}]"
        _require(isinstance(item, dict), f"key '{label}' must be an object")
        metric = _get(item, "metric", str, label)
        category = _optional_text(item, "category", label)
        _require((metric, category) not in seen, f"key '{label}': entry {metric} [{category}] is listed twice")
        seen.add((metric, category))
        anchor_id = _get(item, "recording", str, label)
        _require(anchor_id in ids, f"key '{label}.recording' names no recording of this file ({anchor_id!r})")
        accepted = item.get("accepted")
        _require(accepted is None or isinstance(accepted, dict), f"key '{label}.accepted' must be an object or null")
        if accepted is not None:
            where = f"{label}.accepted"
            accepted = Acceptance(_get(accepted, "when", str, where), _get(accepted, "why", str, where),
                                  float(_get(accepted, "previous", float, where)),
                                  float(_get(accepted, "value", float, where)))
        entries.append(EntryAnchor(metric, category, anchor_id, float(_get(item, "origin", float, label)),
                                   _get(item, "origin_created", str, label), accepted))
    return Ratchet(recording, tuple(earlier), tuple(entries), reset)


def _parse_noise_floor(raw: Any) -> NoiseFloor:
    """The optional `noise_floor` block (--noise-floor): how it was measured, and per entry its flip rate (a share,
    0 to 1) and shift (>= 0), each entry once."""
    _require(isinstance(raw, dict), "key 'noise_floor' must be an object")
    measured_with = _get(raw, "measured_with", str, "noise_floor")
    raw_entries = _get(raw, "entries", list, "noise_floor")
    entries, seen = [], set()
    for i, item in enumerate(raw_entries):
        label = f"noise_floor.entries[{i}]"
        _require(isinstance(item, dict), f"key '{label}' must be an object")
        metric = _get(item, "metric", str, label)
        _require("category" in item, f"key '{label}.category' is missing")
        category = item["category"]
        _require(category is None or isinstance(category, str), f"key '{label}.category' must be a string or null")
        flip_rate = float(_get(item, "flip_rate", float, label))
        _require(0.0 <= flip_rate <= 1.0, f"key '{label}.flip_rate' must lie between 0 and 1, got {flip_rate}")
        shift = float(_get(item, "shift", float, label))
        _require(shift >= 0.0, f"key '{label}.shift' must be >= 0, got {shift}")
        _require((metric, category) not in seen, f"key '{label}': entry {metric} [{category}] is listed twice")
        seen.add((metric, category))
        entries.append(NoiseEntry(metric, category, flip_rate, shift))
    return NoiseFloor(measured_with, tuple(entries))


def read(path: Path) -> BaselineRecord | None:
    """Parse the baseline at `path`, or None when there is none."""
    text = read_text(path)
    return None if text is None else parse(text, path)


def read_text(path: Path) -> str | None:
    """The file's text (undecodable bytes replaced, so they fail validation), or None when there is none."""
    try:
        return Path(path).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline ({exc.strerror or exc})") from None

