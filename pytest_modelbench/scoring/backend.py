"""The one seam between an evaluation and whatever produces its numbers.

A backend turns requests into numbers and knows nothing of tasks, the cache or progress. Per output type, requests
in, one value per request out, in order (a list or anything `list()` takes):

- `loglikelihoods(requests: Sequence[LoglikelihoodRequest], on_batch) -> floats`: log P(continuation | context).
  multiple_choice tasks (every choice of every document) and loose requests (`modelbench_model.loglikelihood`).
  Required.
- `greedy_loglikelihoods(requests: Sequence[LoglikelihoodRequest], on_batch) -> (float, bool) pairs`: the
  log-likelihood and whether the continuation is the greedy one (lm-eval's is_greedy); loglikelihood tasks.
- `document_loglikelihoods(requests: Sequence[DocumentRequest], on_batch) -> per document, one float per
  continuation`: for a backend whose choices are not independent of each other (a masked LM: CrowS-Pairs' shared
  tokens); when a backend has it, multiple_choice tasks use it instead of `loglikelihoods`.
- `rolling_loglikelihoods(requests: Sequence[RollingRequest], on_batch) -> floats`: log P(text), over as many
  windows of the model's length as the text needs (lm-eval's rolling windows, scoring/rolling.py);
  loglikelihood_rolling tasks.
- `generate(requests: Sequence[GenerationRequest], on_batch) -> strs`: the answer to each context, cut before the
  first stop sequence; generate_until tasks.
- `generation_batches(requests: Sequence[GenerationRequest]) -> lists of positions`: optional; how `generate` batches
  these requests, for a backend whose answers depend on the other requests of their batch (padding). `generate`
  given the requests of some of these batches must batch them the same way. Without it each answer is taken to
  depend on its own request only.
- `describe() -> BackendInfo`: what it is; the baseline provenance and the score cache identify the weights from it.
- `cache_namespace(shared_tokens: bool) -> str | None`: optional; everything besides the request that a value depends
  on (model, weights, settings), or None when the weights cannot be identified. Without it nothing is cached.
- `generation_cache_namespace() -> str | None`: the same for `generate`; without it no answer is cached.

`on_batch(positions, values)` may be called as batches finish (positions into `requests`; for DocumentRequests,
into their continuations counted in order): the front then writes those values to the score cache and reports
progress before the whole call returns. A backend that never calls it still works.

A backend raises RequestError(problem, position) for a request it cannot score (without a position: for none of
them, e.g. a setting it cannot honour). A request that failed for a reason of the run, not of the request (a
timeout, an HTTP 500 that its own retries did not get past), is returned as `None` or `Unscored(reason)` in its
place, in the list or through on_batch: its document is left unscored (never scored as wrong), nothing of it is
cached, and the task's integrity policy decides whether the rest is gated (docs/integrity.md). A document
loglikelihoods backend returns `None` or `Unscored` for a whole document.
Any other exception a backend raises once scoring has begun (a `ConnectionError` from the HTTP client it wraps, a
CUDA out-of-memory error, a bug) ends the task's scoring as a failure of the run: what it passed through `on_batch`
before it raised is kept and cached, every request of the call it had not answered is unscored (`BackendRaised`,
naming the exception), and the task is `error` whatever its integrity limits; the session goes on to its next task.
The traceback is logged at DEBUG on the `pytest_modelbench` logger (`--log-level=DEBUG`).
- `retried_requests() -> int`: optional; how many requests the backend re-sent after a failure so far (a running
  count): the task's report shows the difference over its scoring.

A backend without the method of an output type cannot run those tasks (a ModelLoadError naming the task and the
backend).

The front (scoring/front.py) owns the rest: it builds the requests from a prepared task, keys and reads the score
cache, reports progress, checks what came back (count, shape, kind, finiteness: a BackendResultError naming the
backend, the task and the first bad position) and names the document behind a failed request. A sampled task's
answers are cached as a whole (each batch draws from what the batches before it left of the random stream). The
runner (run/runner.py) builds the backend from the options (`--backend MODULE:FACTORY`: a third-party one, see
scoring/custom_backend.py); the local causal and masked scorers (sharded or not) and the server scorer implement it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from pytest_modelbench.errors import ModelLoadError
from pytest_modelbench.tasks.generation_settings import SAMPLING_SEED, GenerationSettings

OnBatch = Callable[[list[int], list[Any]], None]


@dataclass(frozen=True)
class LoglikelihoodRequest:
    context: str
    continuation: str


@dataclass(frozen=True)
class DocumentRequest:
    """A document's choices, scored together. `shared_tokens`: only the tokens both continuations (exactly two) share
    are scored, as CrowS-Pairs' metric does (the task's modelbench.masked_protocol pll_shared)."""

    context: str
    continuations: tuple[str, ...]
    shared_tokens: bool = False


@dataclass(frozen=True)
class RollingRequest:
    text: str


@dataclass(frozen=True)
class GenerationRequest:
    """A context to answer as the task's generation_kwargs say (GenerationSettings: the stop sequences `until`, to
    which a backend adds its model's end-of-sequence text; at most `max_gen_toks` new tokens; the decoding settings,
    transformers' names, e.g. (("do_sample", True), ("temperature", 0.8)); `sampling` when they sample). A sampled
    task asks each document `repeats` times (its draws, numbered by `draw`, adjacent as lm-eval clones a document's
    request); `seed` is the run's sampling seed (--sampling-seed), which a backend seeds its sampler with."""

    context: str
    settings: GenerationSettings
    seed: int = SAMPLING_SEED
    draw: int = 0


