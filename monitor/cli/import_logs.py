"""`minirl import FILE... [--format FORMAT] [--run NAME] --out RUN_DIR`: foreign logs as runs.

Reads another trainer's log (monitor/importers), renames the peers' metrics onto ours
(importers/names.py; unknown names are kept), and writes the steps in order through
`Monitor`, so the imported run gets the same store, detectors and alerts as one of ours and
`minirl analyze` / the dashboard read it unchanged. Garbage lines are counted, skipped and
summarised; a missing file, or one with no readable value at all, is a UserError. Several
files are merged per run; an input of several runs is written as a folder of run stores.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from core.errors import UserError
from monitor.importers import FORMATS, Parsed, guess_format, parse
from monitor.importers.names import add_map_option, parse_name_map, rename
from monitor.integrations.verl_advice import settings_from_config
from monitor.integrations.verl_config import add_verl_config_option, read_verl_config
from monitor.store.schema import STORE_FILE


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


def _read(file: Path, fmt_arg: str | None) -> tuple[str, Parsed]:
    """One input file read in its format, or a UserError saying why it cannot be."""
    if not file.exists():
        raise UserError(f"no such file: {file}")
    fmt = fmt_arg or guess_format(file)
    if fmt is None:
        raise UserError(f"cannot tell the format of {file}; pass --format {'|'.join(FORMATS)}")
    if file.is_dir() and fmt not in ("tensorboard", "wandb"):
        raise UserError(f"{file} is a directory; only tensorboard and wandb read directories")
    if file.is_dir() and fmt == "tensorboard":
        from monitor.importers.tensorboard import event_files

        if not event_files(file):
            raise UserError(f"no TensorBoard event files (*tfevents*) under {file}")
    try:
        parsed = parse(file, fmt)
    except (OSError, UnicodeError) as err:
        raise UserError(f"cannot read {file}: {err}") from None
    if parsed.n_values == 0 and fmt == "console" and parsed.units == 0:
        raise UserError(
            f"no metric lines in {file} (read as console text: verl's `step:N - key:value`"
            f" lines, a Hugging Face trainer's printed dicts, JSON lines); if it is another "
            f"format, pass --format {'|'.join(FORMATS)}"
        )
    if parsed.n_values == 0:
        found = f"{parsed.garbage} {_skipped(parsed)}"
        raise UserError(f"no metric values found in {file} as {fmt}: {found}")
    return fmt, parsed


Rows = dict[int, dict[str, float]]


def _merge_into(target: Rows, rows: Rows) -> int:
    """Add `rows` to `target` (a later value wins); the number of values replaced."""
    replaced = 0
    for step, row in rows.items():
        dest = target.setdefault(step, {})
        replaced += len(dest.keys() & row.keys())
        dest.update(row)
    return replaced


def merge_runs(parts: list[tuple[Path, Parsed]], run: str | None) -> dict[str, Rows]:
    """The runs the input files hold, each file's values merged into its run by name (a
    W&B chart export per metric of the same runs, a log and its trainer_state.json).
    A file of one unnamed run joins the one named run the others hold; `run` keeps only
    that run. Overlapping (step, metric) values: the later file wins (counted)."""
    runs: dict[str, Rows] = {}
    unnamed: list[tuple[Path, Parsed, Rows]] = []
    for file, parsed in parts:
        for name, rows in parsed.by_run().items():
            if name == "":
                unnamed.append((file, parsed, rows))
            else:
                parsed.overwritten += _merge_into(runs.setdefault(name, {}), rows)
    named = sorted(runs)
    if run is not None:
        if run not in runs and not (unnamed and not runs):
            listed = ", ".join(repr(n) for n in named) or "none: the files name no run"
            raise UserError(f"no run named {run!r} in the input (runs found: {listed})")
        runs = {run: runs.get(run, {})}
    elif unnamed and len(runs) > 1:
        files = ", ".join(str(f) for f, _, _ in unnamed)
        raise UserError(
            f"{files} holds one unnamed run, the other input several ({', '.join(named)}): "
            "choose the run it belongs to with --run NAME, or import the files separately"
        )
    target = runs.setdefault(next(iter(runs), ""), {})
    for _, parsed, rows in unnamed:
        parsed.overwritten += _merge_into(target, rows)
    return runs


def _run_dir_name(run: str) -> str:
    """A run's name as one directory name (a TensorBoard run "a/b" -> "a_b")."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("._") or "run"
    return safe[:100]


