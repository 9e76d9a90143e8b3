"""What counts as a number (numeric.is_number): one rule for backend answers, results and process_results values."""

from __future__ import annotations

import numpy as np

from pytest_modelbench.numeric import is_number


def test_is_number_is_a_real_number_and_a_bool_only_where_it_counts():
    assert all(is_number(v) for v in (1, -2.5, float("nan"), np.float32(0.5), np.int64(3)))
    assert not any(is_number(v) for v in (True, np.bool_(True), "1", None, [1.0], 1 + 0j))
    assert is_number(True, bool_counts=True) and is_number(False, bool_counts=True)
    assert not is_number(np.bool_(True), bool_counts=True)  # numpy's bool is not a numbers.Real
