"""pytest hooks: task YAMLs become items; options become a BenchRunner. No scoring logic lives here.

The entry point (pyproject's pytest11): the other modules of this package are called from here and never import it;
what they read of the session is in stash_keys.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.metrics.group_scores import gated_members
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.pytest_plugin import (
    cli_options, fixtures, gate_options, inspection, interruption, recording, rescoring, shards,
)
from pytest_modelbench.pytest_plugin import gate_hooks as gate
from pytest_modelbench.pytest_plugin.refusals import format_refusals
from pytest_modelbench.pytest_plugin.results_gathering import GatheredResults
from pytest_modelbench.pytest_plugin.stash_keys import GATHERED_KEY, RUNNER_KEY, TASKS_KEY
from pytest_modelbench.outputs.results import json_text, results_document, run_config
from pytest_modelbench.run.runner import BenchRunner, RunOptions
from pytest_modelbench.scoring.loading import DEFAULT_MODEL, DTYPES
from pytest_modelbench.scoring.progress import pytest_sink as progress_sink
from pytest_modelbench.tasks.config import TaskConfig, is_task_file, load_task_config
from pytest_modelbench.tasks.datasets import DATA_DIR_ENV
from pytest_modelbench.tasks.generation_settings import SAMPLING_SEED
from pytest_modelbench.tasks.groups import ScorableGroup, is_group_file, load_group
from pytest_modelbench.tasks.identity import TaskId, TaskRegistry, identify
from pytest_modelbench.text_format import format_table

RESULTS_PATH_KEY = pytest.StashKey[Path | None]()
SCOPE_ROOTS_KEY = pytest.StashKey[frozenset]()
TASK_FILES_KEY = pytest.StashKey[dict]()  # on a folder's collector: file path -> its TaskFile, or None
REFUSED_KEY = pytest.StashKey[list]()  # (task file, error message) for each task file that cannot be loaded
GROUP_INDEXES_KEY = pytest.StashKey[dict]()  # group member names by folder (tasks/groups.py TaskIndex), built once
YAML_SUFFIXES = (".yaml", ".yml")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("modelbench", "model evaluation (pytest-modelbench)")
    group.addoption("--model", help=f"model to score: hub id, local folder, .gguf file, or '{DEFAULT_MODEL}' (packaged default)")
    group.addoption("--model-args", help="extra model arguments, key=value,... (revision=..., add_bos_token=..., gguf_file=...)")
    group.addoption("--device", default="cpu", help="torch device (default: cpu)")
    group.addoption("--dtype", default="auto", choices=DTYPES, help="weights dtype (default: auto)")
    group.addoption("--model-type", default="auto", choices=("auto", "causal", "masked"),
                    help="causal or masked-LM scoring (default: auto, from the checkpoint's architectures)")
    group.addoption("--batch-size", help="batch size, an integer or 'auto' (default: auto, but 1 for generation and --plain-scoring)")
    group.addoption("--sampling-seed", type=int, default=SAMPLING_SEED,
                    help=f"seed of a sampled task's draws (default: {SAMPLING_SEED}, lm-eval's); another seed is another "
                         "draw, gated against the same baseline")
    group.addoption("--num-fewshot", type=int, default=None, help="few-shot examples per document (overrides the YAML)")
    group.addoption("--limit", type=int, default=None, help="score only the first N documents of each task")
    group.addoption("--data-dir", default=None, help=f"local mirror of hub datasets (also ${DATA_DIR_ENV} or ini modelbench_data_dir)")
    group.addoption("--allow-task-code", action="store_true", help="allow '!function' in task YAMLs (runs Python from the suite folder)")
    group.addoption("--results-json", default=None, help="write scores to this JSON file")
    group.addoption("--log-samples", action="store_true", help="add per-document requests and log-likelihoods to --results-json")
    group.addoption("--plain-scoring", action="store_true",
                    help="score causal LMs with lm-eval's own procedure, no shared prefixes: lm-eval's log-likelihoods "
                         "bit for bit on the same machine, batch size and thread count; slower")
    group.addoption("--server-url", action="append", default=[], metavar="URL",
                    help="score on an OpenAI-compatible server (vLLM...) at this base URL, e.g. http://node:8000/v1; "
                         "repeat (or comma-separate) for several servers of one checkpoint; --model gives the tokenizer")
    group.addoption("--backend", default=None, metavar="MODULE:FACTORY",
                    help="score with a backend of your own: FACTORY(model=, model_args=, device=) from MODULE (on "
                         "sys.path or in the rootdir); see docs/backends.md")
    group.addoption("--server-model", default=None, help="the served model's name (default: the one model the server serves)")
    group.addoption("--server-concurrency", type=int, default=8, help="server requests in flight, over all servers (default: 8)")
    group.addoption("--server-timeout", type=float, default=300.0, help="seconds a server request may take (default: 300)")
    group.addoption("--server-retries", type=int, default=4,
                    help="retries of a server request after a connection error, timeout, 429 or 5xx (default: 4)")
    group.addoption("--apply-chat-template", action="store_true",
                    help="render prompts with the tokenizer's chat template (lm-eval's --apply_chat_template)")
    group.addoption("--system-instruction", default=None, help="a system instruction before each prompt (lm-eval's)")
    group.addoption("--fewshot-as-multiturn", default=None, choices=("true", "false"),
                    help="with --apply-chat-template: shots as user/assistant turns (default true, as lm-eval's CLI)")
    group.addoption("--no-cache", action="store_true", help="bypass the persistent score cache ($MODELBENCH_CACHE_DIR, default ~/.cache/pytest-modelbench)")
    parser.addini("modelbench_suites", "folders whose task YAMLs are collected", type="paths", default=[])
    parser.addini("modelbench_data_dir", "local mirror of hub datasets", default="")
    gate_options.add_options(parser, parser.getgroup("modelbench"))  # baseline gate: --baseline-name, --gate-*, --md-report
    inspection.add_options(group)  # --show-prompts, --list-tasks
    shards.add_options(group)  # --shard
    recording.add_options(group)  # --run-record
    rescoring.add_options(group)  # --rescore-from


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "modelbench: a task scored by pytest-modelbench")
    config.pluginmanager.register(fixtures, "modelbench-fixtures")  # modelbench_model, for custom tests
    gate.configure(config)  # registers the gate's session hooks (results, unused baselines, --md-report)
    interruption.configure(config)  # SIGINT, SIGTERM: the session ends `interrupted`, its reports written
    shards.configure(config)  # --shard
    recording.configure(config)  # --run-record
    config.stash[RESULTS_PATH_KEY] = cli_options.output_path(
        "--results-json", config.getoption("--results-json"), Path(config.invocation_params.dir)
    )
    cli_options.check_progress_interval()
    data_dir = config.getoption("--data-dir") or os.environ.get(DATA_DIR_ENV) or config.getini("modelbench_data_dir")
    config.stash[RUNNER_KEY] = BenchRunner(
        RunOptions(
            model=config.getoption("--model"),
            model_args=cli_options.model_args(config.getoption("--model-args")),
            device=config.getoption("--device"),
            dtype=config.getoption("--dtype"),
            batch_size=cli_options.batch_size(config.getoption("--batch-size")),
            num_fewshot=cli_options.count("--num-fewshot", config.getoption("--num-fewshot"), minimum=0),
            sampling_seed=cli_options.count("--sampling-seed", config.getoption("--sampling-seed"), minimum=0),
            limit=cli_options.count("--limit", config.getoption("--limit"), minimum=1),
            data_dir=Path(data_dir).expanduser().resolve() if data_dir else None,
            allow_task_code=config.getoption("--allow-task-code"),
            model_type=config.getoption("--model-type"),
            cache=not config.getoption("--no-cache"),
            shared_prefixes=not config.getoption("--plain-scoring"),
            third_party_output=config.getoption("verbose") > 0,
            server_urls=cli_options.server_urls(config.getoption("--server-url")),
            backend_factory=cli_options.backend_factory(config.getoption("--backend"), config.rootpath),
            server_model=config.getoption("--server-model"),
            server_concurrency=cli_options.count("--server-concurrency", config.getoption("--server-concurrency"), 1),
            server_timeout=cli_options.seconds("--server-timeout", config.getoption("--server-timeout")),
            server_retries=cli_options.count("--server-retries", config.getoption("--server-retries"), minimum=0),
            apply_chat_template=config.getoption("--apply-chat-template"),
            system_instruction=config.getoption("--system-instruction"),
            fewshot_as_multiturn=cli_options.fewshot_as_multiturn(
                config.getoption("--fewshot-as-multiturn"), config.getoption("--apply-chat-template")
            ),
        ),
        progress_sink=progress_sink(config),
    )
    rescoring.configure(config, config.stash[RUNNER_KEY])  # --rescore-from: tasks answered from run records
    gathered = config.stash[GATHERED_KEY] = GatheredResults(config.stash[RUNNER_KEY], config.getoption("--log-samples"))
    config.pluginmanager.register(gathered, "modelbench-results")  # every worker's tasks reach the controller
    inspection.configure(config, config.stash[RUNNER_KEY].options)


def _scope_roots(config: pytest.Config) -> frozenset[Path]:
    """Configured suite folders and the paths named on the command line; worked out once per session, since a
    command line may name thousands of files."""
    roots = config.stash.get(SCOPE_ROOTS_KEY, None)
    if roots is None:
        found = {Path(p) for p in config.getini("modelbench_suites")}
        found |= {Path(arg.split("::")[0]).resolve() for arg in config.args}
        found.discard(config.rootpath)
        roots = config.stash[SCOPE_ROOTS_KEY] = frozenset(found)
    return roots


def _in_scope(file_path: Path, config: pytest.Config) -> bool:
    """Collected when named on the command line, or under a configured suite folder or a folder named there."""
    roots = _scope_roots(config)
    return file_path in roots or not roots.isdisjoint(file_path.parents)


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix not in YAML_SUFFIXES or not _in_scope(file_path, parent.config):
        return None
    # pytest collects a file named on the command line by collecting its whole folder again, once per file named:
    # a folder's task files are made once, so naming thousands of them stays linear.
    made = parent.stash.setdefault(TASK_FILES_KEY, {})
    if file_path not in made:
        made[file_path] = (TaskFile.from_parent(parent, path=file_path) if is_task_file(file_path)
                           else GroupFile.from_parent(parent, path=file_path) if is_group_file(file_path) else None)
    return made[file_path]


@pytest.hookimpl(trylast=True)  # after pytest's -k and -m
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The gate weighs the whole session's gated items, and the run record notes that session, before --shard keeps
    this shard's items: every shard splits alpha over the whole session."""
    options = config.stash[RUNNER_KEY].options
    config.stash[gate.GATE_KEY].count_gated(items)
    recording.note_session(config, items, options)
    shards.keep_shard(config, items, options)
    recording.note_tasks(config, items)