def _write_run(
    out: Path,
    rows: Rows,
    keep_names: bool,
    names: dict[str, str],
    provenance: dict,
    garbage: int,
    settings: dict[str, float],
) -> tuple[int, int, int, int, dict[str, str]]:
    """One run into a new store at `out`: (steps, values, metrics, alerts, renamed);
    `settings` (read off the run's config) are logged with every step."""
    from monitor.monitor import Monitor

    renamed: dict[str, str] = {}
    steps = sorted(rows)
    mapped = {step: rename(rows[step], renamed, names, peers=not keep_names) for step in steps}
    n_alerts = 0
    with Monitor(out, config=provenance) as mon:
        mon.event("import", {**provenance, "garbage": garbage, "renamed": renamed})
        for i, step in enumerate(steps, start=1):
            n_alerts += len(mon.log(step, {**settings, **mapped[step]}))
            if sys.stderr.isatty() and i % 1000 == 0:
                print(f"\r  {i}/{len(steps)} steps", end="", file=sys.stderr)
    n_values = sum(len(row) for row in mapped.values())
    names = {name for row in mapped.values() for name in row}
    return len(steps), n_values, len(names), n_alerts, renamed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="minirl import",
        description="Import a foreign log (JSONL, CSV, TensorBoard, W&B, console) as a run store.",
    )
    parser.add_argument(
        "files",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="log file, TensorBoard log dir or W&B run dir; several are merged per run",
    )
    parser.add_argument("--format", choices=FORMATS, help="default: from each file's name")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="new run directory (for an input of several runs: a new folder of runs)",
    )
    parser.add_argument("--run", help="import only this run of an input that holds several")
    parser.add_argument(
        "--keep-names", action="store_true", help="do not rename peers' metrics onto ours"
    )
    add_map_option(parser)
    add_verl_config_option(parser)
    args = parser.parse_args(argv)
    names = parse_name_map(args.map)
    config = read_verl_config(args.verl_config) if args.verl_config else None
    settings = settings_from_config(config) if config else {}

    parts = [(file, *_read(file, args.format)) for file in args.files]
    runs = merge_runs([(file, parsed) for file, _, parsed in parts], args.run)
    several = len(runs) > 1
    outs = {name: args.out / _run_dir_name(name) if several else args.out for name in runs}
    if len(set(outs.values())) < len(outs):
        raise UserError(
            f"runs {', '.join(repr(n) for n in runs)} would share a directory name under "
            f"{args.out}; import them one at a time with --run NAME"
        )
    for out in {args.out, *outs.values()}:  # all checked before any is written
        if (out / STORE_FILE).exists():
            raise UserError(f"{out} already holds a run; choose a new --out")
    if several:
        print(f"{len(runs)} runs in the input: each into its own store under {args.out}")
    fmts = sorted({fmt for _, fmt, _ in parts})
    garbage = sum(parsed.garbage for _, _, parsed in parts)
    sources = [str(file.resolve()) for file in args.files]
    what = " ".join(str(f) for f in args.files)
    renamed: dict[str, str] = {}
    for name, rows in runs.items():
        out = outs[name]
        provenance = {
            "imported_from": ", ".join(sources),
            "format": ", ".join(fmts),
            **({"run": name} if name else {}),
            **({"verl_config": str(args.verl_config.resolve())} if args.verl_config else {}),
        }
        n_steps, n_values, n_names, n_alerts, got = _write_run(
            out, rows, args.keep_names, names, provenance, garbage, settings
        )
        renamed.update(got)
        print(
            f"imported {n_steps} steps, {n_values} values of {n_names} metrics "
            f"from {what}{f' (run {name!r})' if name else ''} ({', '.join(fmts)}) into {out}; "
            f"{n_alerts} alert(s) raised"
        )
    say_renamed(renamed)
    for file, _, parsed in parts:
        where = f" (in {file})" if len(parts) > 1 else ""
        say_counts(
            ("warning", parsed.garbage, _skipped(parsed) + where),
            ("note", parsed.non_numeric, "non-numeric field(s) ignored" + where),
            (
                "note",
                parsed.bad_names,
                "value(s) with an empty or invalid metric name skipped" + where,
            ),
            ("note", parsed.overwritten, "repeated (step, metric) value(s); the last kept" + where),
        )
    return 0
