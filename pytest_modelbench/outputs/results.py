"""Presenting evaluations: the terminal summary table and the results JSON (lm-eval-like keys).

Both are built from `task_results`, each task's part in plain JSON data, so that under pytest-xdist a worker's
evaluations reach the controller (pytest_plugin/results_gathering.py) and both come out the same as in a single process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from pytest_modelbench.run.evaluation import TaskEvaluation
from pytest_modelbench.metrics.aggregate import MetricSummary
from pytest_modelbench.tasks.identity import TaskId

# bump on an incompatible change, with the schema; 2: tasks keyed by '<suite>/<task>' (1: by task name alone)
RESULTS_FORMAT = "pytest-modelbench-results/2"
RESULTS_SCHEMA = Path(__file__).parent.parent / "schemas" / "results.schema.json"


def format_summary(summary: MetricSummary) -> str:
    if summary.value is None:
        return "empty"
    stderr = f" ± {summary.stderr:.4f}" if summary.stderr is not None else ""
    return f"{summary.value:.4f}{stderr}"


def summary_rows(identity: TaskId, evaluation: TaskEvaluation) -> list[tuple[str, str, str, str, str]]:
    """Rows of (suite/task, category, metric, value ± stderr, n); category '' is the whole task."""
    scores = evaluation.scores
    rows = [(identity.key, "", name, format_summary(summary), str(summary.n)) for name, summary in scores.overall.items()]
    for category, metrics in scores.by_category.items():
        for name, summary in metrics.items():
            rows.append((identity.key, category, name, format_summary(summary), str(summary.n)))
    return rows


def _metric_block(metrics: dict[str, MetricSummary]) -> dict[str, Any]:
    block: dict[str, Any] = {}
    for name, summary in metrics.items():
        block[name] = summary.value
        block[f"{name}_stderr"] = summary.stderr
    block["n"] = max((s.n for s in metrics.values()), default=0)
    return block


def task_results(identity: TaskId, evaluation: TaskEvaluation, log_samples: bool) -> dict[str, Any]:
    """One task's scores-table rows and results-JSON parts, as JSON data (what an xdist worker sends)."""
    scores = evaluation.scores
    results: dict[str, Any] = {
        "key": identity.key,
        "suite": identity.suite,
        "task": identity.task,
        "rows": summary_rows(identity, evaluation),
        "results": _metric_block(scores.overall),
        "categories": {category: _metric_block(metrics) for category, metrics in scores.by_category.items()},
        "n-shot": evaluation.prepared.num_fewshot,
        "version": evaluation.prepared.config.version,
    }
    if log_samples:
        results["samples"] = _samples(evaluation)
    return results


def run_config(options: Any) -> dict[str, Any]:
    """The results JSON's `config`: the run's options (run/runner.py, RunOptions) as given."""
    return {
        "model": options.model, "model_args": options.model_args, "dtype": options.dtype,
        "batch_size": "default" if options.batch_size is None else options.batch_size, "device": options.device,
        "limit": options.limit, "num_fewshot": options.num_fewshot, "shared_prefixes": options.shared_prefixes,
        "sampling_seed": options.sampling_seed, "rescored_from": list(options.rescored_from),
    }


def results_document(
    tasks: Iterable[dict[str, Any]], run_config: dict[str, Any], gate: dict[str, dict[str, Any]],
    pooled: list[dict[str, Any]] | None = None, outcome: dict[str, Any] | None = None,
) -> dict:
    """`tasks`: each task's `task_results`, in the document's order; `gate`: each gated task's outcome
    (gate/result.py, GateResult.as_json); `pooled`: the suites' pooled entries (gate/pooled.py), when there are any;
    `outcome`: the session's, as its exit status says it (gate/decision.py, SessionOutcome.as_json).
    Every section is keyed by the task's '<suite>/<task>' key; `tasks` maps each key to its suite and name."""
    document: dict[str, Any] = {
        "format": RESULTS_FORMAT, "tasks": {}, "results": {}, "categories": {}, "n-shot": {}, "versions": {},
        "config": run_config, "gate": dict(sorted(gate.items())),
    }
    if pooled:
        document["pooled"] = pooled
    if outcome is not None:
        document["outcome"] = outcome
    for results in tasks:
        key = results["key"]
        document["tasks"][key] = {"suite": results["suite"], "task": results["task"]}
        document["results"][key] = results["results"]
        if results["categories"]:
            document["categories"][key] = results["categories"]
        document["n-shot"][key] = results["n-shot"]
        document["versions"][key] = results["version"]
        if "samples" in results:
            document.setdefault("samples", {})[key] = results["samples"]
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
            sample.update(context=doc.context, target=doc.gold, generation=generation, filtered=dict(answers))
            if isinstance(generation, list):  # a sampled task's draws
                sample["filtered_draws"] = answers.samples
    return samples


def json_text(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
