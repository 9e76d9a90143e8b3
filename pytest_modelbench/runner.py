"""Session state behind the pytest layer: options, the model loaded once, and the evaluations done so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pytest_modelbench.errors import ModelbenchError, ModelLoadError
from pytest_modelbench.evaluation import TaskEvaluation, evaluate_task
from pytest_modelbench.scoring.loading import LoadedModel, detect_model_type, load_model, resolve_model_source
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.task import prepare_task
from pytest_modelbench.third_party_output import loading_output

if TYPE_CHECKING:  # torch is imported only when a model is scored, keeping collection fast
    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.masked import MaskedLMScorer


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
    model_type: str = "auto"  # causal | masked | auto (detected from the checkpoint's config)
    cache: bool = False  # persistent score cache (scoring/score_cache.py): the plugin turns it on unless --no-cache
    shared_prefixes: bool = True  # causal LMs: the fast path (scoring/prefix_sharing.py); off: lm-eval's procedure
    third_party_output: bool = False  # show libraries' progress bars and warnings while loading (pytest -v)


@dataclass
class BenchRunner:
    options: RunOptions
    evaluations: dict[str, TaskEvaluation] = field(default_factory=dict)
    _loaded: LoadedModel | None = None
    _load_error: ModelbenchError | None = None
    _scorer: CausalLMScorer | MaskedLMScorer | None = None
    progress_sink: Callable[[str], None] | None = None  # progress lines during long scoring (scoring/progress.py)

    def loaded_model(self) -> LoadedModel:
        """Load the model on first use; a failure is remembered so every item reports it without retrying."""
        if self._load_error is not None:
            raise self._load_error
        if self._loaded is None:
            try:
                with loading_output(self.options.third_party_output):
                    source = resolve_model_source(self.options.model, self.options.model_args)
                    model_type = self.options.model_type
                    if model_type == "auto":
                        model_type = detect_model_type(source)
                    self._loaded = load_model(
                        source, dtype=self.options.dtype, device=self.options.device, masked=model_type == "masked"
                    )
            except ModelbenchError as exc:
                self._load_error = exc
                raise
        return self._loaded

    def scorer(self) -> CausalLMScorer | MaskedLMScorer:
        if self._scorer is None:
            loaded = self.loaded_model()
            build = self._masked_scorer if loaded.model_type == "masked" else self._causal_scorer
            self._scorer = build(loaded)
        return self._scorer

    def evaluate(self, config: TaskConfig) -> TaskEvaluation:
        with loading_output(self.options.third_party_output):
            prepared = prepare_task(
                config, data_dir=self.options.data_dir, num_fewshot=self.options.num_fewshot, limit=self.options.limit
            )
        # Bound to the task: progress counts its documents; a masked LM scores whole documents (CrowS shared tokens).
        evaluation = evaluate_task(prepared, self.scorer().for_task(prepared))
        self.evaluations[config.task] = evaluation
        return evaluation

    def _causal_scorer(self, loaded: LoadedModel) -> CausalLMScorer:
        from pytest_modelbench.scoring.causal import CausalLMScorer

        return CausalLMScorer(
            loaded.model, loaded.tokenizer, batch_size=self.options.batch_size,
            fast=self.options.shared_prefixes, cache=self._score_cache(),
            fingerprint=loaded.fingerprint, progress=self.progress_sink, **loaded.scorer_kwargs,
        )

    def _masked_scorer(self, loaded: LoadedModel) -> MaskedLMScorer:
        from pytest_modelbench.scoring.masked import MaskedLMScorer

        unsupported = sorted(set(loaded.scorer_kwargs) - {"max_length"})
        if unsupported:
            raise ModelLoadError(
                f"--model-args {unsupported[0]} applies to causal LMs only; '{loaded.name}' is scored as a masked LM"
            )
        return MaskedLMScorer(
            loaded.model, loaded.tokenizer, batch_size=self.options.batch_size,
            cache=self._score_cache(), fingerprint=loaded.fingerprint, progress=self.progress_sink,
            **loaded.scorer_kwargs,
        )

    def _score_cache(self):
        from pytest_modelbench.scoring.score_cache import ScoreCache

        return ScoreCache() if self.options.cache else None
