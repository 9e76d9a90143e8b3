"""Resident memory of this process, for both sides of the benchmark (stdlib only: lm-eval's venv imports it too)."""

from __future__ import annotations

import os
import threading

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE


class PeakRss:
    """Samples rss() every `every` seconds while the block runs; `.peak` is the highest value seen."""

    def __init__(self, every: float = 0.005):
        self.every, self.peak, self._stop = every, rss(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, rss())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())
