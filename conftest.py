"""Custom tests beside the shipped suites (suites/*/test_*.py) use the plugin's fixtures: docs/suites.md, "Custom
tests"."""

import pytest


@pytest.fixture(scope="session")
def crows_pairs_english(modelbench_model):
    """The shipped CrowS-Pairs English task, scored once with the session's model (and --limit, --data-dir)."""
    return modelbench_model.evaluate("crows_pairs_english")
