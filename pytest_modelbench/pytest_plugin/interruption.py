"""SIGINT and SIGTERM: the session stops promptly, keeps what was scored and says it was interrupted
(docs/integrity.md, "Interrupted runs").

SIGTERM, what CI runners, Kubernetes and Slurm send a job first, is made what SIGINT is to Python: a
KeyboardInterrupt in the main thread. pytest then stops the item being run and every session hook still runs: the
score cache keeps what was scored, the gate's decision (gate/decision.py) is `interrupted` with the tasks it did not
judge, and the results JSON, the reports and the run record are written. A second signal of either kind exits at
once with the interrupted status, writing nothing more (a baseline being written is the old file or the new one:
gate/storage.py writes by rename).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from pytest_modelbench.gate.decision import EXIT_STATUS_INTERRUPTED

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interruption:
    """The session's signal handlers, installed from pytest_configure to pytest_unconfigure; `signal_name`: the
    first signal received (None: none)."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread (an embedding program's business)
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal_name is not None:
            os._exit(EXIT_STATUS_INTERRUPTED)
        self.signal_name = signal.Signals(signum).name
        raise KeyboardInterrupt(self.signal_name)


INTERRUPTION_KEY = pytest.StashKey[Interruption]()


def configure(config: pytest.Config) -> None:
    """Install the handlers in the process that runs the session (not in an xdist worker: its controller's signal
    ends it)."""
    if hasattr(config, "workerinput"):
        return
    interruption = config.stash[INTERRUPTION_KEY] = Interruption()
    interruption.install()


def unconfigure(config: pytest.Config) -> None:
    interruption = config.stash.get(INTERRUPTION_KEY, None)
    if interruption is not None:
        interruption.uninstall()


def signal_name(config: pytest.Config) -> str:
    """What interrupted the session: the signal received, or a KeyboardInterrupt raised without one."""
    interruption = config.stash.get(INTERRUPTION_KEY, None)
    return getattr(interruption, "signal_name", None) or "KeyboardInterrupt"
