"""Property-based tests: any input to the YAML loader, include resolution, template rendering or the baseline parser
either loads or raises the project's own error type (ModelbenchError), never anything else.

Each property runs twice: FAST_EXAMPLES generated inputs in the normal tier, SLOW_EXAMPLES in the slow tier.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.baseline_file import checksum, dumps, parse
from pytest_modelbench.tasks.config import is_task_file, load_task_config
from pytest_modelbench.tasks.templates import DocResolver, render
from pytest_modelbench.tasks.yaml_loader import load_merged_yaml
from tests.fixtures.gate_records import STEREO, make_record

FAST_EXAMPLES = 200
SLOW_EXAMPLES = 10_000
EXAMPLES = [pytest.param(FAST_EXAMPLES, id="fast"), pytest.param(SLOW_EXAMPLES, id="slow", marks=pytest.mark.slow)]


def run_property(examples: int, strategy, check) -> None:
    """Check `check` on `examples` inputs drawn from `strategy` (no example database: nothing written to the repo)."""
    checked = 0

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def prop(value):
        nonlocal checked
        checked += 1
        check(value)

    prop()
    assert checked >= examples  # hypothesis stops early when it runs out of new inputs: the count is a promise


def rewrite(path: Path, content: bytes) -> None:
    """A new file each time: truncating one with data in it waits for a disk flush on ext4."""
    path.unlink(missing_ok=True)
    path.write_bytes(content)


def loads_or_refuses(load, *args, **kwargs):
    try:
        return load(*args, **kwargs)
    except ModelbenchError:
        return None


# --------------------------------------------------------------------------- YAML loader

TASK_KEYS = [
    "task", "tag", "include", "dataset_path", "dataset_name", "dataset_kwargs", "test_split", "validation_split",
    "training_split", "fewshot_split", "fewshot_config", "num_fewshot", "description", "doc_to_text",
    "doc_to_target", "doc_to_choice", "target_delimiter", "fewshot_delimiter", "output_type", "metric_list",
    "process_docs", "metadata", "modelbench", "group", "filter_list", "sampler", "metric", "gate", "alpha",
    "category_field", "categories", "exclude", "required_fields", "masked_protocol", "version",
]
YAML_PIECES = [
    "task", "include", ":", ": ", "- ", "\n", "\n  ", "[", "]", "{", "}", ",", "'", '"', "!function ", "!!python/name:x",
    "&a ", "*a", "<<: ", "|", ">", "#", "%YAML 1.1\n", "---\n", "...", "?", "@", "`", "\t", "\x00", "\ufeff", "\x85",
    "১", "é", "0", "1.5e3", "~", "null", "yes", "0x1F", "2026-11-30", " ", "x", "utils.f", "{{x}}",
]
# Values in YAML flow syntax, nested blocks included, for keys a task file may or may not allow.
YAML_VALUES = [
    "x", "''", "'{{x}}'", "'{{ x'", "'{% if %}'", "'০'", "'007'", "1", "-1", "0", "1.5", ".nan", ".inf", "null", "true",
    "[]", "{}", "[a, b]", "[1, [2]]", "[null]", "{a: 1}", "!function utils.make", "!function nodots", "'!function x'",
    "multiple_choice", "generate_until", "first_n", "{sampler: first_n}", "{sampler: [1]}", "{sampler: {a: 1}}",
    "{split: 1}", "{doc_to_text: 1}", "{samples: []}", "{gate: {alpha: 2}}", "{gate: {alpha: [1]}}", "{gate: [1]}",
    "{category_field: [x]}", "{categories: [a, a]}", "{categories: []}", "{exclude: {x: 1}}", "{exclude: [x]}",
    "{masked_protocol: [1]}", "{required_fields: [1]}", "{version: [1]}", "[{metric: acc}]", "[{metric: 1}]",
    "[{metric: acc, aggregation: [1]}]", "[acc]", "{data_files: {test: x.jsonl}}", "{data_files: 1}", "&a [a]", "*a",
    "{1: a, b: c}", "{null: a}", "{0: A, 1: B}", "{? [a] : 1}", "{sampler: first_n, 2: x, y: 1}",
]
task_lines = st.lists(
    st.tuples(st.sampled_from([*TASK_KEYS, "1", "[a]", "<<", "? [a, b]"]), st.sampled_from(YAML_VALUES)), max_size=10,
).map(lambda pairs: "".join(f"{key}: {value}\n" for key, value in pairs))
MINIMAL_TASK = "task: t\noutput_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a, b]\ntest_split: test\n"
yaml_files = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(YAML_PIECES), max_size=40).map("".join).map(str.encode),
    st.tuples(st.sampled_from(["", MINIMAL_TASK]), task_lines).map("".join).map(str.encode),
)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_yaml_loader_loads_or_refuses(examples):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "task.yaml"

        def check(content: bytes) -> None:
            rewrite(path, content)
            is_task_file(path)  # never raises: a broken file is collected so that its error shows
            loads_or_refuses(load_task_config, path)

        run_property(examples, yaml_files, check)


# --------------------------------------------------------------------------- include resolution

FILES = ("a.yaml", "b.yaml", "sub/c.yaml")
INCLUDE_VALUES = [*FILES, "../a.yaml", "sub", "missing.yaml", "''", ".", "/", "sub/../b.yaml", "'a.yaml\\0'", "1",
                  "null", "[a.yaml, b.yaml]", "[sub/c.yaml, missing.yaml]", "[b.yaml, b.yaml]", "[a.yaml, 1]", "[]",
                  "{a: b.yaml}", "!function utils.make"]
include_files = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(INCLUDE_VALUES), st.sampled_from(["", MINIMAL_TASK, "task: x\n", "tag: 1\n"]))
        .map(lambda parts: f"include: {parts[0]}\n{parts[1]}"),
        st.sampled_from(["", "include: [a.yaml\n", "- a\n", "task: x\n", "include:\n  - b.yaml\n  - b.yaml\n"]),
    ),
    min_size=len(FILES), max_size=len(FILES),
)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_include_resolution_loads_or_refuses(examples):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "sub").mkdir()

        def check(texts: list[str]) -> None:
            for name, text in zip(FILES, texts):
                rewrite(root / name, text.encode())
            for name in FILES:
                merged = loads_or_refuses(load_merged_yaml, root / name)
                assert merged is None or "include" not in merged

        run_property(examples, include_files, check)


# --------------------------------------------------------------------------- template rendering

TEMPLATE_PIECES = [
    "{{", "}}", "{%", "%}", "{#", "#}", " if ", " else ", " endif ", " for ", " in ", " endfor ", " set ", "=",
    "x", "y", "label", "|", "upper", "join", "regex_replace", "int", "(", ")", "'", '"', "[", "]", ".", ",", "0", "1",
    "-", "+", " ", "\n", "০", "১", "٣", "x.index", "loop", "range", "__class__", "~", "ক", "Question: ",
]
field_values = st.one_of(
    st.text(max_size=10), st.integers(), st.floats(), st.none(), st.booleans(),
    st.lists(st.text(max_size=5) | st.integers(), max_size=4), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
templates = st.lists(st.sampled_from(TEMPLATE_PIECES), max_size=15).map("".join)
FIELDS = ("x", "y", "label")
# Besides a template or a field name, what a task config can hold under doc_to_target and doc_to_choice.
target_literals = st.integers(-2, 5) | st.lists(st.integers(-1, 3) | st.text(max_size=4), max_size=3)
choice_literals = st.lists(st.text(max_size=4), max_size=3) | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3)
rendering_cases = st.tuples(
    templates, st.sampled_from(FIELDS), target_literals, choice_literals,
    st.fixed_dictionaries({name: field_values for name in FIELDS}), st.booleans(),
)
WHERE = "task t, doc 0"


def check_rendering(case) -> None:
    """One template (compiled once, then cached) through render and every doc_to_* key; a field name; literals."""
    template, field, target_literal, choice_literal, doc, has_choices = case
    rendered = loads_or_refuses(render, template, doc, WHERE)
    assert rendered is None or isinstance(rendered, str)
    resolver = DocResolver(set(doc), has_choices=has_choices)
    for spec in (template, field):
        loads_or_refuses(resolver.text, spec, doc, WHERE)
        loads_or_refuses(resolver.target, spec, doc, WHERE)
        choices = loads_or_refuses(resolver.choices, spec, doc, WHERE)
        assert choices is None or (choices and all(isinstance(choice, str) for choice in choices))
    loads_or_refuses(resolver.target, target_literal, doc, WHERE)
    choices = loads_or_refuses(resolver.choices, choice_literal, doc, WHERE)
    assert choices is None or (choices and all(isinstance(choice, str) for choice in choices))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_template_rendering_renders_or_refuses(examples):
    run_property(examples, rendering_cases, check_rendering)


# --------------------------------------------------------------------------- baseline parser

VALID = json.loads(dumps(make_record({"pct_stereotype": [1, 0, 1, 1]}, ["a", "b", "a", "b"], metrics=[STEREO])))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=5,
)


def paths_in(value, prefix=()):
    """Every (key path) into a JSON document, containers included."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths_in(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths_in(child, (*prefix, index))