class _OneLineErrors:
    """A task file's or item's ModelbenchError names the file and key: it is reported as its message, no traceback."""

    def repr_failure(self, excinfo, *args, **kwargs):  # a collector's takes no style argument, an item's does
        if isinstance(excinfo.value, ModelbenchError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, *args, **kwargs)  # type: ignore[misc]


class TaskFile(_OneLineErrors, pytest.File):
    """A task YAML. Everything that needs no model and no data is checked here, so that a broken task is a
    collection error naming the file and key (also under --collect-only and without --model)."""

    def collect(self):
        try:
            config = load_task_config(self.path, allow_task_code=self.config.getoption("--allow-task-code"))
            resolve_metrics(config)
            identity = identify(self.path, config.task, self.config.getini("modelbench_suites"))
            self.config.stash.setdefault(TASKS_KEY, TaskRegistry()).add(identity, self.path)
        except ModelbenchError as exc:
            self.config.stash.setdefault(REFUSED_KEY, []).append((self.path, str(exc)))
            raise
        item = TaskItem.from_parent(self, name=config.task, task_config=config, task_id=identity)
        item.add_marker("modelbench")
        for tag in config.tag:
            self.config.addinivalue_line("markers", f"{tag}: lm-eval tag")
            item.add_marker(tag)
        yield item


