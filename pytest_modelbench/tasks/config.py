"""Task configuration: the lm-eval 0.4.13 TaskConfig keys we honour, validated, plus our `modelbench:` block."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.tasks.document_rules import DocumentRules
from pytest_modelbench.tasks.filters import INVALID_OUTPUT, NO_FILTER, FilterPipeline, filter_pipelines
from pytest_modelbench.tasks.gate_block import GateTolerance, check_metric_block, checked_gate_block
from pytest_modelbench.tasks.generation_settings import GenerationSettings, generation_settings
from pytest_modelbench.tasks.metric_list import MetricSpec, metric_specs
from pytest_modelbench.tasks.task_code import resolve_function
from pytest_modelbench.tasks.templates import template_problem
from pytest_modelbench.tasks.yaml_loader import FunctionRef, load_merged_yaml, read_yaml_file

# lm-eval keys that this engine does not implement: refusing them beats silently scoring something else.
_UNSUPPORTED_LM_EVAL_KEYS = {
    "custom_dataset", "use_prompt", "doc_to_image", "doc_to_audio", "unsafe_code",
    "group", "group_alias", "task_list", "class",
}
_FEWSHOT_CONFIG_KEYS = {
    "sampler", "split", "samples", "doc_to_text", "doc_to_target", "doc_to_choice", "target_delimiter",
    "fewshot_delimiter", "gen_prefix",
}
_SAMPLERS = {"default", "first_n"}
_MODELBENCH_KEYS = {"category_field", "gate", "limit"}
# Bias-suite keys of the `modelbench:` block (tasks/document_rules.py; masked_protocol: scoring/masked.py).
_MODELBENCH_KEYS |= {"categories", "required_fields", "exclude", "masked_protocol"}
_MASKED_PROTOCOLS = ("pll", "pll_shared")
_OUTPUT_TYPES = ("multiple_choice", "generate_until", "loglikelihood_rolling", "loglikelihood")
# lm-eval's keys each output type needs (its default metric_list: tasks/metric_list.py).
_REQUIRED_KEYS = {
    "multiple_choice": ("doc_to_text", "doc_to_choice", "doc_to_target"),
    "generate_until": ("doc_to_text", "doc_to_target"),
    "loglikelihood_rolling": ("doc_to_target",),
    "loglikelihood": ("doc_to_text", "doc_to_target"),
}
# Keys that do not change what is scored, so editing them does not invalidate a baseline.
_NOT_SCORING_KEYS = {"tag", "task_alias", "should_decontaminate", "doc_to_decontamination_query"}


@dataclass(frozen=True)
class TaskConfig:
    task: str
    source: Path
    tag: tuple[str, ...] = ()
    task_alias: str | None = None
    dataset_path: str | None = None
    dataset_name: str | None = None
    dataset_kwargs: dict[str, Any] = field(default_factory=dict)
    training_split: str | None = None
    validation_split: str | None = None
    test_split: str | None = None
    fewshot_split: str | None = None
    fewshot_sampler: str = "default"
    fewshot_overrides: dict[str, Any] = field(default_factory=dict)
    # fewshot_config.samples: inline few-shot documents, or a !function giving them (used when no split is named)
    fewshot_samples: tuple[dict[str, Any], ...] | Callable[[], Any] | None = None
    num_fewshot: int | None = None
    description: str = ""
    gen_prefix: str | None = None  # generate_until: the start of the answer, after the question (template or field)
    doc_to_text: Any = None
    doc_to_target: Any = None
    doc_to_choice: Any = None
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    output_type: str = "multiple_choice"
    metric_list: tuple[MetricSpec, ...] = (MetricSpec("acc"), MetricSpec("acc_norm"))
    generation: GenerationSettings | None = None  # generate_until only: stop sequences and token budget
    filters: tuple[FilterPipeline, ...] = NO_FILTER  # generate_until only: filter_list
    repeats: int = 1  # generate_until only: responses per document (lm-eval's repeats), each a draw when sampling
    process_docs: Callable[[Any], Any] | None = None
    # `!function` scoring one document from lm-eval's results for it (metrics/process_results.py)
    process_results: Callable[[Any, list], Any] | None = None
    should_decontaminate: bool = False
    doc_to_decontamination_query: str | None = None
    version: Any = "Yaml"
    category_field: str | None = None
    categories: tuple[str, ...] | None = None  # modelbench.categories: every one is reported, empty ones as empty
    masked_protocol: str = "pll"  # modelbench.masked_protocol: how a masked LM scores the choices
    limit: int | None = None  # modelbench.limit: only the first N documents of the evaluated split (as --limit N)
    gate: GateTolerance = GateTolerance()
    config_hash: str = ""

    @property
    def draws(self) -> int:
        """Generations per document: `repeats` when sampling; else one, which every repeat copies (greedy decoding
        answers every repeat alike)."""
        return self.repeats if self.generation is not None and self.generation.sampling else 1

    @property
    def eval_split(self) -> str | None:
        return self.test_split or self.validation_split

    @property
    def fewshot_pool_split(self) -> str | None:
        """The split shots are drawn from; None with inline `fewshot_config.samples` (they come first)."""
        if self.fewshot_split is None and self.fewshot_samples is not None:
            return None
        return self.fewshot_split or self.training_split or self.validation_split or self.test_split


def is_task_file(path: Path) -> bool:
    """A YAML that defines one task: it has a string `task` key and no `group` key (lm-eval's rule)."""
    try:
        raw = read_yaml_file(path)
    except TaskConfigError:
        return True  # broken files are collected so that the user sees the error
    return isinstance(raw.get("task"), str) and "group" not in raw


def load_task_config(path: Path, *, allow_task_code: bool = False, overrides: dict[str, Any] | None = None) -> TaskConfig:
    """`overrides`: keys a group sets for its tasks (tasks/groups.py), over the file's own (lm-eval's shallow merge)."""
    raw = {**load_merged_yaml(path), **(overrides or {})}
    return _build_config(raw, path, allow_task_code)


def _build_config(raw: dict[str, Any], path: Path, allow_task_code: bool) -> TaskConfig:
    unsupported = sorted(set(raw) & _UNSUPPORTED_LM_EVAL_KEYS)
    if unsupported:
        raise TaskConfigError(f"{path}: key '{unsupported[0]}' is not supported by pytest-modelbench")
    known = {f for f in TaskConfig.__dataclass_fields__} | {"fewshot_config", "metadata", "modelbench"}
    known -= {"source", "fewshot_sampler", "fewshot_overrides", "fewshot_samples", "version", "category_field", "gate"}
    known -= {"config_hash"}
    known -= {"categories", "masked_protocol", "generation", "filters", "limit"}
    known |= {"generation_kwargs", "filter_list"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise TaskConfigError(f"{path}: unknown key '{unknown[0]}'")
    task = raw.get("task")
    if not isinstance(task, str) or not task:
        raise TaskConfigError(f"{path}: key 'task' must be a task name")
    output_type = raw.get("output_type", "generate_until")  # lm-eval's TaskConfig default
    if output_type not in _OUTPUT_TYPES:
        raise TaskConfigError(
            f"{path}: key 'output_type': only {', '.join(_OUTPUT_TYPES)} are supported, found {output_type!r}"
        )
    generative = output_type == "generate_until"
    for key in _REQUIRED_KEYS[output_type]:
        if raw.get(key) is None:
            raise TaskConfigError(f"{path}: key '{key}' is required for a {output_type} task")
    for key in ("generation_kwargs", "filter_list", "repeats", "gen_prefix"):
        if key in raw and not generative:
            raise TaskConfigError(f"{path}: key '{key}' applies to generate_until tasks only")
    _check_value_types(raw, path)

    def resolve(key: str, value: Any) -> Any:
        if isinstance(value, FunctionRef):
            return resolve_function(value, path, key, allow_task_code)
        return value

    fewshot = raw.get("fewshot_config") or {}
    if not isinstance(fewshot, dict):
        raise TaskConfigError(f"{path}: key 'fewshot_config' must be a mapping")
    bad = sorted(set(fewshot) - _FEWSHOT_CONFIG_KEYS, key=str)
    if bad:
        raise TaskConfigError(f"{path}: key 'fewshot_config.{bad[0]}' is not supported")
    sampler = fewshot.get("sampler", "default")
    if not isinstance(sampler, str) or sampler not in _SAMPLERS:
        raise TaskConfigError(f"{path}: key 'fewshot_config.sampler': unknown sampler {sampler!r} (use default or first_n)")
    _check_value_types(fewshot, path, prefix="fewshot_config.")
    overrides = {
        k: resolve(f"fewshot_config.{k}", v) for k, v in fewshot.items() if k not in ("sampler", "split", "samples")
    }
    samples = _fewshot_samples(fewshot.get("samples"), path, resolve)

    tag = raw.get("tag") or ()
    if isinstance(tag, str):
        tag = (tag,)
    if not isinstance(tag, (list, tuple)) or not all(isinstance(t, str) for t in tag):
        raise TaskConfigError(f"{path}: key 'tag' must be a string or a list of strings")

    dataset_kwargs = raw.get("dataset_kwargs") or {}
    if not isinstance(dataset_kwargs, dict):
        raise TaskConfigError(f"{path}: key 'dataset_kwargs' must be a mapping")

    metadata = raw.get("metadata") or {}
    modelbench = raw.get("modelbench") or {}
    if not isinstance(modelbench, dict) or set(modelbench) - _MODELBENCH_KEYS:
        raise TaskConfigError(f"{path}: key 'modelbench' may only hold {sorted(_MODELBENCH_KEYS)}")
    if not isinstance(modelbench.get("category_field"), (str, type(None))):
        raise TaskConfigError(f"{path}: key 'modelbench.category_field' must be a field name")
    gate = checked_gate_block(modelbench.get("gate"), path)
    process_results = raw.get("process_results")
    if process_results is not None and not isinstance(process_results, FunctionRef):
        raise TaskConfigError(f"{path}: key 'process_results' must be a '!function module.name', got {process_results!r}")
    specs = metric_specs(raw.get("metric_list"), path, output_type, resolve, process_results is not None)
    metric_names = {spec.name for spec in specs}
    task_code_metrics = metric_names if process_results is not None else {
        spec.name for spec in specs if spec.function is not None}
    gated_names = metric_names | {INVALID_OUTPUT} if output_type == "generate_until" else metric_names
    check_metric_block(gate.get("metrics"), gated_names, task_code_metrics, path)

    repeats = raw.get("repeats", 1)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise TaskConfigError(f"{path}: key 'repeats' must be a positive integer, got {repeats!r}")
    fewshot_delimiter = raw.get("fewshot_delimiter", "\n\n")
    num_fewshot = raw.get("num_fewshot")
    if num_fewshot is not None and (not isinstance(num_fewshot, int) or num_fewshot < 0):
        raise TaskConfigError(f"{path}: key 'num_fewshot' must be a non-negative integer")

    config = TaskConfig(
        task=task,
        source=path,
        tag=tuple(tag),
        task_alias=raw.get("task_alias"),
        dataset_path=raw.get("dataset_path"),
        dataset_name=raw.get("dataset_name"),
        dataset_kwargs=dataset_kwargs,
        training_split=raw.get("training_split"),
        validation_split=raw.get("validation_split"),
        test_split=raw.get("test_split"),
        fewshot_split=raw.get("fewshot_split") or fewshot.get("split"),
        fewshot_sampler=sampler,
        fewshot_overrides=overrides,
        fewshot_samples=samples,
        num_fewshot=num_fewshot,
        description=raw.get("description") or "",
        gen_prefix=raw.get("gen_prefix"),
        doc_to_text=resolve("doc_to_text", raw.get("doc_to_text")),
        doc_to_target=resolve("doc_to_target", raw.get("doc_to_target")),
        doc_to_choice=resolve("doc_to_choice", raw.get("doc_to_choice")),
        target_delimiter=raw.get("target_delimiter", " "),
        fewshot_delimiter=fewshot_delimiter,
        output_type=output_type,
        metric_list=specs,
        generation=generation_settings(raw.get("generation_kwargs"), fewshot_delimiter, path) if generative else None,
        filters=filter_pipelines(raw.get("filter_list"), path, resolve) if generative else NO_FILTER,
        repeats=repeats,
        process_docs=_document_rules(modelbench, path, task, resolve("process_docs", raw.get("process_docs"))),
        process_results=resolve("process_results", process_results),
        should_decontaminate=bool(raw.get("should_decontaminate", False)),
        doc_to_decontamination_query=raw.get("doc_to_decontamination_query"),
        version=metadata.get("version", "Yaml") if isinstance(metadata, dict) else "Yaml",
        category_field=modelbench.get("category_field"),
        categories=_string_list(modelbench, "categories", path),
        masked_protocol=_masked_protocol(modelbench, path),
        limit=_document_limit(modelbench, path),
        gate=GateTolerance(**{**gate, "metrics": gate.get("metrics") or {}}),
        config_hash=_config_hash(raw),
    )
    if config.eval_split is None:
        raise TaskConfigError(f"{path}: task '{task}' needs 'test_split' or 'validation_split'")
    return config


# What each templated key may hold (a `!function` is allowed wherever a template is); a string is a Jinja2 template
# or a field name, and is compiled here so that a syntax error is reported at collection.
_TEMPLATE_KINDS = {
    "doc_to_text": (str,),  # lm-eval's integer doc_to_text (multiple-input tasks) is not supported
    "doc_to_target": (str, int, list),
    "doc_to_choice": (str, list, dict),
    "description": (str,),
    "gen_prefix": (str,),
}
_STRING_KEYS = (
    "target_delimiter", "fewshot_delimiter", "task_alias", "dataset_path", "dataset_name", "training_split",
    "validation_split", "test_split", "fewshot_split", "split",
)


def _check_value_types(block: dict[str, Any], path: Path, prefix: str = "") -> None:
    """Types of the templated and string keys, template syntax, and non-empty target and choice lists."""
    for key, kinds in _TEMPLATE_KINDS.items():
        value = block.get(key)
        if value is None or isinstance(value, FunctionRef):
            continue
        label = f"{prefix}{key}"
        if not isinstance(value, kinds) or (isinstance(value, bool) and key != "doc_to_target"):
            names = " or ".join("a string" if k is str else f"a {k.__name__}" for k in kinds)
            raise TaskConfigError(f"{path}: key '{label}' must be {names} (or !function), got {value!r}")
        if isinstance(value, (list, dict)) and not value:
            raise TaskConfigError(f"{path}: key '{label}' is an empty {type(value).__name__}")
        if isinstance(value, str):
            problem = template_problem(value)
            if problem:
                raise TaskConfigError(f"{path}: key '{label}': {problem}")
    for key in _STRING_KEYS:
        value = block.get(key)
        if value is not None and not isinstance(value, str):
            raise TaskConfigError(f"{path}: key '{prefix}{key}' must be a string, got {value!r}")
    if isinstance(block.get("gen_prefix"), FunctionRef):  # lm-eval renders it as a template or reads a field only
        raise TaskConfigError(f"{path}: key '{prefix}gen_prefix' must be a template or a field name, not a !function")
    if "process_docs" in block and not isinstance(block["process_docs"], FunctionRef):
        raise TaskConfigError(f"{path}: key '{prefix}process_docs' must be a '!function module.name' reference")


def _fewshot_samples(value: Any, path: Path, resolve: Callable[[str, Any], Any]) -> Any:
    """`fewshot_config.samples`: a non-empty list of documents (mappings), or a `!function` returning one."""
    if value is None or isinstance(value, FunctionRef):
        return resolve("fewshot_config.samples", value)
    if not isinstance(value, list) or not value or not all(isinstance(doc, dict) for doc in value):
        raise TaskConfigError(
            f"{path}: key 'fewshot_config.samples' must be a non-empty list of documents (mappings) or a !function"
        )
    return tuple(value)


def _string_list(block: dict[str, Any], key: str, path: Path) -> tuple[str, ...] | None:
    value = block.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise TaskConfigError(f"{path}: key 'modelbench.{key}' must be a non-empty list of strings")
    return tuple(value)


def _document_limit(block: dict[str, Any], path: Path) -> int | None:
    value = block.get("limit")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise TaskConfigError(f"{path}: key 'modelbench.limit' must be a positive integer, got {value!r}")
    return value


def _masked_protocol(block: dict[str, Any], path: Path) -> str:
    value = block.get("masked_protocol", "pll")
    if value not in _MASKED_PROTOCOLS:
        raise TaskConfigError(
            f"{path}: key 'modelbench.masked_protocol' must be one of {', '.join(_MASKED_PROTOCOLS)}, got {value!r}"
        )
    return value


def _document_rules(block: dict[str, Any], path: Path, task: str, process_docs: Any) -> Any:
    """The modelbench block's row rules as a process_docs step (the YAML's own process_docs runs after them)."""
    required = _string_list(block, "required_fields", path) or ()
    categories = _string_list(block, "categories", path)
    exclude = block.get("exclude") or {}
    if not isinstance(exclude, dict) or not all(isinstance(v, list) for v in exclude.values()):
        raise TaskConfigError(f"{path}: key 'modelbench.exclude' must map field names to lists of values")
    if categories is not None and not block.get("category_field"):
        raise TaskConfigError(f"{path}: key 'modelbench.categories' needs 'modelbench.category_field'")
    if not required and categories is None and not exclude:
        return process_docs
    return DocumentRules(
        where=f"{path}: task '{task}'",
        required_fields=required,
        category_field=block.get("category_field"),
        categories=categories,
        exclude={name: tuple(values) for name, values in exclude.items()},
        then=process_docs,
    )


def _config_hash(raw: dict[str, Any]) -> str:
    scoring = {k: v for k, v in raw.items() if k not in _NOT_SCORING_KEYS}
    if isinstance(scoring.get("modelbench"), dict):
        # The gate's settings are policy, not what is scored; a block left empty without them counts as absent.
        scoring["modelbench"] = {k: v for k, v in scoring["modelbench"].items() if k != "gate"}
        if not scoring["modelbench"]:
            del scoring["modelbench"]

    def as_text(o: Any) -> str:
        return getattr(o, "dotted_name", repr(o))

    try:
        text = json.dumps(scoring, sort_keys=True, default=as_text)
    except TypeError:  # keys YAML allows and JSON cannot sort or hold: of mixed types, or dates
        text = json.dumps(_keys_as_text(scoring), sort_keys=True, default=as_text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _keys_as_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {repr(key): _keys_as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_keys_as_text(item) for item in value]
    return value