VALID_PATHS = [path for path in paths_in(VALID) if path and path != ("checksum",)]


def edited_baseline(path: tuple, replacement, drop: bool) -> str:
    """The valid baseline with one value replaced (or one key removed), re-checksummed so validation goes deeper."""
    document = json.loads(json.dumps(VALID))
    *parents, last = path
    holder = document
    for key in parents:
        holder = holder[key]
    if drop and isinstance(holder, dict):
        del holder[last]
    else:
        holder[last] = replacement
    document["checksum"] = checksum(document)
    return json.dumps(document, ensure_ascii=False)


baseline_texts = st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    st.builds(edited_baseline, st.sampled_from(VALID_PATHS), json_values, st.booleans()),
)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_baseline_parser_loads_or_refuses(examples):
    run_property(examples, baseline_texts, lambda text: loads_or_refuses(parse, text, "baselines/p.json"))


# --------------------------------------------------------------------------- run records

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _valid_record_document() -> dict:
    from pytest_modelbench.gate.baseline import Tolerance
    from pytest_modelbench.gate.compare import compare
    from pytest_modelbench.gate.result import GateResult
    from pytest_modelbench.outputs.run_record import record_text
    from pytest_modelbench.run.sharding import Shard

    baseline = make_record({"pct_stereotype": [1.0, 0.0, 1.0, 1.0]}, ["a", "b", "a", "b"], metrics=[STEREO])
    result = GateResult.from_comparison(compare(baseline, baseline, Tolerance()), task="s/t", baseline="t.json",
                                        baseline_name="default")
    session = {"tasks": {"s/t": "hash"}, "alpha_split": {"tasks": 1, "weights": {}, "pooled": {}}, "gate": {},
               "baselines": "", "options": {}, "packages": {}}
    return json.loads(record_text(
        shard=Shard(1, 1), session=session, tasks={"s/t": "t.yaml::t"}, exit_status=0, results=[result],
        evidence={"t.yaml::t": {"candidate": dumps(baseline), "documents": None}}, outcomes={"t.yaml::t": "passed"},
        scores=[{"key": "s/t", "rows": [["s/t", "(all)", "pct_stereotype", "0.75", "4"]]}], custom_tests=[],
        unused=[], run_config={}))


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_a_run_record_with_any_value_anywhere_is_read_or_refused_by_name(examples, monkeypatch):
    """A record resealed after any one value in it was replaced by any JSON value (so the digest holds and the
    reader's own checks are what is tested) reads, or is a RunRecordError naming the record: never another error."""
    from pytest_modelbench.outputs.record_integrity import KEY_ENV, sealed
    from pytest_modelbench.outputs.run_record import RunRecordError, read_record

    monkeypatch.delenv(KEY_ENV, raising=False)
    document = _valid_record_document()
    paths = [path for path in _paths(document) if path and path[0] not in ("digest", "signature")]
    folder = Path(tempfile.mkdtemp())

    def check(drawn):
        index, value = drawn
        changed = json.loads(json.dumps(document))
        *parents, last = paths[index % len(paths)]
        holder = changed
        for step in parents:
            holder = holder[step]
        holder[last] = value
        path = folder / "record.json"
        rewrite(path, json.dumps(sealed(changed, None)).encode("utf-8"))
        try:
            read_record(path)
        except RunRecordError as exc:
            assert str(path) in str(exc)

    run_property(examples, st.tuples(st.integers(min_value=0), JSON_VALUES), check)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_any_bytes_as_a_run_record_are_refused_by_name(examples):
    from pytest_modelbench.outputs.run_record import RunRecordError, read_record

    folder = Path(tempfile.mkdtemp())

    def check(content):
        path = folder / "record.json"
        rewrite(path, content)
        with pytest.raises(RunRecordError, match=re.escape(str(path))):
            read_record(path)

    run_property(examples, st.binary(max_size=200) | st.text(max_size=200).map(str.encode), check)
