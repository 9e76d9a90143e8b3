"""Requests spread over one or more servers with at most `concurrency` in flight.

Work is a queue of batches (several prompts each). Each server gets a share of `concurrency` worker threads that
take the next batch from the queue, so a slow server simply takes fewer. What a batch asks for is the caller's
`request(server, served name, prompts)`: prompt log-probabilities by default (multiple choice, loglikelihood_rolling
windows), or generations (generate_until, scorer.py); retries, re-sends and the end-of-call errors are the same for
every kind.
- A transient failure (connection error, timeout, 429, 5xx) puts the batch back on the queue for any server and makes
  the worker wait (exponential backoff). A worker whose requests fail `retries + 1` times in a row stops, so a dead
  server's workers all stop and the live servers take the work. A batch that failed `retries + 1` times per server,
  and every batch left when no worker is left, is given up: with `on_failed` the caller learns which and why (its
  requests are left unscored, scoring/backend.py `Unscored`) and the other batches go on; without it the call ends
  with an error naming the servers and what they said. Every re-send after a transient failure is counted
  (`retried`, a running count the task's report shows).
- A hung server (it accepts connections and never answers) fails by timeouts only, each a whole `--server-timeout`,
  and all its workers wait at once: its timeouts are counted per server, and once `retries + 1` of them came in a
  row (no answer between them) the server is down, whichever workers they came from. A call does not wait for the
  workers still blocked on it, and a server down by timeouts is given up for the rest of the session (the pool's
  later calls give it no worker; with no server left, every batch is given up at once). So with the defaults (8
  workers, 4 retries, 300 s) a hung server holds a session up for about one timeout, not one per retry and task
  (docs/backends.md, "A server that hangs").
- A straggler (a batch in flight for over `STRAGGLER_FACTOR` times the median time of the batches done so far, and
  at least `STRAGGLER_MIN_S`) is sent again by a worker that has nothing else to do; the first answer wins. So a
  server that hangs or slows down holds up the run for a few batch-times, not for `--server-timeout`.
- Any other error ends the call at once.
Results reach the caller's `on_done` on the calling thread, so the score cache is written from one thread; nothing
from a failed or partial response is ever passed on.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from pytest_modelbench.errors import ServerError
from pytest_modelbench.scoring.server.client import CompletionsServer, ServerTimeout, ServerUnavailable, backoff_s

STRAGGLER_FACTOR = 4.0
STRAGGLER_MIN_S = 5.0
# request(server, served model name, prompts) -> one value per prompt; raises ServerUnavailable (retry) or ServerError
Request = Callable[[CompletionsServer, str, Sequence[Sequence[int]]], list[Any]]


def prompt_logprobs(server: CompletionsServer, model: str, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
    return server.prompt_logprobs(model, prompts)


@dataclass
class _Batch:
    index: int
    prompts: Sequence[Sequence[int]]
    failures: int = 0


class ServerPool:
    def __init__(self, servers: Sequence[CompletionsServer], models: Sequence[str], *, concurrency: int,
                 retries: int):
        """`models`: the name each server serves the checkpoint under, in the order of `servers`."""
        if not servers:
            raise ValueError("a server pool needs at least one server")
        self.servers = list(servers)
        self.models = list(models)
        self.concurrency = max(concurrency, len(self.servers))
        self.retries = retries
        self.retried = 0  # batches re-sent after a transient failure, over every call (ServerScorer.retried_requests)
        self.hung: dict[int, str] = {}  # servers given up for the session, down by timeouts: index → what they said

    def describe(self) -> str:
        return ", ".join(str(s) for s in self.servers)

    def run(self, batches: Sequence[Sequence[Sequence[int]]], on_done: Callable[[int, list[Any]], None],
            request: Request = prompt_logprobs, on_failed: Callable[[int, str], None] | None = None) -> None:
        """`request` (default: prompt log-probabilities) for every batch; `on_done(batch index, values)` once per batch,
        as each completes; `on_failed(batch index, why)` once per batch given up after its retries (module
        docstring; without it such a batch ends the call with a ServerError)."""
        if not batches:
            return
        live = [i for i in range(len(self.servers)) if i not in self.hung]
        if not live:
            for index in range(len(batches)):
                if on_failed is None:
                    raise ServerError(self._hung_message())
                on_failed(index, self._hung_message())
            return
        work: queue.Queue[_Batch] = queue.Queue()
        for i, prompts in enumerate(batches):
            work.put(_Batch(i, prompts))
        results: queue.Queue[tuple[str, object, object]] = queue.Queue()
        stop = threading.Event()
        assignment = [live[k % len(live)] for k in range(self.concurrency)]
        state = _PoolState([assignment.count(i) for i in range(len(self.servers))])
        for k, s in enumerate(assignment):
            threading.Thread(target=self._worker, args=(s, work, results, stop, state, request), daemon=True,
                             name=f"modelbench-server-{self.servers[s]}-{k}").start()
        left = set(range(len(batches)))
        try:
            while left:
                try:
                    kind, first, second = results.get(timeout=0.2)
                except queue.Empty:
                    if state.all_down():
                        if on_failed is None:
                            raise ServerError(self._all_down_message(state)) from None
                        for index in sorted(left):
                            on_failed(index, self._all_down_message(state))
                        return
                    continue
                if kind == "error":
                    raise first  # type: ignore[misc]
                if first not in left:
                    continue
                left.discard(first)  # type: ignore[arg-type]
                if kind == "failed":
                    if on_failed is None:
                        raise ServerError(second)  # type: ignore[arg-type]
                    on_failed(first, second)  # type: ignore[arg-type]
                else:
                    on_done(first, second)  # type: ignore[arg-type]
        finally:
            stop.set()
            self.retried += state.retried
            self.hung.update((i, state.last_error[i] or str(self.servers[i])) for i in state.hung_servers())

    def _worker(self, server_index: int, work: queue.Queue, results: queue.Queue, stop: threading.Event,
                state: "_PoolState", request: Request) -> None:
        server = self.servers[server_index]
        failures = 0  # this worker's transient failures in a row
        try:
            while not stop.is_set():
                try:
                    batch = work.get(timeout=0.1)
                except queue.Empty:
                    batch = state.straggler()
                    if batch is None:
                        continue
                if not state.started(batch):
                    continue  # answered already (a straggler's other copy)
                if batch.failures:
                    state.count_retry()  # a re-send after a transient failure
                began = time.monotonic()
                try:
                    values = request(server, self.models[server_index], batch.prompts)
                except ServerUnavailable as exc:
                    failures += 1
                    batch.failures += 1
                    state.last_error[server_index] = str(exc)
                    if isinstance(exc, ServerTimeout) and state.timed_out(server_index, self.retries):
                        if state.failed(batch):
                            work.put(batch)
                        return
                    if batch.failures > (self.retries + 1) * len(self.servers):  # fails everywhere: not a dead server
                        if state.given_up(batch):
                            results.put(("failed", batch.index, f"no scoring server could answer: {exc} (one request "
                                         f"failed {batch.failures} times on {self.describe()})"))
                        return
                    if state.failed(batch):
                        work.put(batch)
                    if failures > self.retries:
                        return
                    stop.wait(backoff_s(failures))
                    continue
                except ServerError as exc:
                    results.put(("error", exc, None))
                    return
                except Exception as exc:  # a bug or an unexpected response shape: end the call, never hang it
                    results.put(("error", ServerError(f"server {server}: unexpected {type(exc).__name__}: {exc}"),
                                 None))
                    return
                failures = 0
                if state.finished(batch, time.monotonic() - began, server_index):
                    results.put(("done", batch.index, values))
        finally:
            state.worker_ended(server_index)

    def _hung_message(self) -> str:
        said = "; ".join(self.hung.values())
        return (f"no scoring server could answer: {said}; given up for the rest of this session after "
                f"{self.retries + 1} timeouts in a row (re-run once it answers)")

    def _all_down_message(self, state: "_PoolState") -> str:
        said = "; ".join(state.last_error[i] or str(s) for i, s in enumerate(self.servers))
        return f"no scoring server could answer: {said} ({self.retries + 1} tries in a row each)"


class _PoolState:
    """Shared by the workers: batches in flight (when sent, how many copies), done, how long batches take, live
    workers per server (a worker ends after `retries + 1` transient failures in a row) and what each server last
    said."""

    def __init__(self, workers_per_server: list[int]):
        self._lock = threading.Lock()
        self._live = list(workers_per_server)
        self._in_flight: dict[int, tuple[_Batch, float, int]] = {}  # index → batch, first sent, copies in flight
        self._resent: set[int] = set()
        self._done: set[int] = set()
        self._seconds: list[float] = []
        self.last_error: list[str | None] = [None] * len(workers_per_server)
        self.retried = 0
        self._timeouts = [0] * len(workers_per_server)  # per server: timeouts in a row, over all its workers
        self._hung = [False] * len(workers_per_server)

    def started(self, batch: _Batch) -> bool:
        """Record a copy of `batch` going out; False when it is answered already."""
        with self._lock:
            if batch.index in self._done:
                return False
            _, sent, copies = self._in_flight.get(batch.index, (batch, time.monotonic(), 0))
            self._in_flight[batch.index] = (batch, sent, copies + 1)
            return True

    def finished(self, batch: _Batch, seconds: float, server: int) -> bool:
        """Record an answer from `server`; True for the first answer of the batch (the one to pass on)."""
        with self._lock:
            self._seconds.append(seconds)
            self._timeouts[server] = 0
            if batch.index in self._done:
                return False
            self._done.add(batch.index)
            self._in_flight.pop(batch.index, None)
            return True

    def given_up(self, batch: _Batch) -> bool:
        """Record a batch given up after its retries; True unless it was answered already (by another copy)."""
        with self._lock:
            if batch.index in self._done:
                return False
            self._done.add(batch.index)
            self._in_flight.pop(batch.index, None)
            return True

    def failed(self, batch: _Batch) -> bool:
        """Record a failed copy; True when the batch must go back on the queue (no other copy is still out)."""
        with self._lock:
            if batch.index in self._done:
                return False
            entry = self._in_flight.get(batch.index)
            copies = entry[2] - 1 if entry else 0
            if copies > 0:
                self._in_flight[batch.index] = (batch, entry[1], copies)
                return False
            self._in_flight.pop(batch.index, None)
            return True

    def straggler(self) -> _Batch | None:
        """The batch longest in flight, once past the straggler threshold and not re-sent before."""
        with self._lock:
            if not self._seconds:
                return None
            threshold = max(STRAGGLER_MIN_S, STRAGGLER_FACTOR * statistics.median(self._seconds))
            now = time.monotonic()
            late = [(sent, index) for index, (_, sent, _) in self._in_flight.items()
                    if index not in self._resent and now - sent > threshold]
            if not late:
                return None
            index = min(late)[1]
            self._resent.add(index)
            return self._in_flight[index][0]

    def timed_out(self, server: int, retries: int) -> bool:
        """Record a timeout of `server`; True once it is hung: over `retries` timeouts in a row, over all its
        workers (module docstring)."""
        with self._lock:
            self._timeouts[server] += 1
            self._hung[server] = self._hung[server] or self._timeouts[server] > retries
            return self._hung[server]

    def hung_servers(self) -> list[int]:
        with self._lock:
            return [i for i, hung in enumerate(self._hung) if hung]

    def count_retry(self) -> None:
        with self._lock:
            self.retried += 1

    def worker_ended(self, i: int) -> None:
        with self._lock:
            self._live[i] -= 1

    def all_down(self) -> bool:
        """No server left: each has no live worker, or is hung (its workers still blocked on it are not waited for)."""
        with self._lock:
            return all(live == 0 or hung for live, hung in zip(self._live, self._hung))
