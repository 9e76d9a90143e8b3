"""A persistent cache of request scores, so a re-run (or `--lf`) of an unchanged model does not recompute them.

Location: `$MODELBENCH_CACHE_DIR/scores.sqlite`; without that variable
`$XDG_CACHE_HOME/pytest-modelbench/scores.sqlite`, else `~/.cache/pytest-modelbench/scores.sqlite`. Delete the file to
clear the cache; `--no-cache` bypasses it.

Key: SHA-256 of the scoring namespace and the exact request (context and continuation strings). The namespace holds
everything else a score depends on. For a model loaded here (scoring/cached.py cache_namespace, the one place that says
what identifies it): the model fingerprint (`LoadedModel.fingerprint`: the checkpoint's files, config.json,
generation_config.json and tokenizer files among them, or the hub commit; and the --model-args that reached
from_pretrained), a digest of the weights as loaded in memory (per tensor: name, shape, dtype, float64 sum and sampled
values; so an in-memory edit or a different `--dtype` misses), the config and generation config as loaded, the
tokenizer's full serialized state; then the scorer's settings: device type, max length, prefix token, BOS setting,
which scorer path (fast or plain) and, on the plain path, the batch size (lm-eval's padding makes its numbers depend on
it). Every namespace holds the protocol version below and the torch, transformers and tokenizers versions. Values are
the float log-likelihoods (table `scores`); a loglikelihood task's greedy flags (1.0 or 0.0) are in the same table,
each under `greedy_key` of its request's key. Generated answers (generate_until) are text in table `generations`, keyed
as scoring/cached_generation.py says. A file written before generations were cached (only `scores`) is used as it is
and gains the `generations` table; those versions take a file with it for another program's and run without the
cache. Rows written under an earlier key scheme (before the config, the loading --model-args, the library versions and
the plain path's batch size were in the key) are never matched, since every namespace now holds those fields: they are
recomputed, never returned for another configuration.

Several processes may share the file (pytest-xdist workers, concurrent runs): SQLite in WAL mode, writes in short
`BEGIN IMMEDIATE` transactions, a busy timeout and retries with backoff, at most `lock_wait_s` (30 s) in all per
operation. Any cache failure (read-only disk, corrupt file, a file that is not this cache, a lock held beyond that
wait) is reported once as a warning and the run continues without the cache, recomputing; a cache never fails a test,
and a file that is not this cache is never written to. WAL needs a local filesystem (not NFS).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
import sqlite3
import time
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

CACHE_DIR_ENV = "MODELBENCH_CACHE_DIR"
CACHE_FILE = "scores.sqlite"
PROTOCOL_VERSION = "causal-loglikelihood/1"  # bump when a change in scoring changes the numbers
_LOCK_WAIT_S = 30.0
_TABLES = {"scores": "REAL", "generations": "TEXT"}  # table → value type: log-likelihoods, generated answers
_CHUNK = 500  # SQLite host parameters per query


def default_cache_path() -> Path:
    root = os.environ.get(CACHE_DIR_ENV)
    if root:
        return Path(root).expanduser() / CACHE_FILE
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pytest-modelbench" / CACHE_FILE


class ScoreCache:
    """Key → float store in one SQLite file; connections are opened lazily, one per process."""

    def __init__(self, path: Path | str | None = None, lock_wait_s: float = _LOCK_WAIT_S):
        self.path = Path(path) if path is not None else default_cache_path()
        self.lock_wait_s = lock_wait_s
        self.enabled = True
        self._connection: sqlite3.Connection | None = None
        self._pid: int | None = None
        self.hits = 0
        self.misses = 0
        self.writes = 0

    # --- public API -------------------------------------------------------------------------------------------------

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, float]:
        """Cached log-likelihoods."""
        return self._get("scores", keys, lambda value: isinstance(value, (int, float)) and math.isfinite(value),
                         float, "a value that is not a finite number")

    def put_many(self, items: Iterable[tuple[bytes, float]]) -> None:
        self._put("scores", [(key, float(value)) for key, value in items])

    def get_texts(self, keys: Sequence[bytes]) -> dict[bytes, str]:
        """Cached generations."""
        return self._get("generations", keys, lambda value: isinstance(value, str), str, "a value that is not text")

    def put_texts(self, items: Iterable[tuple[bytes, str]]) -> None:
        self._put("generations", list(items))

    def close(self) -> None:
        if self._connection is not None and self._pid == os.getpid():
            self._connection.close()
        self._connection = None

    # --- internals ----------------------------------------------------------------------------------------------

    def _get(self, table: str, keys: Sequence[bytes], usable: Callable[[Any], bool], convert: Callable[[Any], Any],
             problem: str) -> dict[bytes, Any]:
        found: dict[bytes, Any] = {}
        if not keys or not self.enabled:
            return found
        unique = list(dict.fromkeys(keys))
        unusable = 0

        def read(connection: sqlite3.Connection) -> None:
            nonlocal unusable
            for start in range(0, len(unique), _CHUNK):
                chunk = unique[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for key, value in connection.execute(f"SELECT key, value FROM {table} WHERE key IN ({marks})", chunk):
                    if usable(value):
                        found[bytes(key)] = convert(value)
                    else:  # written by something else (SQLite does not enforce column types): compute it again
                        unusable += 1

        if self._run(read, "read") is False:
            return {}
        if unusable:
            warnings.warn(
                f"pytest-modelbench: score cache {self.path}: {unusable} row(s) hold {problem}; recomputing them",
                stacklevel=3,
            )
        self.hits += sum(1 for key in keys if key in found)
        self.misses += sum(1 for key in keys if key not in found)
        return found

    def _put(self, table: str, items: list[tuple[bytes, Any]]) -> None:
        rows = [(key, value, time.time()) for key, value in items]
        if not rows or not self.enabled:
            return

        def write(connection: sqlite3.Connection) -> None:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(f"INSERT OR REPLACE INTO {table} (key, value, created) VALUES (?, ?, ?)", rows)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise

        if self._run(write, "write") is not False:
            self.writes += len(rows)

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None and self._pid == os.getpid():
            return self._connection
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(str(self.path), timeout=self.lock_wait_s, isolation_level=None)
        connection.execute(f"PRAGMA busy_timeout = {int(self.lock_wait_s * 1000)}")
        try:
            _check_is_score_cache(connection)
        except sqlite3.Error:
            connection.close()
            raise
        if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        for table, value_type in _TABLES.items():
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (key BLOB PRIMARY KEY, value {value_type} NOT NULL, "
                "created REAL NOT NULL) WITHOUT ROWID"
            )
        self._connection, self._pid = connection, os.getpid()
        return connection

    def _run(self, operation, what: str) -> Any:
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.05
        while True:
            try:
                return operation(self._connect())
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if busy and time.monotonic() + delay < deadline:
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 2.0)
                    continue
                return self._give_up(what, exc)
            except (sqlite3.Error, OSError) as exc:
                return self._give_up(what, exc)

    def _give_up(self, what: str, exc: BaseException) -> bool:
        self.enabled = False
        self.close()
        warnings.warn(
            f"pytest-modelbench: score cache {self.path} disabled for this run, scores are recomputed ({what} "
            f"failed: {exc}); if the file is damaged or not pytest-modelbench's, delete it",
            stacklevel=3,
        )
        return False


def _check_is_score_cache(connection: sqlite3.Connection) -> None:
    """Raise unless the database is empty or holds only this cache's tables, so another program's file is left as is.
    A file of the versions before generations were cached (only `scores`) is this cache: the table is added."""
    tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    columns = {table: [(row[1], row[2]) for row in connection.execute(f"PRAGMA table_info({table})")]
               for table in tables & set(_TABLES)}
    if tables - set(_TABLES) or any(columns[table] != _columns(table) for table in columns):
        raise sqlite3.DatabaseError(
            f"not a pytest-modelbench score cache (tables {sorted(tables)}, columns {columns})"
        )


def _columns(table: str) -> list[tuple[str, str]]:
    return [("key", "BLOB"), ("value", _TABLES[table]), ("created", "REAL")]


# --- keys -----------------------------------------------------------------------------------------------------------


def request_key(namespace: str, context: str, continuation: str) -> bytes:
    digest = hashlib.sha256(namespace.encode())
    digest.update(b"\x00")
    digest.update(json.dumps([context, continuation], ensure_ascii=False).encode())
    return digest.digest()


def rolling_key(namespace: str, text: str) -> bytes:
    """The key of a text's rolling log-likelihood (loglikelihood_rolling); a JSON object never equals the other
    keys' JSON lists."""
    digest = hashlib.sha256(namespace.encode())
    digest.update(b"\x00")
    digest.update(json.dumps({"rolling": text}, ensure_ascii=False).encode())
    return digest.digest()


