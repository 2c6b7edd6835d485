"""`minirl import FILE [--format FORMAT] --out RUN_DIR`: a foreign log as a run.

Reads another trainer's log (monitor/importers), renames the peers' metrics onto ours
(importers/names.py; unknown names are kept), and writes the steps in order through
`Monitor`, so the imported run gets the same store, detectors and alerts as one of ours and
`minirl analyze` / the dashboard read it unchanged. Garbage lines are counted, skipped and
summarised; a missing file, or one with no readable value at all, is a UserError.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from monitor.errors import UserError
from monitor.importers import FORMATS, Parsed, guess_format, parse
from monitor.importers.names import canonical_name


def rename(row: dict[str, float], renamed: dict[str, str]) -> dict[str, float]:
    """Peer names -> ours. If two peer names land on one of ours, the first wins and the
    other keeps its own name (nothing is dropped). `renamed` collects what was mapped."""
    out: dict[str, float] = {}
    for name, value in row.items():
        target = canonical_name(name)
        if target != name and (target in out or target in row):
            target = name
        if target != name:
            renamed[name] = target
        out[target] = value
    return out


def say_renamed(renamed: dict[str, str]) -> None:
    """Print what `rename` mapped, one line (nothing when nothing was renamed)."""
    if renamed:
        pairs = ", ".join(f"{a} -> {b}" for a, b in sorted(renamed.items()))
        print(f"renamed {len(renamed)} metric(s) onto minirl's names: {pairs}")


def say_counts(*counts: tuple[str, int, str]) -> None:
    """Print each (level, n, what) with n > 0 to stderr as "level: n what": what a
    reader skipped or ignored, said once at the end rather than per line."""
    for level, n, what in counts:
        if n:
            print(f"{level}: {n} {what}", file=sys.stderr)


def _skipped(parsed: Parsed) -> str:
    skipped = f"garbage {parsed.unit}(s) of {parsed.units} skipped"
    if parsed.examples:
        skipped += " (" + "; ".join(parsed.examples) + ")"
    return skipped


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="minirl import",
        description="Import a foreign log (JSONL, CSV, TensorBoard, W&B, console) as a run store.",
    )
    parser.add_argument("file", type=Path, help="log file, TensorBoard log dir or W&B run dir")
    parser.add_argument("--format", choices=FORMATS, help="default: from the file name")
    parser.add_argument("--out", type=Path, required=True, help="new run directory")
    parser.add_argument(
        "--keep-names", action="store_true", help="do not rename peers' metrics onto ours"
    )
    args = parser.parse_args(argv)

    if not args.file.exists():
        raise UserError(f"no such file: {args.file}")
    fmt = args.format or guess_format(args.file)
    if fmt is None:
        raise UserError(f"cannot tell the format of {args.file}; pass --format {'|'.join(FORMATS)}")
    if args.file.is_dir() and fmt not in ("tensorboard", "wandb"):
        raise UserError(f"{args.file} is a directory; only tensorboard and wandb read directories")
    if args.file.is_dir() and fmt == "tensorboard":
        from monitor.importers.tensorboard import event_files

        if not event_files(args.file):
            raise UserError(f"no TensorBoard event files (*tfevents*) under {args.file}")
    try:
        parsed = parse(args.file, fmt)
    except (OSError, UnicodeError) as err:
        raise UserError(f"cannot read {args.file}: {err}") from None
    if parsed.n_values == 0 and fmt == "console" and parsed.units == 0:
        raise UserError(
            f"no metric lines in {args.file} (read as console text: verl's `step:N - key:value`"
            f" lines, a Hugging Face trainer's printed dicts, JSON lines); if it is another "
            f"format, pass --format {'|'.join(FORMATS)}"
        )
    if parsed.n_values == 0:
        found = f"{parsed.garbage} {_skipped(parsed)}"
        raise UserError(f"no metric values found in {args.file} as {fmt}: {found}")

    from monitor.monitor import Monitor

    renamed: dict[str, str] = {}
    steps = sorted(parsed.rows)
    rows = {
        step: parsed.rows[step] if args.keep_names else rename(parsed.rows[step], renamed)
        for step in steps
    }
    provenance = {"imported_from": str(args.file.resolve()), "format": fmt}
    n_alerts = 0
    with Monitor(args.out, config=provenance) as mon:
        mon.event("import", {**provenance, "garbage": parsed.garbage, "renamed": renamed})
        for i, step in enumerate(steps, start=1):
            n_alerts += len(mon.log(step, rows[step]))
            if sys.stderr.isatty() and i % 1000 == 0:
                print(f"\r  {i}/{len(steps)} steps", end="", file=sys.stderr)
    names = {name for row in rows.values() for name in row}
    print(
        f"imported {len(steps)} steps, {parsed.n_values} values of {len(names)} metrics "
        f"from {args.file} ({fmt}) into {args.out}; {n_alerts} alert(s) raised"
    )
    say_renamed(renamed)
    say_counts(
        ("warning", parsed.garbage, _skipped(parsed)),
        ("note", parsed.non_numeric, "non-numeric field(s) ignored"),
        ("note", parsed.bad_names, "value(s) with an empty or invalid metric name skipped"),
        ("note", parsed.overwritten, "repeated (step, metric) value(s); the last kept"),
    )
    return 0
