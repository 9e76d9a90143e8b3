"""Presenting evaluations: the terminal summary table and the results JSON (lm-eval-like keys)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from pytest_modelbench.evaluation import TaskEvaluation
from pytest_modelbench.metrics.aggregate import MetricSummary

RESULTS_FORMAT = "pytest-modelbench-results/1"  # bump on an incompatible change, with the schema
RESULTS_SCHEMA = Path(__file__).parent / "schemas" / "results.schema.json"


def format_summary(summary: MetricSummary) -> str:
    if summary.value is None:
        return "empty"
    stderr = f" ± {summary.stderr:.4f}" if summary.stderr is not None else ""
    return f"{summary.value:.4f}{stderr}"


def summary_rows(evaluations: Iterable[TaskEvaluation]) -> list[tuple[str, str, str, str, str]]:
    """Rows of (task, category, metric, value ± stderr, n); category '' is the whole task."""
    rows = []
    for evaluation in evaluations:
        scores = evaluation.scores
        for name, summary in scores.overall.items():
            rows.append((scores.task, "", name, format_summary(summary), str(summary.n)))
        for category, metrics in scores.by_category.items():
            for name, summary in metrics.items():
                rows.append((scores.task, category, name, format_summary(summary), str(summary.n)))
    return rows


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(header), line(tuple("-" * w for w in widths)), *(line(r) for r in rows)]


def _metric_block(metrics: dict[str, MetricSummary]) -> dict[str, Any]:
    block: dict[str, Any] = {}
    for name, summary in metrics.items():
        block[name] = summary.value
        block[f"{name}_stderr"] = summary.stderr
    block["n"] = max((s.n for s in metrics.values()), default=0)
    return block


def results_document(
    evaluations: Iterable[TaskEvaluation], run_config: dict[str, Any], log_samples: bool,
    gate: dict[str, dict[str, Any]],
) -> dict:
    """`gate`: each gated task's outcome (gate/report.py, GateResult.as_json)."""
    evaluations = list(evaluations)
    document: dict[str, Any] = {
        "format": RESULTS_FORMAT, "results": {}, "categories": {}, "n-shot": {}, "versions": {}, "config": run_config,
        "gate": gate,
    }
    for evaluation in evaluations:
        task = evaluation.scores.task
        document["results"][task] = _metric_block(evaluation.scores.overall)
        if evaluation.scores.by_category:
            document["categories"][task] = {
                category: _metric_block(metrics) for category, metrics in evaluation.scores.by_category.items()
            }
        document["n-shot"][task] = evaluation.prepared.num_fewshot
        document["versions"][task] = evaluation.prepared.config.version
    if log_samples:
        document["samples"] = {evaluation.scores.task: _samples(evaluation) for evaluation in evaluations}
    return document


def _samples(evaluation: TaskEvaluation) -> list[dict[str, Any]]:
    per_document = evaluation.scores.per_document
    samples = [
        {
            "doc_id": doc.doc_id,
            "requests": [[doc.context, continuation] for continuation in doc.continuations],
            "loglikelihoods": lls,
            "metrics": {name: values[i].tolist() for name, values in per_document.items()},
        }
        for i, (doc, lls) in enumerate(zip(evaluation.prepared.documents, evaluation.loglikelihoods))
    ]
    if evaluation.greedy is not None:  # loglikelihood: lm-eval's response is the log-likelihood and this flag
        for sample, greedy in zip(samples, evaluation.greedy):
            sample["is_greedy"] = greedy
    if evaluation.generations is not None:  # generate_until: the context, the raw and the filtered answers
        for sample, doc, generation, answers in zip(samples, evaluation.prepared.documents, evaluation.generations,
                                                    evaluation.answers):
            sample.update(context=doc.context, target=doc.gold, generation=generation, filtered=answers)
    return samples


def json_text(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
