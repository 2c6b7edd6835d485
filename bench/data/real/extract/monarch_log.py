"""Console logs of a GRPO trainer on PyTorch Monarch (an FSDP learner mesh and vLLM
generators, harishvs/rl_grpo_qwen_math) -> corpus rows.

The trainer prints one line per GRPO step, `step:N | name=value | name=value ...`, among
its other output (actor start-up, progress bars, `Checkpoint saved: ...`, a traceback).
Every such line is a step; one that does not parse is an error, not text. The step is the
one printed, checked to rise by one from the first, and never more than the plan the log
states (`... N total steps`): two runs in one file would break both. Values unchanged.
The source cannot be fetched here: each log was copied page by page through the stored
index and the joined copy checked against the stored character count (SOURCES.md).
Usage: python monarch_log.py <joined log file> <run id> <out dir>
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from _mirror import name_values, write_rows

STEP_LINE = re.compile(r"^step:(\d+) \| (.*)$")
PLAN = re.compile(r"(\d+) total steps")


def rows_of(text: str) -> list[dict]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        m = STEP_LINE.match(line)
        if m is None:
            continue
        rows.append({"step": int(m.group(1)), **name_values(m.group(2).split(" | "), f"line {n}")})
    if not rows:
        raise ValueError("no step lines")
    first = rows[0]["step"]
    for i, row in enumerate(rows):  # by one: stricter than _mirror.increasing
        if row["step"] != first + i:
            raise ValueError(f"step line {i}: step {row['step']}, expected {first + i}")
    plan = PLAN.search(text)
    if plan and len(rows) > int(plan.group(1)):  # two runs in one file
        raise ValueError(f"{len(rows)} step lines for a plan of {plan.group(1)} steps")
    return rows


def main(path: str, run_id: str, out: str) -> None:
    rows = rows_of(Path(path).read_text(encoding="utf-8"))
    write_rows(out, run_id, rows)
    print(f"{run_id}\t{path}\t{len(rows)} steps")


if __name__ == "__main__":
    main(*sys.argv[1:4])
