"""A task's own `process_results` (lm-eval 0.4.13's contract): called for each document as fn(doc, results), it
returns {metric: value}; the metrics are the task's metric_list entries, aggregated as each entry says.

`results` is what lm-eval passes for the output type (api/task.py ConfigurableTask.process_results, called from
evaluator.py with one filtered response per request):
- multiple_choice: one (log-likelihood, is_greedy) per choice. is_greedy is not computed for choices here (lm-eval's
  own multiple_choice metrics and TruthfulQA's mc1/mc2 unpack it but read only the log-likelihoods): it is
  NOT_COMPUTED, which unpacks and passes through, and any use of it (truth value, number, comparison) is an error
  naming the task's function.
- loglikelihood: [(log-likelihood, is_greedy)]; loglikelihood_rolling: [log-likelihood];
- generate_until: [answer], once per filter pipeline, each metric keyed `metric,pipeline` as lm-eval keys it.

Each value must be a number, or, for a metric whose aggregation is a `!function`, a list of numbers (bools count) of
any length: lm-eval collects each metric's per-document values as they are and calls the aggregation with that list
once (evaluator_utils._compute_task_aggregations), so IFEval's `inst_level_*` lists (one outcome per instruction) reach
its agg_inst_level_acc, which flattens them; its stderr is "N/A" (no stderr for a `!function`), as here. A list where
the aggregation is lm-eval's mean, median or perplexity is refused: lm-eval's mean and perplexity fail on it
(int + list) and its median returns one document's list. The gate pairs documents as for every other task: a mean by
the paired bootstrap (a process_results value need not be 0/1: TruthfulQA mc2's is a probability mass), any other
aggregation by the bootstrap that re-applies it to resampled documents (lists included: each document's list is
stored in the baseline as it is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping


from pytest_modelbench.errors import DocumentError, TaskCodeError, TaskConfigError
from pytest_modelbench.metrics.aggregate import DocumentItems
from pytest_modelbench.metrics.registry import HIGHER, LOWER, METRICS, ONE_POINT, Direction, Margin, Metric
from pytest_modelbench.metrics.task_aggregation import TaskAggregation
from pytest_modelbench.numeric import is_number
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.requests import DocumentRequests


class _NotComputed:
    """multiple_choice's is_greedy of a choice, which is not computed: usable only as a placeholder."""

    def _refuse(self, *args: Any) -> Any:
        raise TaskCodeError("it uses is_greedy of a multiple_choice choice, which pytest-modelbench does not compute "
                            "(only the log-likelihoods are); use output_type loglikelihood for a greedy check")

    __bool__ = __int__ = __float__ = __index__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = _refuse
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "NOT_COMPUTED"


NOT_COMPUTED = _NotComputed()


@dataclass(frozen=True)
class _Value:
    """Per document: the value process_results gave for one metric key."""

    key: str

    def __call__(self, doc: DocumentRequests, values: Mapping[str, float]) -> float:
        return values[self.key]


def process_results_metrics(config: TaskConfig) -> tuple[Metric, ...]:
    """The metric_list as metrics over process_results' values (one per filter pipeline for generate_until)."""
    metrics = []
    for i, spec in enumerate(config.metric_list):
        if spec.options:
            raise TaskConfigError(f"{config.source}: key 'metric_list[{i}].{sorted(spec.options, key=str)[0]}': a "
                                  "process_results metric takes no options (process_results computes it)")
        direction = _direction(spec, config, i)
        margin = Margin(relative=0.02) if spec.aggregation == "perplexity" else ONE_POINT
        for key in metric_keys(config, spec.name):
            aggregate = None if spec.aggregation == "mean" else TaskAggregation(key, spec.aggregation)
            metrics.append(Metric(key, _Value(key), direction, binary=False, margin=margin, aggregate=aggregate))
    return tuple(metrics)


def metric_keys(config: TaskConfig, name: str) -> list[str]:
    if config.output_type == "generate_until":
        return [f"{name},{pipeline.name}" for pipeline in config.filters]
    return [name]


