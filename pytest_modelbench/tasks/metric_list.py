"""The YAML's `metric_list`, checked into MetricSpecs (lm-eval 0.4.13's defaults per output type, its aggregations,
`metric: !function` entries), and the names of the metrics the gate derives from them. The metrics layer turns the
specs into metrics (metrics/task_metrics.py); this module only reads and checks the YAML, so that a bad entry is a
collection error naming the file and key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.tasks.task_code import Resolve
from pytest_modelbench.tasks.yaml_loader import FunctionRef

# lm-eval's aggregations of the metrics that are not a mean (its metric registry's defaults, used when `aggregation`
# is omitted), by output type: the rolling metrics (metrics/perplexity.py), the classification metrics
# (metrics/classification.py), the corpus scores (metrics/translation.py) and loglikelihood's perplexity
# (metrics/loglikelihood.py).
_OWN_AGGREGATIONS = {
    "loglikelihood_rolling": {
        "word_perplexity": "weighted_perplexity", "byte_perplexity": "weighted_perplexity",
        "bits_per_byte": "bits_per_byte",
    },
    "multiple_choice": {"f1": "f1", "mcc": "matthews_corrcoef"},
    "generate_until": {"bleu": "bleu", "chrf": "chrf", "ter": "ter"},
    "loglikelihood": {"perplexity": "perplexity"},
}
# lm-eval's default metric_list of each output type (api/registry.py DEFAULT_METRIC_REGISTRY).
_DEFAULT_METRICS = {
    "multiple_choice": ("acc", "acc_norm"),
    "generate_until": ("exact_match",),
    "loglikelihood_rolling": ("word_perplexity", "byte_perplexity", "bits_per_byte"),
    "loglikelihood": ("perplexity", "acc"),
}
# lm-eval 0.4.13's registered metrics (api/metrics.py register_metric): default aggregation and higher_is_better, which
# a `metric: !function` entry gets when its function has one of these names and the entry leaves them out.
_LMEVAL_REGISTERED = {
    "acc": ("mean", True), "acc_norm": ("mean", True), "acc_mutual_info": ("mean", True), "acc_bytes": ("mean", True),
    "acc_all": ("mean", True), "exact_match": ("mean", True), "likelihood": ("mean", True),
    "perplexity": ("perplexity", False), "brier_score": ("brier_score", False),
    "word_perplexity": ("weighted_perplexity", False), "byte_perplexity": ("weighted_perplexity", False),
    "bits_per_byte": ("bits_per_byte", False), "bypass": ("bypass", True), "mcc": ("matthews_corrcoef", True),
    "f1": ("f1", True), "bleu": ("bleu", True), "chrf": ("chrf", True), "chrf++": ("chrf++", True),
    "ter": ("ter", False),
}
# lm-eval's registered aggregations that take one number per document (metrics/task_aggregation.py computes them):
# what a process_results metric or a `metric: !function` may name.
NUMBER_AGGREGATIONS = ("mean", "median", "perplexity")
# Metrics the gate derives from other metrics' per-document values (metrics/evidence.py computes them), by the
# metrics each needs: a task that scores all of them gets the derived metric, and may set its margin.
DERIVED_METRIC_INPUTS = {"stereotype_preference": ("pct_stereotype", "likelihood_diff")}


@dataclass(frozen=True)
class MetricSpec:
    """One metric_list entry, checked: what the metrics layer resolves into a metric (metrics/task_metrics.py)."""

    name: str
    aggregation: str | Callable[[list], Any] = "mean"  # a registered name, or a `!function` (process_results tasks)
    higher_is_better: bool | None = None
    options: dict[str, Any] = field(default_factory=dict)
    function: Callable[..., Any] | None = None  # `metric: !function` (generate_until; metrics/generative.py)


def metric_specs(
    metric_list: Any, path: Path, output_type: str, resolve: Resolve, process_results: bool
) -> tuple[MetricSpec, ...]:
    """With process_results the metrics are whatever that function returns, so each entry may name an aggregation of
    NUMBER_AGGREGATIONS or a `!function`; a multiple_choice task's own metrics may take a `!function`."""
    if metric_list is None:
        return tuple(MetricSpec(name) for name in _DEFAULT_METRICS[output_type])
    if not isinstance(metric_list, list) or not metric_list:
        raise TaskConfigError(f"{path}: key 'metric_list' must be a non-empty list")
    specs = []
    for i, entry in enumerate(metric_list):
        if isinstance(entry, dict) and isinstance(entry.get("metric"), FunctionRef):
            specs.append(_function_metric_spec(entry, i, path, output_type, resolve, process_results))
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("metric"), str):
            raise TaskConfigError(f"{path}: key 'metric_list[{i}]' needs a 'metric' name")
        higher_is_better = entry.get("higher_is_better")
        if higher_is_better is not None and not isinstance(higher_is_better, bool):
            raise TaskConfigError(f"{path}: key 'metric_list[{i}].higher_is_better' must be true or false")
        if process_results:
            aggregation = _process_results_aggregation(entry, i, path, resolve)
        elif output_type == "multiple_choice" and isinstance(entry.get("aggregation"), FunctionRef):
            aggregation = resolve(f"metric_list[{i}].aggregation", entry["aggregation"])
        else:
            # Each metric is reported with its own aggregation: refuse another one rather than mislabel it.
            own = _OWN_AGGREGATIONS[output_type].get(entry["metric"], "mean")
            aggregation = entry.get("aggregation", own)
            if aggregation != own:
                raise TaskConfigError(
                    f"{path}: key 'metric_list[{i}].aggregation': only '{own}' is supported, got {aggregation!r}"
                )
        options = {k: v for k, v in entry.items() if k not in ("metric", "aggregation", "higher_is_better")}
        specs.append(MetricSpec(entry["metric"], aggregation, higher_is_better, options))
    return tuple(specs)


