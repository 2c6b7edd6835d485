"""Markdown tables of the results pages: a header, its rule, one row per item."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The table's lines; each cell is written as `str` gives it (format numbers first)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return out
