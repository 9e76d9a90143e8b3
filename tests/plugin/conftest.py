# pytester's in-process runs drop modules first imported inside them; datasets cannot be imported twice
# (pyarrow extension types register once per process), so the heavy libraries are imported up front.
import datasets  # noqa: F401
import torch  # noqa: F401
import transformers  # noqa: F401

import pytest


@pytest.fixture(autouse=True)
def _inner_runs_are_not_xdist_workers(monkeypatch):
    """Under `pytest -n`, the worker's xdist variables would make pytester's inner runs act as workers too."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
