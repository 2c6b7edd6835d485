"""`minirl export RUN --format csv|jsonl [--out FILE]`: every recorded scalar as rows.

Rows are `step,name,value`, ordered by step then name — the long format that
`minirl import` and pandas (`pd.read_csv(...).pivot(index="step", columns="name")`)
read back. Values are written exactly (shortest round-trip repr); NaN and ±inf, which
JSON lacks, are written as the strings "nan", "inf", "-inf" in both formats. The file is
written to a temporary name and renamed, so a failed export never leaves half a file.
Histograms, alerts and actions are not exported here (they live in the store).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from core.errors import UserError
from monitor.store.damage import StoreDamaged
from monitor.store.reader import RunReader

FORMATS = ("csv", "jsonl")


def _value(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)  # 'nan', 'inf', '-inf'


def write_rows(rows: Iterable[tuple[int, str, float]], fmt: str, out: TextIO) -> int:
    """Write `rows` to `out` in `fmt`; returns the number of rows."""
    n = 0
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["step", "name", "value"])
        for step, name, value in rows:
            writer.writerow([step, name, repr(value) if math.isfinite(value) else str(value)])
            n += 1
    else:
        for step, name, value in rows:
            out.write(json.dumps({"step": step, "name": name, "value": _value(value)}) + "\n")
            n += 1
    return n


def _rows(run: Path, start: int | None, end: int | None) -> Iterator[tuple[int, str, float]]:
    """The store's rows. If a damaged part stops them, the rest come from a salvaged copy
    (monitor/store/salvage.py), after the last row already written, with one warning saying
    what was unreadable and lost."""
    last: tuple[int, str] | None = None
    try:
        with RunReader(run) as reader, contextlib.closing(reader.rows(start, end)) as rows:
            for row in rows:
                last = row[:2]
                yield row
        return
    except StoreDamaged as err:
        damage = err
    from monitor.store.salvage import salvaged

    try:
        with salvaged(damage.path) as (copy, report), RunReader(copy) as reader:
            print(
                f"minirl export: warning: {damage.part} of {damage.path} unreadable "
                f"({damage.why}); exporting what SQLite can still read ({report.method}; "
                f"{report.summary()}); `minirl repair {run}` keeps a repaired copy",
                file=sys.stderr,
            )
            first = start if last is None else last[0]
            with contextlib.closing(reader.rows(first, end)) as rows:
                for row in rows:
                    if last is None or row[:2] > last:
                        yield row
    except StoreDamaged:
        raise damage from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl export", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="run directory (or its store.sqlite)")
    p.add_argument("--format", choices=FORMATS, help="csv or jsonl (default: from --out's suffix)")
    p.add_argument("--out", type=Path, help="output file (default: standard output)")
    p.add_argument("--start", type=int, help="first step to export")
    p.add_argument("--end", type=int, help="last step to export")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)  # bad flags: argparse's usage line, exit 2
    fmt = args.format
    if fmt is None and args.out is not None:
        suffix = args.out.suffix.lower().lstrip(".")
        fmt = {"csv": "csv", "jsonl": "jsonl", "json": "jsonl"}.get(suffix)
    if fmt is None:
        raise UserError("say --format csv or --format jsonl (or give --out FILE.csv / FILE.jsonl)")
    with contextlib.closing(_rows(args.run, args.start, args.end)) as rows:
        if args.out is None:
            try:
                write_rows(rows, fmt, sys.stdout)
                sys.stdout.flush()
            except BrokenPipeError:  # `minirl export ... | head`: the reader left, not an error
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return 0
            return 0
        if not args.out.parent.is_dir():
            raise UserError(f"output directory {args.out.parent} does not exist")
        tmp = args.out.with_name(args.out.name + ".part")
        try:
            with open(tmp, "w", encoding="utf-8", newline="") as out:
                n = write_rows(rows, fmt, out)
            os.replace(tmp, args.out)
        except OSError as err:
            raise UserError(f"cannot write {args.out}: {err.strerror}") from None
        finally:
            if tmp.exists():
                tmp.unlink()
    print(f"minirl export: {n} rows -> {args.out}", file=sys.stderr)
    return 0
