"""A task ready to score: its config, evaluated documents and their requests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.datasets import load_split
from pytest_modelbench.tasks.requests import DocumentRequests, FewshotSampler, RequestBuilder


@dataclass(frozen=True)
class PreparedTask:
    config: TaskConfig
    documents: list[DocumentRequests]
    num_fewshot: int
    limit: int | None
    data_fingerprint: str


def effective_num_fewshot(config: TaskConfig, override: int | None) -> int:
    """lm-eval's rule: the CLI value wins unless the YAML pins `num_fewshot: 0`; unset means 0."""
    if override is not None and config.num_fewshot != 0:
        return override
    return config.num_fewshot or 0


def prepare_task(
    config: TaskConfig, *, data_dir: Path | None = None, num_fewshot: int | None = None, limit: int | None = None
) -> PreparedTask:
    eval_split_name = config.eval_split
    if eval_split_name is None:
        raise TaskConfigError(f"{config.source}: task '{config.task}' needs 'test_split' or 'validation_split'")
    eval_split = load_split(config, eval_split_name, data_dir)
    docs = eval_split.docs if limit is None else eval_split.docs[:limit]

    shots_per_doc = effective_num_fewshot(config, num_fewshot)
    pool_split = config.fewshot_pool_split
    if shots_per_doc and pool_split is None:
        raise TaskConfigError(f"{config.source}: task '{config.task}' asks for few-shot examples but has no split to draw them from")
    pool = [] if not shots_per_doc else (eval_split if pool_split == eval_split_name else load_split(config, pool_split, data_dir)).docs
    sampler = FewshotSampler(pool, config.fewshot_sampler, exclude_eval_doc=config.fewshot_split is not None and config.fewshot_split == config.test_split)

    builder = RequestBuilder(config, eval_split.field_names)
    documents = [builder.build(doc_id, doc, sampler.shots(doc, shots_per_doc)) for doc_id, doc in enumerate(docs)]
    return PreparedTask(config, documents, shots_per_doc, limit, eval_split.fingerprint)
