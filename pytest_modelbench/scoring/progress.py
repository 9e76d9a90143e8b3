"""Progress lines during long scoring: documents done of total, rate and ETA, at most one line per interval.

    modelbench: arc_challenge_mt_fi: 120/1172 documents (10%), 3.4 documents/s, ETA 5m09s

Nothing is written for scoring that finishes within the first interval. Under pytest the lines go through the terminal
reporter with output capture suspended (the way pytest's own live logging does it), so they show while the test runs;
elsewhere (scripts, the benchmark) they go to stderr. The rate counts computed documents only: documents answered by
the score cache are counted as done but do not inflate the rate. Interval: `$MODELBENCH_PROGRESS_INTERVAL` seconds
(default 10; 0 turns progress off).
"""

from __future__ import annotations

import math
import os
import sys
import time
from contextlib import nullcontext
from typing import Callable, Sequence

Sink = Callable[[str], None]
INTERVAL_ENV = "MODELBENCH_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 10.0


def default_interval() -> float:
    """Seconds between progress lines, from the environment; a bad value is a ValueError naming the variable."""
    raw = os.environ.get(INTERVAL_ENV)
    if raw is None:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"${INTERVAL_ENV} must be a number of seconds >= 0 (0 turns progress off), got {raw!r}")
    return value


def stderr_sink(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def pytest_sink(config) -> Sink:
    """Writes a line to pytest's terminal with capture suspended; silent where there is no terminal (xdist workers)."""

    def write(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
            reporter.write_line(line)

    return write


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ScoringProgress:
    """Counts documents as their requests complete; `unit_sizes[d]` = requests of document d (in request order)."""

    def __init__(self, sink: Sink | None, label: str, unit_sizes: Sequence[int], unit: str = "documents",
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.sink = sink
        self.label = label
        self.unit = unit
        self.interval = default_interval() if interval is None else interval
        self.clock = clock
        self.total = len(unit_sizes)
        self._remaining = list(unit_sizes)
        self._unit_of: list[int] = [d for d, size in enumerate(unit_sizes) for _ in range(size)]
        self.done = sum(1 for size in unit_sizes if size == 0)
        self.computed = 0
        self.start = clock()
        self._last = self.start
        self.lines = 0

    def requests_done(self, indices: Sequence[int], computed: bool = True) -> None:
        for i in indices:
            d = self._unit_of[i]
            self._remaining[d] -= 1
            if self._remaining[d] == 0:
                self.done += 1
                self.computed += computed
        self._maybe_report()

    def _maybe_report(self) -> None:
        if self.sink is None or self.interval <= 0:
            return
        now = self.clock()
        if now - self._last >= self.interval and self.done < self.total:
            self._last = now
            self._emit(now)

    def _emit(self, now: float, final: bool = False) -> None:
        elapsed = max(now - self.start, 1e-9)
        rate = self.computed / elapsed
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        line = f"modelbench: {self.label}: {self.done}/{self.total} {self.unit}{share}, {rate:.1f} {self.unit}/s"
        if final:
            line += f", done in {_duration(elapsed)}"
        elif rate > 0:
            line += f", ETA {_duration((self.total - self.done) / rate)}"
        self.lines += 1
        self.sink(line)

    def finish(self) -> None:
        """A closing line, only when progress lines were shown."""
        if self.sink is not None and self.lines:
            self._emit(self.clock(), final=True)
