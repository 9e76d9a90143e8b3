"""Command-line values checked before anything is collected or scored: a bad value is a usage error naming the option.

The pytest layer calls these from pytest_configure, so a run that would fail (or silently score something else)
after minutes of scoring stops at once instead.
"""

from __future__ import annotations

import math
import os
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from pytest_modelbench.atomic_files import write_text_atomic
from pytest_modelbench.errors import ModelLoadError
from pytest_modelbench.gate.decision import EXIT_STATUS_INTERRUPTED, EXIT_STATUS_WRITE_FAILED
from pytest_modelbench.scoring.custom_backend import BackendFactory
from pytest_modelbench.scoring.loading import parse_model_args, scorer_args_problem
from pytest_modelbench.scoring.progress import default_interval
from pytest_modelbench.pytest_plugin.stash_keys import WRITE_FAILURES_KEY


def batch_size(value: str | None) -> int | str | None:
    """`--batch-size`: a positive integer (ASCII digits) or 'auto'; None when not given (run/runner.py's
    `batch_size_for` then decides per output type)."""
    if value is None or value == "auto":
        return value
    if value.isascii() and value.isdigit() and int(value) > 0:
        return int(value)
    raise pytest.UsageError(f"--batch-size must be a positive integer or 'auto', got {value!r}")


def backend_factory(value: str | None, rootdir: Path) -> BackendFactory | None:
    """`--backend MODULE:FACTORY`, MODULE looked for in the rootdir too; checked when the backend is built."""
    return None if value is None else BackendFactory(value, rootdir)


def count(option: str, value: int | None, minimum: int) -> int | None:
    """An integer option that may be absent: `--limit` (at least 1), `--num-fewshot` (at least 0)."""
    if value is not None and value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise pytest.UsageError(f"{option} must be {kind}, got {value}")
    return value


def seconds(option: str, value: float) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise pytest.UsageError(f"{option} must be a positive number of seconds, got {value}")
    return value


def server_urls(values: list[str]) -> tuple[str, ...]:
    """`--server-url`, repeated or comma-separated: http(s) base URLs, each once."""
    urls: list[str] = []
    for url in (part.strip() for value in values for part in value.split(",")):
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise pytest.UsageError(f"--server-url must be an http(s) URL such as http://node:8000/v1, got {url!r}")
        if url.rstrip("/") not in urls:
            urls.append(url.rstrip("/"))
    return tuple(urls)


def fewshot_as_multiturn(value: str | None, apply_chat_template: bool) -> bool:
    """lm-eval's CLI rule: on by default with a chat template; asking for it without one is an error."""
    if value is None:
        return apply_chat_template
    if value == "true" and not apply_chat_template:
        raise pytest.UsageError("--fewshot-as-multiturn true needs --apply-chat-template")
    return value == "true"


def model_args(value: str | None) -> str | None:
    """`--model-args`: key=value pairs, with the scorer's own keys of the right type and range."""
    try:
        problem = scorer_args_problem(parse_model_args(value))
    except ModelLoadError as exc:
        raise pytest.UsageError(str(exc)) from None
    if problem:
        raise pytest.UsageError(f"--model-args {problem}")
    return value


def check_progress_interval() -> None:
    """$MODELBENCH_PROGRESS_INTERVAL, read by every scorer later on."""
    try:
        default_interval()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def output_path(option: str, value: str | None, base: Path) -> Path | None:
    """A file the run writes at its end (`--results-json`, `--md-report`): checked now, so that a long run does not
    end without its results and never replaces what is not an ordinary file. A file is written into its folder
    and renamed over the path, so the folder must take a new file: a probe file is created and removed there."""
    if value is None:
        return None
    if not value.strip():
        raise pytest.UsageError(f"{option} needs a file path, got {value!r}")
    path = (base / value).resolve()  # a link is followed: its target is the file written
    if path.is_dir():
        raise pytest.UsageError(f"{option} {value}: is a folder, expected a file path")
    if path.exists() and not path.is_file():
        raise pytest.UsageError(f"{option} {value}: is not a regular file (a device, pipe or socket); "
                                "name a new file or an ordinary one to replace")
    if path.exists() and not path.stat().st_mode & 0o222:
        raise pytest.UsageError(f"{option} {value}: the file is read-only; make it writable or name another file")
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise pytest.UsageError(f"{option} {value}: cannot create the file, {folder} is not a folder")
    try:
        probe_fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".probe")
        os.close(probe_fd)
        os.unlink(probe)
    except OSError as exc:
        raise pytest.UsageError(
            f"{option} {value}: folder {folder} does not take new files ({exc.strerror or exc})"
        ) from None
    return path


def write_output(session: pytest.Session, option: str, path: Path, text: str) -> None:
    """Write an output file at the end of the run; a failure is reported as one line and fails the run."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        write_failed(session, f"{option} {path}", exc)


def write_failed(session: pytest.Session, what: str, exc: OSError) -> None:
    """A file the run writes at its end could not be written (a full disk, an I/O error, a read-only folder): one
    line, and the session fails with EXIT_STATUS_WRITE_FAILED (gate/decision.py; an interrupted one keeps its own),
    every report written after it saying so. The file is as it was (atomic_files.py: nothing half-written)."""
    reason = f"{what}: cannot write the file ({exc.strerror or exc}); it is left as it was, nothing half-written"
    session.config.stash.setdefault(WRITE_FAILURES_KEY, []).append(reason)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"modelbench: {reason}", red=True, bold=True)
    if session.exitstatus != EXIT_STATUS_INTERRUPTED:
        session.exitstatus = EXIT_STATUS_WRITE_FAILED
