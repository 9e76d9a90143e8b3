"""Load a task's splits with `datasets.load_dataset`, from the hub or from a local mirror folder.

Mirror layout (``--data-dir`` / ``MODELBENCH_DATA_DIR``): a hub dataset ``org/name`` with config ``cfg`` is served
from ``<data-dir>/org/name/cfg/<split>.<ext>`` (without a config: ``<data-dir>/org/name/<split>.<ext>``), where
``ext`` is one of jsonl, json, csv, tsv, parquet. Files may be symbolic links.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import DatasetError, TaskCodeError
from pytest_modelbench.tasks.config import TaskConfig

DATA_DIR_ENV = "MODELBENCH_DATA_DIR"
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet"}


@dataclass(frozen=True)
class Split:
    name: str
    docs: list[dict[str, Any]]
    field_names: set[str]
    fingerprint: str


def mirror_files(config: TaskConfig, data_dir: Path | None) -> dict[str, Path] | None:
    """The split files that serve `config`'s hub dataset from the mirror, or None when it has none."""
    if data_dir is None or not config.dataset_path:
        return None
    folder = data_dir / config.dataset_path
    if config.dataset_name:
        folder = folder / config.dataset_name
    if not folder.is_dir():
        return None
    files = {p.stem: p for p in sorted(folder.iterdir()) if p.suffix in _BUILDERS}
    return files or None


def load_split(config: TaskConfig, split: str, data_dir: Path | None) -> Split:
    """Load one split of the task's dataset as a list of documents (process_docs applied)."""
    import datasets  # heavy: imported only when data is actually loaded

    where = f"{config.source}: task '{config.task}'"
    mirrored = mirror_files(config, data_dir)
    if mirrored is not None:
        if split not in mirrored:
            raise DatasetError(
                f"{where}: split '{split}' not found in local mirror {mirrored[next(iter(mirrored))].parent} "
                f"(has: {', '.join(sorted(mirrored))})"
            )
        path = mirrored[split]
        kwargs: dict[str, Any] = {"path": _BUILDERS[path.suffix], "data_files": {split: str(path)}}
        if path.suffix == ".tsv":
            kwargs["delimiter"] = "\t"
    else:
        if not config.dataset_path:
            raise DatasetError(f"{where}: key 'dataset_path' is missing")
        kwargs = {"path": config.dataset_path, "name": config.dataset_name, **_resolved_kwargs(config)}
    kwargs.pop("trust_remote_code", None)
    try:
        dataset = datasets.load_dataset(**kwargs, split=split)
    except Exception as exc:  # datasets raises many unrelated types for "not found / offline / bad file"
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if mirrored is not None:
            raise DatasetError(f"{where}: cannot load split '{split}' of dataset '{kwargs['path']}': {message}") from None
        raise DatasetError(
            f"{where}: cannot load split '{split}' of dataset '{kwargs['path']}' from the Hugging Face Hub: {message}. "
            + hub_needs(config, split, data_dir)
        ) from None
    if config.process_docs is not None:
        try:
            dataset = config.process_docs(dataset)
        except TaskCodeError as exc:
            raise DatasetError(f"{where}: process_docs {exc} (split '{split}')") from None
        if not hasattr(dataset, "column_names"):
            raise DatasetError(f"{where}: process_docs must return a datasets.Dataset, got {type(dataset).__name__}")
    docs = list(dataset)
    return Split(split, docs, set(dataset.column_names), documents_fingerprint(docs))


def hub_needs(config: TaskConfig, split: str, data_dir: Path | None) -> str:
    """What a hub dataset that could not be loaded needs: the hub, or a local copy in the mirror layout."""
    offline = [name for name in OFFLINE_ENV if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")]
    hub = "the hub (network access" + (f", with {' and '.join(offline)} unset" if offline else "") + ")"
    folder = "/".join(part for part in (config.dataset_path, config.dataset_name) if part)
    local = f"--data-dir DIR (or ${DATA_DIR_ENV}) holding DIR/{folder}/{split}.<{'|'.join(s.lstrip('.') for s in _BUILDERS)}>"
    if data_dir is None:
        where = "no --data-dir was given"
    elif not data_dir.is_dir():
        where = f"--data-dir {data_dir} does not exist"
    else:
        where = f"--data-dir {data_dir} has no {folder}/ folder"
    return f"It needs {hub} or a local copy: {local}; {where}"


def _resolved_kwargs(config: TaskConfig) -> dict[str, Any]:
    """dataset_kwargs with relative data_files resolved against the YAML's folder."""
    kwargs = dict(config.dataset_kwargs)
    data_files = kwargs.get("data_files")
    if data_files is not None:
        kwargs["data_files"] = _resolve_paths(data_files, config.source.parent)
    return kwargs


def resolved_data_files(config: TaskConfig, split: str | None) -> list[str]:
    """The YAML's own data_files for one split (all of them when not split by name), resolved; [] without any."""
    data_files = _resolved_kwargs(config).get("data_files")
    if isinstance(data_files, dict):
        data_files = data_files.get(split)
    if isinstance(data_files, str):
        return [data_files]
    return [f for f in data_files or () if isinstance(f, str)]


def _resolve_paths(value: Any, base: Path) -> Any:
    if isinstance(value, str):
        return value if "://" in value or os.path.isabs(value) else str(base / value)
    if isinstance(value, list):
        return [_resolve_paths(v, base) for v in value]
    if isinstance(value, dict):
        return {k: _resolve_paths(v, base) for k, v in value.items()}
    return value


def documents_fingerprint(docs: list[dict[str, Any]]) -> str:
    """A content hash of documents, stable across machines (datasets' own fingerprint is path-dependent)."""
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(repr(sorted(doc.items())).encode())
    return digest.hexdigest()[:16]