def greedy_key(key: bytes) -> bytes:
    """The key of a request's greedy flag: the request's key hashed again, behind a prefix of its own."""
    return hashlib.sha256(b"is_greedy\x00" + key).digest()


def scoring_namespace(protocol: str = PROTOCOL_VERSION, **settings: Any) -> str:
    return json.dumps({"protocol": protocol, "libraries": library_versions(), **settings}, sort_keys=True, default=str)


@functools.cache
def library_versions() -> dict[str, str | None]:
    """The installed torch, transformers and tokenizers: a new version may tokenize or compute differently."""
    versions: dict[str, str | None] = {}
    for package in ("torch", "transformers", "tokenizers"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def config_fingerprint(model) -> str:
    """Hash of the model's class and of its config and generation config as loaded: config.json with the --model-args
    that override it, and the attention implementation; not the folder they were read from."""
    config = model.config.to_dict()
    config.pop("_name_or_path", None)
    generation = getattr(model, "generation_config", None)
    state = {
        "class": type(model).__name__, "config": config,
        "attention": getattr(model.config, "_attn_implementation", None),
        "generation": generation.to_dict() if generation is not None else None,
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()[:32]


def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of the tokenizer's full state: the serialized fast tokenizer (vocabulary, merges, normalizer,
    pre-tokenizer, post-processor, added tokens) or, for a slow one, its vocabulary; plus class and special tokens."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    serialized = None
    if backend is not None and hasattr(backend, "to_str"):
        try:
            serialized = backend.to_str()
        except Exception:  # a backend that cannot serialize: fall back to the vocabulary
            serialized = None
    if serialized is None:
        serialized = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    digest.update(serialized.encode())
    special = {
        "bos": getattr(tokenizer, "bos_token", None), "eos": getattr(tokenizer, "eos_token", None),
        "bos_id": getattr(tokenizer, "bos_token_id", None), "eos_id": getattr(tokenizer, "eos_token_id", None),
        "add_bos": getattr(tokenizer, "add_bos_token", None), "add_eos": getattr(tokenizer, "add_eos_token", None),
    }
    digest.update(json.dumps(special, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]


def weights_digest(model) -> str:
    """Per tensor (parameters and buffers; offloaded ones read from their store): name, shape, dtype, float64 sum
    (10 digits) and 16 evenly spaced values."""
    import torch

    from pytest_modelbench.scoring.placement import named_weights

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in named_weights(model):
            total = float(torch.sum(tensor, dtype=torch.float64)) if tensor.is_floating_point() else float(tensor.sum())
            flat = tensor.reshape(-1)
            sample = flat[:: max(1, flat.numel() // 16)][:16].double().tolist()
            digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|{total:.9e}|{sample}\n".encode())
    return digest.hexdigest()[:32]
