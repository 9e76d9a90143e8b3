"""loading_output: what libraries write while loading is dropped, unless shown."""

from __future__ import annotations

import logging
import sys
import warnings

import pytest

from pytest_modelbench.run.third_party_output import loading_output


def noisy_load() -> str:
    print("Loading weights: 100%", file=sys.stderr)
    warnings.warn("torch_dtype is deprecated", FutureWarning)
    logging.getLogger("transformers.modeling_utils").warning("Some weights were not initialized")
    return "model"


def test_hidden_by_default(capsys, caplog):
    level = logging.getLogger("transformers").level
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with loading_output(show=False):
            assert noisy_load() == "model"
    assert capsys.readouterr().err == ""
    assert caught == []
    assert caplog.records == []
    assert logging.getLogger("transformers").level == level  # restored


def test_shown_when_asked(capsys, caplog):
    # caplog's handler on the library's logger itself: transformers before 5.10 does not propagate its records
    logger = logging.getLogger("transformers")
    logger.addHandler(caplog.handler)
    try:
        with pytest.warns(FutureWarning, match="torch_dtype"):
            with loading_output(show=True):
                noisy_load()
    finally:
        logger.removeHandler(caplog.handler)
    assert "Loading weights" in capsys.readouterr().err
    assert "Some weights were not initialized" in caplog.text


def test_an_error_inside_still_propagates():
    with pytest.raises(ValueError, match="bad checkpoint"):
        with loading_output(show=False):
            raise ValueError("bad checkpoint")
