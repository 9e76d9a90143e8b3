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
- `describe() -> BackendInfo`: what it is; the baseline provenance and the score cache identify the weights from it.
- `cache_namespace(shared_tokens: bool) -> str | None`: optional; everything besides the request that a value depends
  on (model, weights, settings), or None when the weights cannot be identified. Without it nothing is cached.

`on_batch(positions, values)` may be called as batches finish (positions into `requests`; for DocumentRequests,
into their continuations counted in order): the front then writes those values to the score cache and reports
progress before the whole call returns. A backend that never calls it still works.

A backend raises RequestError(problem, position) for a request it cannot score. A backend without the method of an
output type cannot run those tasks (a ModelLoadError naming the task and the backend).

The front (scoring/front.py) owns the rest: it builds the requests from a prepared task, keys and reads the score
cache, reports progress, checks what came back (count, shape, kind, finiteness: a BackendResultError naming the
backend, the task and the first bad position) and names the document behind a failed request. The runner
(runner.py) builds the backend from the options; the local causal and masked scorers (sharded or not) and the server
scorer implement it. Not moved behind the seam yet: loglikelihood_rolling and generate_until, which the backends run
as whole tasks (`rolling_loglikelihood_task(prepared)`, `generate_task(prepared)`) with their own cache keys (token
windows, batch plans) and progress.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from pytest_modelbench.errors import ModelLoadError

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


def unset_batch_size(padding_changes_results: bool) -> int | str:
    """The batch size when none is given: lm-eval's 1 where padding a batch can change the result (generation, and
    lm-eval's own procedure, --plain-scoring), else 'auto' (sized from free memory)."""
    return 1 if padding_changes_results else "auto"


def output_type_unsupported(prepared, backend: str) -> ModelLoadError:
    """The error of a backend that cannot run tasks of this task's output type yet."""
    config = prepared.config
    return ModelLoadError(f"{config.source}: task '{config.task}': {config.output_type} tasks are not supported by "
                          f"the {backend} backend yet; run them on a local causal LM")
