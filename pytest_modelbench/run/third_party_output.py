"""Third-party output while a model or a dataset loads: hidden unless asked for (pytest -v).

transformers ("Loading weights"), its GGUF conversion and datasets ("Generating ... split") draw tqdm bars on stderr,
and these libraries warn and log advice while loading; under pytest all of it lands in a failing item's "Captured
stderr" and in the warnings summary. The project's own progress lines (scoring/progress.py) go through pytest's
terminal reporter while scoring, outside these spans, and are never hidden.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Iterator

THIRD_PARTY_LOGGERS = ("transformers", "datasets", "huggingface_hub", "torch")


@contextlib.contextmanager
def loading_output(show: bool) -> Iterator[None]:
    """While loading: unless `show`, drop what is written to sys.stderr (tqdm bars), Python warnings, and the
    libraries' log records below ERROR. An exception raised inside still propagates unchanged."""
    if show:
        yield
        return
    loggers = [logging.getLogger(name) for name in THIRD_PARTY_LOGGERS]
    levels = [logger.level for logger in loggers]
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)