def _process_results_aggregation(
    entry: dict[str, Any], i: int, path: Path, resolve: Resolve
) -> str | Callable[[list], Any]:
    aggregation = entry.get("aggregation", "mean")
    if isinstance(aggregation, FunctionRef):
        return resolve(f"metric_list[{i}].aggregation", aggregation)
    if aggregation not in NUMBER_AGGREGATIONS:
        raise TaskConfigError(
            f"{path}: key 'metric_list[{i}].aggregation': a process_results metric may use "
            f"{', '.join(NUMBER_AGGREGATIONS)} or a !function, got {aggregation!r}"
        )
    return aggregation


def _function_metric_spec(entry: dict[str, Any], i: int, path: Path, output_type: str, resolve: Resolve,
                          process_results: bool) -> MetricSpec:
    """A `metric: !function module.fn` entry of metric_list, checked (metrics/generative.py scores it)."""
    label = f"metric_list[{i}]"
    ref: FunctionRef = entry["metric"]
    if process_results:
        raise TaskConfigError(f"{path}: key '{label}.metric': a '!function' metric cannot be used with process_results "
                              "(lm-eval keys it by the function itself, so process_results' values never reach it); "
                              "name the metric as process_results returns it")
    if output_type != "generate_until":
        raise TaskConfigError(f"{path}: key '{label}.metric': lm-eval 0.4.13 calls a '!function' metric only for "
                              f"generate_until tasks (a {output_type} task never gives it a value); use "
                              "process_results: !function for a metric of your own")
    function = resolve(f"{label}.metric", ref)
    name = getattr(function.function, "__name__", None) or ref.dotted_name.rpartition(".")[2]
    registered = _LMEVAL_REGISTERED.get(name)
    aggregation = entry.get("aggregation")
    if aggregation is None:
        if registered is None or registered[0] not in NUMBER_AGGREGATIONS:
            why = (f"lm-eval's default for that name, {registered[0]!r}, does not aggregate one number per document"
                   if registered else "lm-eval 0.4.13 has no default aggregation for it")
            raise TaskConfigError(f"{path}: key '{label}.aggregation' is needed for metric '{name}' ({ref!r}): "
                                  f"{why}; use {', '.join(NUMBER_AGGREGATIONS)} or a !function")
        aggregation = registered[0]
    elif isinstance(aggregation, FunctionRef):
        aggregation = resolve(f"{label}.aggregation", aggregation)
    elif aggregation not in NUMBER_AGGREGATIONS:
        raise TaskConfigError(f"{path}: key '{label}.aggregation': a !function metric may use "
                              f"{', '.join(NUMBER_AGGREGATIONS)} or a !function, got {aggregation!r}")
    higher_is_better = entry.get("higher_is_better")
    if higher_is_better is None:
        if registered is None:
            raise TaskConfigError(f"{path}: key '{label}.higher_is_better' is needed: metric '{name}' ({ref!r}) is "
                                  "not a metric whose direction lm-eval registers, and the gate must know which way "
                                  "is worse")
        higher_is_better = registered[1]
    elif not isinstance(higher_is_better, bool):
        raise TaskConfigError(f"{path}: key '{label}.higher_is_better' must be true or false")
    options = {k: v for k, v in entry.items() if k not in ("metric", "aggregation", "higher_is_better", "hf_evaluate")}
    return MetricSpec(name, aggregation, higher_is_better, options, function)


def derived_metric_names(metric_names: Iterable[str]) -> tuple[str, ...]:
    """The derived metrics a task with these metrics gets: those whose inputs it all scores."""
    names = set(metric_names)
    return tuple(name for name, inputs in DERIVED_METRIC_INPUTS.items() if set(inputs) <= names and name not in names)