@dataclass(frozen=True)
class Unscored:
    """A request's place in a backend's answer when the run could not score it (module docstring): why."""

    reason: str


@dataclass(frozen=True)
class BackendRaised(Unscored):
    """A request left unscored because the backend raised while scoring it (module docstring): its task is the run's
    `error` whatever its limits."""


def retried_count(backend: object) -> int:
    """A backend's running count of re-sent requests (`retried_requests`, module docstring); 0 when it keeps none."""
    count = getattr(backend, "retried_requests", None)
    return int(count()) if callable(count) else 0


def unscored_reason(value: object) -> str | None:
    """Why a value a backend returned stands for an unscored request; None when it is a value."""
    if value is None:
        return "the backend returned None (it could not score the request)"
    return value.reason if isinstance(value, Unscored) else None


@dataclass(frozen=True)
class BackendInfo:
    name: str  # what --model named
    fingerprint: str  # identifies the weights: their files, a hub commit, or a server's probed identity
    model_type: str  # "causal" or "masked": which scoring protocol
    dtype: str  # the weights' dtype as run, "" when the backend cannot tell
    device: str  # where it ran: a device, a device map's devices, or the servers
    scorer_kwargs: dict[str, Any] = field(default_factory=dict)  # --model-args the scorer itself consumes


class ScoringBackend(Protocol):
    """The least a backend implements; the optional methods are in the module docstring."""

    def loglikelihoods(self, requests: Sequence[LoglikelihoodRequest], on_batch: OnBatch | None = None
                       ) -> Sequence[float]: ...

    def describe(self) -> BackendInfo: ...


class Backend(Protocol):
    """What the evaluation drives: a task at a time. The front (scoring/front.py, TaskFront) gives it to every
    ScoringBackend."""

    def score_task(self, prepared) -> list[float]: ...

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]: ...

    def generate_task(self, prepared) -> list[str]: ...

    def rolling_loglikelihood_task(self, prepared) -> list[float]: ...

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]: ...

    def describe(self) -> BackendInfo: ...


def output_type_unsupported(prepared, backend: str) -> ModelLoadError:
    """The error of a backend that cannot run tasks of this task's output type yet."""
    config = prepared.config
    return ModelLoadError(f"{config.source}: task '{config.task}': {config.output_type} tasks are not supported by "
                          f"the {backend} backend yet; run them on a local causal LM")
