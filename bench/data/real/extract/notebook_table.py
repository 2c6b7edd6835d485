"""TRL's notebook progress table, saved in a Jupyter notebook's outputs -> corpus rows.

Source: standing-on-giants/Data-Pipeline-Incident-Response (TRL GRPOTrainer with Unsloth
on Kaggle, SOURCES.md). In a notebook TRL logs through its NotebookProgressCallback: an
HTML table, one row per logged step, `Step` first and each metric a column, its name
spelled with " / " for "/" (`completions / mean_length`) and the loss as `Training Loss`.
A row is a table row, the names given back as TRL logs them (`completions/mean_length`,
`loss`), values as printed (6 decimals). Checked: one table with a `reward` column per
notebook, every cell a number, steps 1, 2, ... (logging every step), no more rows than the
progress bar above the table has done (`[done/planned`; fewer than planned in a notebook
saved while it ran), and `reward` equal to the mean of the one reward function.
Usage: python notebook_table.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser

from _mirror import git, write_rows

COMMIT = "e09b30f947821e764c0ddfe868a8ccb94d02fb43"
RUNS = [  # (corpus id, path); the only tables with a reward column in any commit
    ("c9_pipeline_grpo_q3b_lr5e5", "grpo_training_shashank.ipynb"),
    ("c9_pipeline_grpo_q3b_lr1e5", "train_grpo/training_grpo_qwen_pratham.ipynb"),
]
BAR = re.compile(r"\[(\d+)/(\d+) ")
NAMES = {"Training Loss": "loss"}


class _Table(HTMLParser):
    """The cells of an HTML table, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell += data


def rows_of(notebook: str) -> tuple[list[dict], tuple[int, int]]:
    """The table's rows, and the progress bar's (done, planned) steps."""
    html = [
        "".join(out["data"]["text/html"])
        for cell in json.loads(notebook)["cells"]
        for out in cell.get("outputs", [])
        if "text/html" in out.get("data", {})
    ]
    tables = []
    for text in html:
        parsed = _Table()
        parsed.feed(text)
        if parsed.rows and "reward" in parsed.rows[0]:
            tables.append((text, parsed.rows))
    if len(tables) != 1:
        raise ValueError(f"{len(tables)} tables with a reward column")
    text, (header, *body) = tables[0]
    if header[0] != "Step":
        raise ValueError(f"first column {header[0]!r}")
    names = [NAMES.get(h, h.replace(" / ", "/")) for h in header[1:]]
    rows = []
    for i, cells in enumerate(body, 1):
        if len(cells) != len(header) or int(cells[0]) != i:
            raise ValueError(f"row {i}: {cells[:2]}")
        rows.append({"step": i, **dict(zip(names, map(float, cells[1:]), strict=True))})
    done, planned = map(int, BAR.search(text).groups())
    if not len(rows) <= done <= planned:
        raise ValueError(f"{len(rows)} rows, the bar says {done}/{planned}")
    parts = [n for n in names if n.startswith("rewards/") and n.endswith("/mean")]
    if len(parts) != 1 or any(abs(r["reward"] - r[parts[0]]) > 1e-6 for r in rows):
        raise ValueError(f"reward is not the one reward function's mean ({parts})")
    return rows, (done, planned)


def main(git_dir: str, out: str) -> None:
    for run_id, path in RUNS:
        rows, (done, planned) = rows_of(git(git_dir, "show", f"{COMMIT}:{path}"))
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{path}\t{len(rows)} steps (bar {done}/{planned})\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
