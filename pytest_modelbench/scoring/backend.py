"""The one seam between an evaluation and whatever produces its log-likelihoods.

A backend scores a prepared task (`score_task`: one value per (document, choice), documents in order) and loose
(context, continuation) requests (`loglikelihood`), answers a generate_until task (`generate_task`: one
generation per document, in order), scores a loglikelihood_rolling task (`rolling_loglikelihood_task`: each
document's text log-likelihood over lm-eval's rolling windows) and a loglikelihood task (`loglikelihood_task`: per
document its continuation's log-likelihood and whether the continuation is the greedy one); a backend that cannot
run an output type raises ModelLoadError naming the task and itself. It says what it is (`describe`): the baseline
provenance and the score cache identify the weights from that. The runner (runner.py) picks the backend from the
options; the local causal and masked scorers (sharded or not) and the server scorer implement it. No backend knows about the gate or
pytest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from pytest_modelbench.errors import ModelLoadError


@dataclass(frozen=True)
class BackendInfo:
    name: str  # what --model named
    fingerprint: str  # identifies the weights: their files, a hub commit, or a server's probed identity
    model_type: str  # "causal" or "masked": which scoring protocol
    dtype: str  # the weights' dtype as run, "" when the backend cannot tell
    device: str  # where it ran: a device, a device map's devices, or the servers
    scorer_kwargs: dict[str, Any] = field(default_factory=dict)  # --model-args the scorer itself consumes


def unset_batch_size(padding_changes_results: bool) -> int | str:
    """The batch size when none is given: lm-eval's 1 where padding a batch can change the result (generation, and
    lm-eval's own procedure, --plain-scoring), else 'auto' (sized from free memory)."""
    return 1 if padding_changes_results else "auto"


def output_type_unsupported(prepared, backend: str) -> ModelLoadError:
    """The error of a backend that cannot run tasks of this task's output type yet."""
    config = prepared.config
    return ModelLoadError(f"{config.source}: task '{config.task}': {config.output_type} tasks are not supported by "
                          f"the {backend} backend yet; run them on a local causal LM")


class Backend(Protocol):
    def score_task(self, prepared) -> list[float]: ...

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]: ...

    def generate_task(self, prepared) -> list[str]: ...

    def rolling_loglikelihood_task(self, prepared) -> list[float]: ...

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]: ...

    def describe(self) -> BackendInfo: ...


class RequestBackend:
    """A backend whose requests are scored independently of each other (causal LMs, locally or on a server): a task
    is its requests, with progress counted in documents."""

    def loglikelihood(self, requests: Sequence[tuple[str, str]], *, documents: Sequence[int] | None = None,
                      label: str = "scoring") -> list[float]:
        raise NotImplementedError

    def score_task(self, prepared) -> list[float]:
        requests = [(doc.context, continuation) for doc in prepared.documents for continuation in doc.continuations]
        documents = [len(doc.continuations) for doc in prepared.documents]
        return self.loglikelihood(requests, documents=documents, label=prepared.config.task)
