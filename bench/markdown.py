"""Markdown tables of the results pages: a header, its rule, one row per item."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The table's lines; each cell is written as `str` gives it (format numbers first)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return out


def seed_ranges(seeds: Iterable[int]) -> str:
    """1 2 3 5 -> '1-3, 5': a list of seeds as the ranges it holds."""
    spans: list[list[int]] = []
    for s in sorted(seeds):
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)
