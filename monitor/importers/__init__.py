"""Readers of other trainers' logs: JSONL and CSV exports, TensorBoard event files, W&B
run files and console logs (what verl or a Hugging Face trainer printed).

Each reader turns a file into `Parsed`: scalars keyed by step, in the peer's own names,
plus an honest tally of what it could not read (garbage lines are counted and skipped,
never fatal on their own). Renaming onto our metric names (`names.py`) and writing a run
store (`import_cli.py`) happen elsewhere, so each reader only knows its format.
"""

from __future__ import annotations

from pathlib import Path

from monitor.importers.parsed import MAX_EXAMPLES, Parsed, as_step, as_value

__all__ = ["FORMATS", "MAX_EXAMPLES", "Parsed", "as_step", "as_value", "guess_format", "parse"]

FORMATS = ("jsonl", "csv", "tensorboard", "wandb", "console")


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
    if name.endswith((".log", ".txt", ".out", ".err")):
        return "console"
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
    if fmt == "console":
        from monitor.importers.console import parse_console

        return parse_console(path)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
