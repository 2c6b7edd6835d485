"""W&B run-history CSV exports (`run.history()` saved with pandas) -> corpus rows.

A W&B history export has one row per logged step, one column per metric (the union over
the run, so a row leaves empty what that step did not log) and W&B's own `_step`,
`_runtime`, `_timestamp`. A corpus row is one CSV row: `step` = `_step`, every other
non-empty cell that parses as a number kept as written (ints stay ints), strings (W&B
media/table references) dropped. Steps must rise strictly.

The sources were not fetchable whole: each file was read page by page through the
search tool's `read_file` (16,000 characters a page), the pages joined, and the result
checked against the file's stored character count (`SOURCES`, below) before parsing.
Sources: alee51/CS224R_Final_Project's `main-verl/writeup/results/GRPO_history.csv` and
`Minority_CoT_history.csv`, two arms of its verl runs (SOURCES.md has each run).
Usage: python wandb_history_csv.py <joined CSV file> <repo path> <out dir>
"""

from __future__ import annotations

import csv
import io
import math
import sys

from _mirror import increasing, write_rows

SOURCES = {  # path in the repository -> (repository, commit, total characters, run id)
    "main-verl/writeup/results/GRPO_history.csv": (
        "alee51/CS224R_Final_Project",
        "784888c23b5557cccd3a4372dc3ed2f6bf031aac",
        453502,
        "c5_cs224r_verl_grpo",
    ),
    "main-verl/writeup/results/Minority_CoT_history.csv": (
        "alee51/CS224R_Final_Project",
        "784888c23b5557cccd3a4372dc3ed2f6bf031aac",
        469277,
        "c5_cs224r_verl_minority_cot",
    ),
}
DROP = ("_step",)


def number(cell: str) -> int | float | None:
    try:
        value: int | float = int(cell)
    except ValueError:
        try:
            value = float(cell)
        except ValueError:
            return None
    return value if math.isfinite(value) else None


def rows_of(text: str) -> list[dict]:
    rows = []
    for record in csv.DictReader(io.StringIO(text)):
        if None in record:
            raise ValueError(f"row {len(rows) + 1}: more cells than header columns")
        row: dict = {"step": int(record["_step"])}
        for name, cell in record.items():
            value = number(cell) if cell and name not in DROP else None
            if value is not None:
                row[name] = value
        rows.append(row)
    return increasing(rows)


def main(csv_file: str, path: str, out: str) -> None:
    if path not in SOURCES:
        raise SystemExit(f"{path}: not one of {sorted(SOURCES)}")
    repo, commit, total, run_id = SOURCES[path]
    with open(csv_file, encoding="utf-8", newline="") as f:
        text = f.read()
    if len(text) != total:
        raise SystemExit(f"{csv_file}: {len(text)} characters, the stored file has {total}")
    rows = rows_of(text)
    write_rows(out, run_id, rows)
    print(f"{run_id}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
