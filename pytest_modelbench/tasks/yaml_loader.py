"""Read task YAML files the way lm-eval 0.4.13 does: YAML 1.1, `!function` tags, recursive `include:`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from pytest_modelbench.errors import TaskConfigError


@dataclass(frozen=True)
class FunctionRef:
    """A `!function module.attr` tag; resolved only when the user allows task code."""

    dotted_name: str
    yaml_file: Path  # the file the tag is written in: its module is looked up beside it, errors name it

    @property
    def yaml_dir(self) -> Path:
        return self.yaml_file.parent

    def __repr__(self) -> str:  # as the YAML spells it, in error messages
        return f"!function {self.dotted_name}"


# libyaml's parser when PyYAML has it (as lm-eval does): collecting a few thousand task files is mostly parsing.
class _TaskYamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    pass


def _construct_function(loader: _TaskYamlLoader, node: yaml.Node) -> FunctionRef:
    return FunctionRef(loader.construct_scalar(node), loader.yaml_file)


_TaskYamlLoader.add_constructor("!function", _construct_function)


def read_yaml_file(path: Path) -> dict[str, Any]:
    """Parse one YAML file (no include resolution) into a mapping. The caller may change its keys; the values are
    shared with later reads of the same file and must not be changed in place."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise TaskConfigError(f"{path}: cannot read task file ({exc.strerror})") from None
    return dict(_parse(path, content))


# Collection reads each file twice (is it a task? then the task itself) and a shared include once per task that
# includes it; the file is read every time, its parse is reused while the bytes are the same.
@lru_cache(maxsize=4096)
def _parse(path: Path, content: bytes) -> dict[str, Any]:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskConfigError(f"{path}: not a UTF-8 text file (byte {exc.start}: {exc.reason})") from None
    loader = _TaskYamlLoader(text)
    loader.yaml_file = path
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise TaskConfigError(f"{path}: malformed YAML: {exc}") from None
    finally:
        loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TaskConfigError(f"{path}: a task file must be a mapping, found {type(data).__name__}")
    return data


def load_merged_yaml(path: Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read `path` and merge its includes: shallow, in order, local keys winning (lm-eval's rule)."""
    path = Path(os.path.abspath(path))  # includes are found beside the file as named, as lm-eval finds them
    if any(path.samefile(seen) for seen in _chain):
        cycle = " -> ".join(str(p) for p in (*_chain, path))
        raise TaskConfigError(f"{_chain[0]}: include cycle: {cycle}")
    config = read_yaml_file(path)
    not_names = [key for key in config if not isinstance(key, str)]  # YAML 1.1 reads `on:` or `1:` as a bool, an int
    if not_names:
        raise TaskConfigError(f"{path}: every key of a task file must be a name, found {not_names[0]!r}")
    includes = config.pop("include", None)
    if includes is None:
        return config
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise TaskConfigError(f"{path}: key 'include' must be a file name or a list of file names")
    merged: dict[str, Any] = {}
    for include in includes:
        include_path = path.parent / include
        if not include_path.is_file():
            raise TaskConfigError(f"{path}: include '{include}' not found (looked for {include_path})")
        included = load_merged_yaml(include_path, (*_chain, path))
        included.pop("task_list", None)
        merged.update(included)
    merged.update(config)
    return merged
