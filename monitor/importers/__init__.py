"""Readers of other trainers' logs: JSONL and CSV exports, TensorBoard event files.

Each reader turns a file into `Parsed`: scalars keyed by step, in the peer's own names,
plus an honest tally of what it could not read (garbage lines are counted and skipped,
never fatal on their own). Renaming onto our metric names (`names.py`) and writing a run
store (`import_cli.py`) happen elsewhere, so each reader only knows its format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

MAX_EXAMPLES = 5


@dataclass
class Parsed:
    """Scalars read from one file, and what was skipped on the way."""

    rows: dict[int, dict[str, float]] = field(default_factory=dict)
    """step -> {peer name -> value}; a later value for the same (step, name) wins."""
    units: int = 0
    """Lines, rows or records read (the unit the garbage count refers to)."""
    unit: str = "line"
    garbage: int = 0
    examples: list[str] = field(default_factory=list)
    """The first few garbage units, as 'line 7: not JSON'."""
    non_numeric: int = 0
    """Fields that were present but not numbers (strings, lists...): skipped, not garbage."""
    overwritten: int = 0
    """(step, name) pairs seen more than once; the last one is kept."""

    def add(self, step: int, name: str, value: float) -> None:
        row = self.rows.setdefault(step, {})
        if name in row:
            self.overwritten += 1
        row[name] = value

    def bad(self, where: str, reason: str) -> None:
        self.garbage += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {reason}")

    @property
    def n_values(self) -> int:
        return sum(len(row) for row in self.rows.values())


def as_step(value: object) -> int | None:
    """A non-negative integer step from an int, an integral float or a numeric string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and value >= 0:
        return int(value)
    return None


def as_value(value: object) -> float | None:
    """A float from a number or a numeric string ('nan' and 'inf' included: they are data)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            return None
    return None


FORMATS = ("jsonl", "csv", "tensorboard", "wandb")


def guess_format(path: Path) -> str | None:
    """The format implied by a file name, or None."""
    name = path.name.lower()
    from monitor.importers.wandb import is_wandb

    if is_wandb(path):
        return "wandb"
    if path.is_dir() or "tfevents" in name:
        return "tensorboard"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith((".csv", ".tsv")):
        return "csv"
    return None


def parse(path: Path, fmt: str) -> Parsed:
    """Read `path` in format `fmt` (one of FORMATS)."""
    if fmt == "jsonl":
        from monitor.importers.jsonl import parse_jsonl

        return parse_jsonl(path)
    if fmt == "csv":
        from monitor.importers.csv_table import parse_csv

        return parse_csv(path)
    if fmt == "tensorboard":
        from monitor.importers.tensorboard import parse_tensorboard

        return parse_tensorboard(path)
    if fmt == "wandb":
        from monitor.importers.wandb import parse_wandb

        return parse_wandb(path)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
