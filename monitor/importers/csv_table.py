"""CSV (or TSV) logs with a header row.

Accepted shapes:
- wide: step columns (STEP_COLUMNS; a row's step is the first it fills) plus one column
  per metric: a W&B history export, a pandas dump. W&B's chart export ("Step",
  "<run> - <metric>", its __MIN/__MAX envelope columns dropped) names a run per prefix.
- long: `step,name,value` (what `minirl export --format csv` writes) or TensorBoard's
  `get_scalars()` table `run,tag,step,value` (`wall_time` ignored).
- A `run` column, in either shape, makes one run per value of it.
- TensorBoard's "Download CSV" (`Wall time,Step,Value`): one metric, named by the file
  (`run-<run>-tag-<tag>.csv`).

Empty cells are missing values, not garbage. A row is one line (a stray quote spoils its
own row only); it is garbage when it has no step, its step is not an integer in
0..2^53, or its field count differs from the header's. A leading byte-order mark (a
spreadsheet's UTF-8 export) is not part of the first name.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from monitor.importers.names import PEER_NAMES
from monitor.importers.parsed import RUN_SEP, STEP_KEYS, Parsed, as_step

STEP_COLUMNS = (*STEP_KEYS, "iteration")
LONG_NAME_COLUMNS = ("name", "tag", "metric")
RUN_COLUMN = "run"
"""A column saying which run a row is of (TensorBoard's `get_scalars()`, run histories
concatenated into one table): one run per value."""
LONG_EXTRA_COLUMNS = (RUN_COLUMN, "wall_time")
TENSORBOARD_DOWNLOAD = ["Wall time", "Step", "Value"]
_ENVELOPE = ("__MIN", "__MAX")


def _column_runs(columns: list[str]) -> list[str]:
    """The runs of a W&B chart export, whose every metric column is "<run> - <metric>"
    (in order of appearance); [] for a log of one unnamed run."""
    if not columns or not all(RUN_SEP in c for c in columns):
        return []
    return list(dict.fromkeys(c.rsplit(RUN_SEP, 1)[0] for c in columns))


def _rows(lines: Iterable[str], delimiter: str, parsed: Parsed) -> Iterator[tuple[int, list]]:
    """(line number, row) per line. A row is one line: a quote left open closes at the
    end of its line instead of swallowing the rest of the file, and a line the csv
    module refuses (a field over its 128 KiB limit) is garbage on its own."""
    for lineno, line in enumerate(lines, start=1):
        try:
            row = next(csv.reader([line], delimiter=delimiter), [])
        except csv.Error as err:
            parsed.units += 1
            parsed.bad(f"row {lineno}", f"unreadable CSV ({err})")
            continue
        yield lineno, row


def _tag_from_file_name(stem: str) -> tuple[str, str]:
    """(run, metric) of a TensorBoard "Download CSV" file, named "run-<run>-tag-<tag>"
    with every "/" of both made "_": the tag's slashes are put back where that gives a
    known peer or minirl name ("actor_pg_clipfrac" -> "actor/pg_clipfrac"), else the name
    stays as written. A file named otherwise is one unnamed run; its name is the metric."""
    match = re.fullmatch(r"run-(.*)-tag-(.+)", stem)
    run, tag = (match.group(1), match.group(2)) if match else ("", stem)
    parts = tag.split("_")
    if "/" in tag or len(parts) > 9:
        return run, tag
    known = set(PEER_NAMES) | set(PEER_NAMES.values())
    found = set()
    for seps in itertools.product("_/", repeat=len(parts) - 1):
        name = parts[0] + "".join(sep + part for sep, part in zip(seps, parts[1:], strict=True))
        if name in known:
            found.add(name)
    return run, found.pop() if len(found) == 1 else tag


def parse_csv(path: Path) -> Parsed:
    """Read a CSV/TSV log; see the module docstring for the accepted shapes."""
    parsed = Parsed(unit="row")
    # utf-8-sig: a spreadsheet's export starts with a byte-order mark, not part of a name
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as handle:
        sample = handle.read(8192)
        handle.seek(0)
        delimiter = "\t" if sample.count("\t") > sample.count(",") else ","
        reader = _rows(handle, delimiter, parsed)
        header = next(reader, (0, []))[1]
        if not header:
            return parsed
        header = [h.strip() for h in header]
        step_cols = [c for c in STEP_COLUMNS if c in header]
        if not step_cols:
            parsed.bad("header", f"no step column (looked for {', '.join(STEP_COLUMNS)})")
            for _ in reader:  # every row is unreadable without a step
                parsed.units += 1
                parsed.garbage += 1
            return parsed
        # a row's step is the first of its step cells that is filled (as a JSONL row's):
        # a trainer's train and eval rows may each carry only their own step column
        step_idxs = [header.index(c) for c in step_cols]
        name_col = next((c for c in LONG_NAME_COLUMNS if c in header), None)
        long = (
            name_col is not None
            and "value" in header
            and set(header) <= {*step_cols, name_col, "value", *LONG_EXTRA_COLUMNS}
        )
        if long:
            name_idx, value_idx = header.index(name_col), header.index("value")
        run_idx = header.index(RUN_COLUMN) if RUN_COLUMN in header else None
        row_runs: dict[str, None] = {}
        if header == TENSORBOARD_DOWNLOAD:  # one metric, named by the file
            run, metric = _tag_from_file_name(path.stem)
            metrics = [(header.index("Value"), f"{run}{RUN_SEP}{metric}" if run else metric)]
            parsed.runs = [run] if run else []
        else:
            metrics = [
                (i, name)
                for i, name in enumerate(header)
                if i not in (*step_idxs, run_idx)
                and not name.startswith("_")
                and not name.endswith(_ENVELOPE)
            ]
            parsed.runs = _column_runs([name for _, name in metrics])
        for lineno, row in reader:
            if not row or all(not cell.strip() for cell in row):
                continue
            parsed.units += 1
            if len(row) != len(header):
                parsed.bad(f"row {lineno}", f"{len(row)} fields, header has {len(header)}")
                continue
            step_idx = next((i for i in step_idxs if row[i].strip()), None)
            if step_idx is None:
                parsed.bad(f"row {lineno}", f"no step (empty {', '.join(step_cols)})")
                continue
            step = as_step(row[step_idx])
            if step is None:
                cell = row[step_idx]
                parsed.bad(f"row {lineno}", f"{header[step_idx]}={cell!r:.40} is not a step")
                continue
            # a row of a run column: its names are "<run> - <metric>", like a chart export's
            prefix = "" if run_idx is None else f"{row[run_idx]}{RUN_SEP}"
            if run_idx is not None:
                row_runs[row[run_idx]] = None
            if long:
                name, raw = row[name_idx], row[value_idx]
                parsed.add_long(step, prefix + name, raw, f"row {lineno}")
            else:  # an empty cell: the metric was not logged at this step
                cells = ((prefix + name, row[i]) for i, name in metrics if row[i].strip())
                parsed.add_fields(step, cells)
    if row_runs:
        parsed.runs = list(row_runs)
    return parsed
