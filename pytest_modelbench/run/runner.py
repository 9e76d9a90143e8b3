"""Session state behind the pytest layer: options, the backend built once (a local model, or servers), and the
evaluations done so far."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pytest_modelbench.errors import ModelbenchError, ModelLoadError
from pytest_modelbench.gate.integrity import combined
from pytest_modelbench.metrics.group_scores import GroupEvaluation, score_group
from pytest_modelbench.run.evaluation import BlockScoring, TaskEvaluation, evaluate_task
from pytest_modelbench.run.third_party_output import loading_output
from pytest_modelbench.scoring.backend import Backend
from pytest_modelbench.scoring.custom_backend import BackendFactory
from pytest_modelbench.scoring.loading import (
    LoadedModel, detect_model_type, load_model, load_tokenizer, resolve_model_source,
)
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.generation_settings import SAMPLING_SEED
from pytest_modelbench.tasks.groups import ScorableGroup
from pytest_modelbench.tasks.identity import TaskId
from pytest_modelbench.tasks.prompt_format import PromptFormat, prompt_format
from pytest_modelbench.tasks.task import prepare_task

if TYPE_CHECKING:
    from pytest_modelbench.gate.early_stop import EarlyStop


@dataclass(frozen=True)
class RunOptions:
    model: str | None = None
    model_args: str | None = None
    device: str = "cpu"
    dtype: str = "auto"
    batch_size: int | str | None = None  # None: not given (batch_size_for decides)
    num_fewshot: int | None = None
    limit: int | None = None
    data_dir: Path | None = None
    allow_task_code: bool = False
    model_type: str = "auto"  # causal | masked | auto (detected from the checkpoint's config)
    cache: bool = False  # persistent score cache (scoring/score_cache.py): the plugin turns it on unless --no-cache
    shared_prefixes: bool = True  # causal LMs: the fast path (scoring/prefix_sharing.py); off: lm-eval's procedure
    third_party_output: bool = False  # show libraries' progress bars and warnings while loading (pytest -v)
    # Scoring servers (scoring/server/): OpenAI-compatible base URLs; --model then gives only the tokenizer.
    server_urls: tuple[str, ...] = ()
    server_model: str | None = None  # the served model's name; default: the one model each server serves
    server_concurrency: int = 8  # requests in flight, over all servers
    server_timeout: float = 300.0  # seconds per request
    server_retries: int = 4  # retries of a request that failed transiently (connection, timeout, 429, 5xx)
    backend_factory: BackendFactory | None = None  # --backend MODULE:FACTORY (scoring/custom_backend.py)
    # Prompt format (lm-eval's --apply_chat_template, --system_instruction, --fewshot_as_multiturn)
    apply_chat_template: bool = False
    system_instruction: str | None = None
    fewshot_as_multiturn: bool = False
    rescored_from: tuple[str, ...] = ()  # --rescore-from: the run records that answered every request (no model)
    sampling_seed: int = SAMPLING_SEED  # --sampling-seed: a sampled task's draws


@dataclass
class BenchRunner:
    options: RunOptions
    # by suite and task (tasks/identity.py); groups too (GroupEvaluation)
    evaluations: dict[TaskId, TaskEvaluation | GroupEvaluation] = field(default_factory=dict)
    _scored: dict[tuple[Path, str], TaskEvaluation] = field(default_factory=dict)  # by task file and config hash
    _loaded: LoadedModel | None = None
    _load_error: ModelbenchError | None = None
    _backend: Backend | None = None
    _backend_error: ModelbenchError | None = None
    _served_tokenizer: tuple | None = None  # (source, tokenizer) of --model with --server-url, loaded once
    progress_sink: Callable[[str], None] | None = None  # progress lines during long scoring (scoring/progress.py)
    # The noise-floor runner's batch sizes (noise_runner): (log-likelihood tasks, generate_until), over the options.
    fixed_batch_sizes: tuple[int, int] | None = None
    _noise: BenchRunner | None = None  # noise_runner(), built once

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

    def backend(self) -> Backend:
        """Built on first use, from the options: --backend's when given, servers when --server-url is, else the local
        model."""
        if self._backend_error is not None:
            raise self._backend_error
        if self._backend is None:
            try:
                if self.options.backend_factory is not None:
                    self._backend = self._custom_backend()
                elif self.options.server_urls:
                    self._backend = self._server_backend()
                else:
                    self._backend = self._local_backend()
            except ModelbenchError as exc:
                self._backend_error = exc
                raise
        return self._backend

    def replay(self, backend: Backend) -> None:
        """--rescore-from: every task is answered by `backend` (scoring/replay.py), and no model is ever loaded."""
        self._backend = backend
        self._load_error = ModelLoadError("--rescore-from answers from a run record and loads no model; run without "
                                          "it for what needs the model (--noise-floor, --apply-chat-template)")

    def evaluate(self, config: TaskConfig, identity: TaskId, early_stop: "EarlyStop | None" = None) -> TaskEvaluation:
        """The task's evaluation, scored once per session: a task reached through its file and through groups is
        scored the first time and reused after (the same file and config; a group's overrides make another).
        `early_stop` (gate/early_stop.py): score it block by block and stop once the gate's verdict is settled; an
        evaluation that stopped early is of some documents only and is never reused."""
        scored = self._scored.get((config.source.resolve(), config.config_hash))
        if scored is not None:
            self.evaluations[identity] = scored
            return scored
        with loading_output(self.options.third_party_output):
            prepared = prepare_task(
                config, data_dir=self.options.data_dir, num_fewshot=self.options.num_fewshot, limit=self.options.limit,
                prompt_format=self._prompt_format(), sampling_seed=self.options.sampling_seed,
            )
        # Bound to the task: progress counts its documents; a masked LM scores whole documents (CrowS shared tokens).
        if early_stop is None:
            evaluation = evaluate_task(prepared, self.backend())
        else:
            blocks = early_stop.blocks(len(prepared.documents))
            evaluation = early_stop.run(BlockScoring(prepared, self.backend(), blocks))
        self.evaluations[identity] = evaluation
        if len(evaluation.prepared.documents) < len(prepared.documents):
            return evaluation
        self._scored[(config.source.resolve(), config.config_hash)] = evaluation
        return evaluation

    def evaluate_group(self, group: ScorableGroup, identity: TaskId) -> GroupEvaluation:
        """A group's scores from its leaf tasks, each evaluated (or reused) as a task of its own."""
        leaves = {leaf.name: self.evaluate(config, leaf_identity)
                  for leaf, config, leaf_identity in group.leaf_tasks}
        evaluation = score_group(group.tree, leaves)
        if None not in evaluation.leaf_integrities:
            evaluation = dataclasses.replace(evaluation, integrity=combined(
                evaluation.leaf_integrities, [leaf.name for leaf in group.tree.leaves()]))
        self.evaluations[identity] = evaluation
        return evaluation

    def batch_size_for(self, output_type: str) -> int | str:
        """--batch-size, or when it is not given the one place that says what scoring uses for tasks of this output
        type: lm-eval's 1 where padding a batch can change the result (generation, and lm-eval's own procedure,
        --plain-scoring), else 'auto' (sized from free memory)."""
        if self.fixed_batch_sizes is not None:
            return self.fixed_batch_sizes[output_type == "generate_until"]
        if self.options.batch_size is not None:
            return self.options.batch_size
        return 1 if output_type == "generate_until" or not self.options.shared_prefixes else "auto"

    def noise_runner(self) -> BenchRunner:
        """The second scoring of --noise-floor (gate/noise_floor.py): the same checkpoint under another scoring
        configuration. Per output type the other batch size (1 where this runner uses anything else, else 8); for a
        local causal LM also the other scoring path (shared prefixes, or lm-eval's plain procedure); never the score
        cache, so every number is computed again. The loaded model (or the servers' tokenizer) is shared, not loaded
        twice; with --server-url the same servers, with --backend a second backend from its factory (whose batches
        are its own). Built once per session, after this runner has scored."""
        if self._noise is None:
            options = self.options
            local = options.backend_factory is None and not options.server_urls
            causal = local and self.loaded_model().model_type != "masked"
            sizes = tuple(1 if self.batch_size_for(kind) != 1 else 8 for kind in ("multiple_choice", "generate_until"))
            self._noise = BenchRunner(
                dataclasses.replace(options, cache=False,
                                    shared_prefixes=not options.shared_prefixes if causal else options.shared_prefixes),
                progress_sink=self.progress_sink, fixed_batch_sizes=sizes,  # type: ignore[arg-type]
                _loaded=self._loaded if local else None, _served_tokenizer=self._served_tokenizer,
            )
        return self._noise

    def scoring_setup(self, output_type: str) -> str:
        """How this runner scores tasks of `output_type`, in words (a noise floor's `measured_with`)."""
        options = self.options
        if options.backend_factory is not None:
            parts = [f"--backend {options.backend_factory.spec} (its own batches)"]
        else:
            parts = [f"batch size {self.batch_size_for(output_type)}"]
            if options.server_urls:
                parts.append("on the server")
            elif output_type != "generate_until" and self._loaded is not None and self._loaded.model_type != "masked":
                parts.append("fast path (shared prefixes)" if options.shared_prefixes else "plain path (--plain-scoring)")
        if not options.cache:
            parts.append("score cache off")
        return ", ".join(parts)

    def _prompt_format(self) -> PromptFormat:
        options = self.options
        if not options.apply_chat_template:
            return prompt_format(None, False, options.system_instruction, False)
        # on a server the template is applied here, with the served checkpoint's tokenizer: the prompts sent are
        # the local path's, token for token
        tokenizer = self._server_tokenizer()[1] if options.server_urls else self.loaded_model().tokenizer
        return prompt_format(tokenizer, True, options.system_instruction, options.fewshot_as_multiturn)

    def _local_backend(self) -> Backend:
        loaded = self.loaded_model()
        if loaded.model_type == "masked":
            return self._masked_scorer(loaded)
        from pytest_modelbench.scoring.causal import CausalLMScorer

        return CausalLMScorer(
            loaded.model, loaded.tokenizer, batch_size=self.batch_size_for("multiple_choice"),
            generation_batch_size=self.batch_size_for("generate_until"), fast=self.options.shared_prefixes, cache=self._score_cache(),
            fingerprint=loaded.fingerprint, progress=self.progress_sink, name=loaded.name, **loaded.scorer_kwargs,
        )

    def _custom_backend(self) -> Backend:
        from pytest_modelbench.scoring.front import ScoringFront

        options = self.options
        if options.server_urls:
            raise ModelLoadError("--backend and --server-url each choose the backend; give one of them")
        backend = options.backend_factory.build(model=options.model, model_args=options.model_args,
                                                device=options.device)
        return ScoringFront(backend, self._score_cache(), self.progress_sink)

    def _server_tokenizer(self) -> tuple:
        """--model's source and tokenizer for a server run (requests and chat templates are built here)."""
        if self._served_tokenizer is None:
            options = self.options
            if not options.model:
                raise ModelLoadError("--server-url needs --model: the served checkpoint's tokenizer (hub id or folder)")
            with loading_output(options.third_party_output):
                source = resolve_model_source(options.model, options.model_args)
                local_only = sorted(set(source.load_kwargs) - {"revision"})
                if local_only:
                    raise ModelLoadError(f"--model-args {local_only[0]} applies to a model loaded here, not to one "
                                         "on a server (--server-url)")
                self._served_tokenizer = (source, load_tokenizer(source))
        return self._served_tokenizer

    def _server_backend(self) -> Backend:
        from pytest_modelbench.scoring.server.scorer import connect

        options = self.options
        if options.model_type == "masked":
            raise ModelLoadError("--model-type masked cannot be scored on a server: servers score causal LMs")
        source, tokenizer = self._server_tokenizer()
        return connect(
            options.server_urls, tokenizer=tokenizer, name=source.name, served_model=options.server_model,
            concurrency=options.server_concurrency, timeout_s=options.server_timeout, retries=options.server_retries,
            batch_size=self.batch_size_for("multiple_choice"), cache=self._score_cache(), progress=self.progress_sink,
            scorer_kwargs=source.scorer_kwargs,
        )

    def _masked_scorer(self, loaded: LoadedModel) -> Backend:
        from pytest_modelbench.scoring.masked import MaskedLMScorer

        unsupported = sorted(set(loaded.scorer_kwargs) - {"max_length"})
        if unsupported:
            raise ModelLoadError(
                f"--model-args {unsupported[0]} applies to causal LMs only; '{loaded.name}' is scored as a masked LM"
            )
        return MaskedLMScorer(
            loaded.model, loaded.tokenizer, batch_size=self.batch_size_for("multiple_choice"),
            cache=self._score_cache(), fingerprint=loaded.fingerprint, progress=self.progress_sink, name=loaded.name,
            **loaded.scorer_kwargs,
        )

    def _score_cache(self):
        from pytest_modelbench.scoring.score_cache import ScoreCache

        return ScoreCache() if self.options.cache else None