class GroupFile(_OneLineErrors, pytest.File):
    """A group YAML (tasks/groups.py): one item gating the group's aggregates, its subgroups and tasks as categories;
    for a bundle (no aggregate_metric_list), one item per member. Its tasks are loaded and checked here, as a task
    file's are."""

    def collect(self):
        suites = self.config.getini("modelbench_suites")
        try:
            group = load_group(self.path, suites, self.config.stash.setdefault(GROUP_INDEXES_KEY, {}),
                               allow_task_code=self.config.getoption("--allow-task-code"))
            items = []
            for name, member in gated_members(group):
                identity = TaskId(identify(self.path, name, suites).suite, name)
                if isinstance(member, ScorableGroup):
                    items.append((GroupItem, dict(group=member), identity))
                else:
                    items.append((TaskItem, dict(task_config=member[0]), identity))
                self.config.stash.setdefault(TASKS_KEY, TaskRegistry()).add(identity, self.path)
        except ModelbenchError as exc:
            self.config.stash.setdefault(REFUSED_KEY, []).append((self.path, str(exc)))
            raise
        for kind, arguments, identity in items:
            item = kind.from_parent(self, name=identity.task, task_id=identity, **arguments)
            item.add_marker("modelbench")
            yield item


class ModelbenchItem(_OneLineErrors, pytest.Item):
    """A gated item: a task or a group."""

    def __init__(self, *, task_id: TaskId, **kwargs):
        super().__init__(**kwargs)
        self.task_id = task_id

    def runtest(self) -> None:
        runner = self.config.stash[RUNNER_KEY]
        if runner.options.model is None:
            pytest.skip(f"no --model given (try --model={DEFAULT_MODEL})")
        gate.check_ready(self)  # fails closed, before scoring, when there are no baselines to compare with
        stopping = gate.early_stop(self, runner)  # --early-stop: scored in blocks until the verdict is settled
        evaluation = self.evaluate(runner, stopping)
        gate.check_item(self, evaluation, runner, stopping)  # baseline gate: fails on a regression, see gate_hooks.py

    def evaluate(self, runner: BenchRunner, stopping=None):
        raise NotImplementedError


