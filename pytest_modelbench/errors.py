"""Error types. Every message names the file, key, document or model the user has to fix."""


class ModelbenchError(Exception):
    """A problem with user input; reported as one clear message, never a traceback."""


class TaskConfigError(ModelbenchError):
    """A task YAML that cannot be loaded: syntax, unknown key, bad include, refused code."""


class DocumentError(ModelbenchError):
    """A document the task's templates cannot turn into requests."""


class DatasetError(ModelbenchError):
    """A dataset or split that cannot be found or read."""


class ModelLoadError(ModelbenchError):
    """A model or tokenizer that cannot be loaded."""


class BaselineError(ModelbenchError):
    """A stored baseline that is corrupt, or not comparable with the candidate run."""
