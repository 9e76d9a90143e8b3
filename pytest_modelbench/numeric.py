"""What counts as a number where a backend or a task's code hands the engine a value."""

from __future__ import annotations

import numbers
from typing import Any


def is_number(value: Any, *, bool_counts: bool = False) -> bool:
    """A real number (Python's or numpy's: numpy registers its number types as numbers.Real; numpy.bool_ is not
    one). A bool is a number only with `bool_counts`: a backend's log-likelihood never is one, while lm-eval's
    process_results often returns its metrics as bools."""
    return isinstance(value, numbers.Real) and (bool_counts or not isinstance(value, bool))
