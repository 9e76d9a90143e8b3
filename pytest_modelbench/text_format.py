"""Plain text shared by every layer that prints: fixed-width tables and the numbers in them."""

from __future__ import annotations

from typing import Sequence


def format_number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def format_delta(value: float) -> str:
    return f"{value:+.4f}"


def format_p(value: float) -> str:
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header, a rule and the rows, each column as wide as its widest cell."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]
