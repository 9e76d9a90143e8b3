"""Session state behind the pytest layer: options, the model loaded once, and the evaluations done so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.evaluation import TaskEvaluation, evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.loading import LoadedModel, load_model, resolve_model_source
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.task import prepare_task


@dataclass(frozen=True)
class RunOptions:
    model: str | None = None
    model_args: str | None = None
    device: str = "cpu"
    dtype: str = "auto"
    batch_size: int | str = 1
    num_fewshot: int | None = None
    limit: int | None = None
    data_dir: Path | None = None
    allow_task_code: bool = False


@dataclass
class BenchRunner:
    options: RunOptions
    evaluations: dict[str, TaskEvaluation] = field(default_factory=dict)
    _loaded: LoadedModel | None = None
    _load_error: ModelbenchError | None = None
    _scorer: CausalLMScorer | None = None

    def loaded_model(self) -> LoadedModel:
        """Load the model on first use; a failure is remembered so every item reports it without retrying."""
        if self._load_error is not None:
            raise self._load_error
        if self._loaded is None:
            try:
                source = resolve_model_source(self.options.model, self.options.model_args)
                self._loaded = load_model(source, dtype=self.options.dtype, device=self.options.device)
            except ModelbenchError as exc:
                self._load_error = exc
                raise
        return self._loaded

    def scorer(self) -> CausalLMScorer:
        if self._scorer is None:
            loaded = self.loaded_model()
            self._scorer = CausalLMScorer(
                loaded.model, loaded.tokenizer, batch_size=self.options.batch_size, device=self.options.device,
                **loaded.scorer_kwargs,
            )
        return self._scorer

    def evaluate(self, config: TaskConfig) -> TaskEvaluation:
        prepared = prepare_task(
            config, data_dir=self.options.data_dir, num_fewshot=self.options.num_fewshot, limit=self.options.limit
        )
        evaluation = evaluate_task(prepared, self.scorer())
        self.evaluations[config.task] = evaluation
        return evaluation
