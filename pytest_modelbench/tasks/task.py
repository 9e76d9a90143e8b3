"""A task ready to score: its config, evaluated documents and their requests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pytest_modelbench.errors import DatasetError, TaskCodeError, TaskConfigError
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.datasets import Split, load_split
from pytest_modelbench.tasks.generation_settings import SAMPLING_SEED
from pytest_modelbench.tasks.prompt_format import PLAIN_TEXT, PromptFormat
from pytest_modelbench.tasks.requests import DocumentRequests, FewshotSampler, RequestBuilder, numbered


@dataclass(frozen=True)
class PreparedTask:
    config: TaskConfig
    documents: list[DocumentRequests]
    num_fewshot: int
    limit: int | None
    data_fingerprint: str
    prompt_label: str = ""  # the prompt format (chat template, system instruction) as the provenance records it
    sampling_seed: int = SAMPLING_SEED  # a sampled task's seed (--sampling-seed): its draws, not its task


def effective_num_fewshot(config: TaskConfig, override: int | None) -> int:
    """lm-eval's rule: the CLI value wins unless the YAML pins `num_fewshot: 0`; unset means 0."""
    if override is not None and config.num_fewshot != 0:
        return override
    return config.num_fewshot or 0


def prepare_task(
    config: TaskConfig, *, data_dir: Path | None = None, num_fewshot: int | None = None, limit: int | None = None,
    prompt_format: PromptFormat = PLAIN_TEXT, sampling_seed: int = SAMPLING_SEED,
) -> PreparedTask:
    """`prompt_format`: plain text, or a chat template (--apply-chat-template, tasks/prompt_format.py);
    `sampling_seed`: what a sampled task's draws are seeded with."""
    eval_split_name = config.eval_split
    if eval_split_name is None:
        raise TaskConfigError(f"{config.source}: task '{config.task}' needs 'test_split' or 'validation_split'")
    eval_split = load_split(config, eval_split_name, data_dir)
    limit = min((n for n in (limit, config.limit) if n is not None), default=None)  # --limit within modelbench.limit
    docs = eval_split.docs if limit is None else eval_split.docs[:limit]
    if not docs:  # the gate would compare nothing and pass
        after = " (after process_docs and the modelbench row rules)" if config.process_docs is not None else ""
        raise DatasetError(f"{config.source}: task '{config.task}': split '{eval_split_name}' has no documents{after}")

    shots_per_doc = effective_num_fewshot(config, num_fewshot)
    sampler = _fewshot_sampler(config, shots_per_doc, eval_split, data_dir)
    builder = RequestBuilder(config, eval_split.field_names, prompt_format)
    documents = numbered([builder.clustered(builder.build(doc_id, doc, sampler.shots(doc, shots_per_doc)))
                          for doc_id, doc in enumerate(docs)])
    return PreparedTask(config, documents, shots_per_doc, limit, eval_split.fingerprint, prompt_format.label,
                        sampling_seed)


def _fewshot_sampler(config: TaskConfig, shots_per_doc: int, eval_split: Split, data_dir: Path | None) -> FewshotSampler:
    where = f"{config.source}: task '{config.task}'"
    if not shots_per_doc:
        return FewshotSampler([], config.fewshot_sampler, exclude_eval_doc=False)
    pool_split = config.fewshot_pool_split
    if pool_split is not None:
        pool = eval_split.docs if pool_split == eval_split.name else load_split(config, pool_split, data_dir).docs
        source = f"split '{pool_split}'"
    elif config.fewshot_samples is not None:
        pool, source = _inline_samples(config, where), "fewshot_config.samples"
    else:
        raise TaskConfigError(f"{where} asks for few-shot examples but has no split to draw them from")
    # lm-eval drops the evaluated document from its shots (drawing one more) only when the few-shot split is the
    # test split, which includes neither being named (inline samples or the training split, validation evaluated).
    exclude_eval_doc = config.fewshot_split == config.test_split
    if shots_per_doc > len(pool) - exclude_eval_doc:
        raise TaskConfigError(
            f"{where} asks for {shots_per_doc} few-shot examples but {source} has only {len(pool)} documents"
        )
    return FewshotSampler(pool, config.fewshot_sampler, exclude_eval_doc)


def _inline_samples(config: TaskConfig, where: str) -> list:
    """`fewshot_config.samples` as lm-eval reads it: the list itself, or what its !function returns."""
    samples = config.fewshot_samples
    if callable(samples):
        try:
            samples = samples()
        except TaskCodeError as exc:
            raise TaskConfigError(f"{where}: fewshot_config.samples: {exc}") from None
        if not isinstance(samples, (list, tuple)) or not all(isinstance(doc, Mapping) for doc in samples):
            raise TaskConfigError(f"{where}: fewshot_config.samples: the !function must return a list of documents")
    return list(samples)
