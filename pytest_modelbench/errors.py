"""Error types. Every message names the file, key, document or model the user has to fix."""


class ModelbenchError(Exception):
    """A problem with user input; reported as one clear message, never a traceback."""


class TaskConfigError(ModelbenchError):
    """A task YAML that cannot be loaded: syntax, unknown key, bad include, refused code."""


class DuplicateTaskError(TaskConfigError):
    """Two task files of one suite whose tasks would share one baseline file and one row of the results."""


class DocumentError(ModelbenchError):
    """A document the task's templates cannot turn into requests."""


class MetricError(ModelbenchError):
    """A task-level metric that cannot be computed on the task's documents (where lm-eval's own computation fails
    too); callers add the file and task."""


class UndefinedAggregateError(MetricError):
    """A task's `!function` aggregation that is undefined on the documents it was given (it returned NaN, as lm-eval's
    do for a score with nothing to count): an error for a task or category; a resample the gate's bootstrap cannot
    use (gate/compare.py aggregate_test)."""


class DatasetError(ModelbenchError):
    """A dataset or split that cannot be found or read."""


class ModelLoadError(ModelbenchError):
    """A model or tokenizer that cannot be loaded."""


class GateFailure(ModelbenchError):
    """A task regressed against its baseline; the message holds the category table."""


class RunIntegrityError(ModelbenchError):
    """A task whose run is over its integrity limits (gate/integrity.py): the run, not the model; the message holds the
    counts and a few documents."""


class BaselineError(ModelbenchError):
    """A stored baseline that is corrupt, or not comparable with the candidate run."""


class TaskCodeError(ModelbenchError):
    """An exception raised inside a task's own `!function` code; callers add the file, key and document."""


class RequestError(ModelbenchError):
    """A (context, continuation) request the scorer cannot score; `index`, once known, is its position in the list
    scored, so that the evaluation can name the document and choice."""

    def __init__(self, problem: str, index: int | None = None):
        super().__init__(problem if index is None else f"request {index}: {problem}")
        self.problem = problem
        self.index = index

    def at(self, index: int) -> "RequestError":
        """The same problem at `index`, a position in the longer list the request was taken from."""
        return RequestError(self.problem, index)

    def named(self, where: str) -> ModelbenchError:
        """The error to report once the request's document is known (`where` names it)."""
        return DocumentError(f"{where}: {self.problem}")


class ServerError(ModelbenchError):
    """A scoring server that cannot be reached, or whose answers cannot be trusted; the message names the server."""


class ServerAnswerError(RequestError, ServerError):
    """A server's answer to one request that cannot be trusted: a ServerError, named by its document as a request
    error is."""

    def __init__(self, server: str, problem: str, index: int | None = None):
        super().__init__(problem, index)
        self.server = server
        self.args = (f"{server}, {self.args[0]}",)

    def at(self, index: int) -> "ServerAnswerError":
        return ServerAnswerError(self.server, self.problem, index)

    def named(self, where: str) -> ModelbenchError:
        return ServerError(f"{self.server}, {where}: {self.problem}")


class BackendError(ModelbenchError):
    """A backend whose results do not match the requests it was sent (too few or too many values, a value of the wrong
    kind); the message names the backend and the task."""


class BackendResultError(BackendError):
    """Values a backend returned through the scoring seam (scoring/backend.py) that do not fit the requests sent: too
    few or too many, a row of the wrong shape, a value of the wrong kind; the message names the backend, the task and
    the first bad position."""


class NonFiniteResultError(BackendResultError, DocumentError):
    """A NaN or infinite log-likelihood: it would turn into a wrong accuracy (argmax of NaN) without a word. A document
    error too, since it names the document and choice whose score it is."""