class GroupItem(ModelbenchItem):
    def __init__(self, *, group: ScorableGroup, **kwargs):
        super().__init__(**kwargs)
        self.group = group

    def evaluate(self, runner: BenchRunner, stopping=None):
        return runner.evaluate_group(self.group, self.task_id)

    def reportinfo(self):
        return self.path, None, f"group {self.name}"


class TaskItem(ModelbenchItem):
    def __init__(self, *, task_config: TaskConfig, **kwargs):
        super().__init__(**kwargs)
        self.task_config = task_config

    def evaluate(self, runner: BenchRunner, stopping=None):
        return runner.evaluate(self.task_config, self.task_id, stopping)

    def reportinfo(self):
        return self.path, None, f"task {self.name}"


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    refused = config.stash.get(REFUSED_KEY, [])
    if refused:
        terminalreporter.section(f"modelbench: {len(refused)} task file(s) refused, by reason")
        for line in format_refusals(refused, start=config.invocation_params.dir):
            terminalreporter.write_line(line)
    gathered = config.stash.get(GATHERED_KEY, None)
    if gathered is None or hasattr(config, "workerinput") or not gathered.tasks():
        return
    terminalreporter.section("modelbench scores")
    rows = [row for results in gathered.tasks() for row in results["rows"]]
    for line in format_table(("task", "category", "metric", "value ± stderr", "n"), rows):
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    runner = config.stash.get(RUNNER_KEY, None)
    gathered = config.stash.get(GATHERED_KEY, None)
    path = config.stash.get(RESULTS_PATH_KEY, None)
    if runner is None or gathered is None or path is None or hasattr(config, "workerinput"):
        return
    tasks = gathered.tasks()
    if not tasks and not gate.interrupted(config):
        return
    document = results_document(tasks, run_config(runner.options), gate.outcomes_json(config), gate.pooled_json(config),
                                gate.outcome_json(config))
    cli_options.write_output(session, "--results-json", path, json_text(document))


def pytest_unconfigure(config: pytest.Config) -> None:
    interruption.unconfigure(config)
