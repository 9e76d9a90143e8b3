"""Shared fixtures: tiny models, the shared-data mirror, the real default model."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))

pytest_plugins = ["pytester"]
# Fixture task YAMLs (tests/fixtures/truthfulqa_mc2/) are loaded by their tests, never collected as gated tasks.
collect_ignore = ["fixtures"]
pytest.register_assert_rewrite("tests.fixtures.lmeval_references")

# Tests never reach the Hugging Face Hub; without this a missing dataset waits on network retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data folder {SHARED_DATA} is missing (it lies beside the checkout)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def data_mirror(tmp_path_factory, shared_data) -> Path:
    """A --data-dir mirror of symbolic links into ../shared/data."""
    return _load_script("shared_data_mirror").build_mirror(tmp_path_factory.mktemp("mirror"), shared_data)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tests.fixtures.tiny_models import build_tiny_causal_lm

    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny_bos_model(tmp_path_factory) -> Path:
    """Like tiny_model, but its tokenizer prepends BOS (Llama style)."""
    from tests.fixtures.tiny_models import build_tiny_causal_lm

    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_bos") / "model", seed=0, add_bos=True)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_model):
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    return load_model(resolve_model_source(str(tiny_model)), dtype="float32")


@pytest.fixture(scope="session")
def default_model():
    """The real default model (SmolLM2-135M-Instruct, float32), loaded once for the slow tests."""
    from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source

    return load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")


def pytest_collection_modifyitems(items):
    """The slow tests (minutes each on the real model) first, so they start early and the short tests fill the
    workers around them (scripts/test.sh runs pytest-xdist with work stealing), instead of one running alone at the
    end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