def _direction(spec, config: TaskConfig, i: int) -> Direction:
    ideal = config.gate.ideal(spec.name)  # `modelbench.gate.metrics.<metric>.ideal`: best at a point (a bias score)
    if ideal is not None:
        return Direction("ideal", ideal)
    if spec.higher_is_better is not None:
        return HIGHER if spec.higher_is_better else LOWER
    if spec.name in METRICS and METRICS[spec.name].direction.kind in ("higher", "lower"):
        return METRICS[spec.name].direction  # lm-eval's default for a registered metric name
    raise TaskConfigError(f"{config.source}: key 'metric_list[{i}].higher_is_better' is needed: '{spec.name}' is "
                          "computed by process_results and is not a metric whose direction lm-eval registers")


def lmeval_results(output_type: str, response: Any, pipeline: str | None) -> list:
    """What lm-eval passes process_results for one document, from this engine's response for it."""
    if output_type == "multiple_choice":
        return [(float(ll), NOT_COMPUTED) for ll in response]
    if output_type == "loglikelihood":
        return [(float(response[0]), bool(response[1]))]
    if output_type == "loglikelihood_rolling":
        return [float(response[0])]
    return [response[pipeline]]


def document_values(config: TaskConfig, doc: DocumentRequests, response: Any) -> dict[str, float | DocumentItems]:
    """process_results for one document (once per pipeline for generate_until), checked: a dict holding a number
    for every metric of metric_list and nothing else (a list of numbers where the metric's aggregation is a
    `!function`)."""
    where = f"{config.source}: task '{config.task}', document {doc.doc_id}"
    names = [spec.name for spec in config.metric_list]
    aggregations = {spec.name: spec.aggregation for spec in config.metric_list}
    pipelines = [p.name for p in config.filters] if config.output_type == "generate_until" else [None]
    values = {}
    for pipeline in pipelines:
        try:
            result = config.process_results(doc.doc, lmeval_results(config.output_type, response, pipeline))
        except TaskCodeError as exc:
            raise DocumentError(f"{where}: process_results {exc}") from None
        function = f"process_results (!function {config.process_results.dotted_name})"
        if not isinstance(result, Mapping):
            raise DocumentError(f"{where}: {function} returned {type(result).__name__} {result!r:.80}, not a dict "
                                "of metric values")
        extra = [key for key in result if key not in names]
        if extra:
            raise DocumentError(f"{where}: {function} returned metric {extra[0]!r}, which is not in metric_list "
                                f"({', '.join(names)}); add it there with its aggregation and higher_is_better")
        missing = [name for name in names if name not in result]
        if missing:
            raise DocumentError(f"{where}: {function} returned no value for metric {missing[0]!r} of metric_list")
        for name in names:
            value = result[name]
            key = name if pipeline is None else f"{name},{pipeline}"
            if isinstance(value, (list, tuple)):
                values[key] = _items(value, name, aggregations[name], f"{where}: {function}")
            elif not is_number(value, bool_counts=True):
                raise DocumentError(f"{where}: {function} returned {value!r} ({type(value).__name__}) for metric "
                                    f"{name!r}; only numbers are supported (or, for an `aggregation: !function`, "
                                    "lists of numbers)")
            elif not math.isfinite(value):
                raise DocumentError(f"{where}: {function} returned {value!r} for metric {name!r}; a metric value "
                                    "must be a finite number (a score cannot be averaged or compared with NaN or "
                                    "infinity in it)")
            else:
                values[key] = float(value)
    return values


def _items(value: list | tuple, name: str, aggregation: Any, where: str) -> DocumentItems:
    """A list value of one document (IFEval's per-instruction outcomes): only for a `!function` aggregation, which
    lm-eval calls with the documents' lists; its items finite numbers (bools count)."""
    shown = f"{value!r:.80}"
    if not callable(aggregation):
        raise DocumentError(
            f"{where} returned a list ({shown}) for metric {name!r}, whose aggregation is {aggregation!r}: lm-eval's "
            f"{aggregation} does not take lists (mean and perplexity fail on them, median returns one document's "
            "list); give the metric an `aggregation: !function` that takes each document's list (IFEval's "
            "agg_inst_level_acc), or return a number")
    for item in value:
        if not is_number(item, bool_counts=True) or not math.isfinite(item):
            raise DocumentError(f"{where} returned {item!r} ({type(item).__name__}) in the list for metric {name!r}; "
                                "a list value holds finite numbers (or bools)")
    return DocumentItems(float(item) for item in value)
