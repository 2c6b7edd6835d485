"""Plain training scripts' per-step history files (a JSON list of one dict per logged step)
-> corpus rows.

A corpus row is one of the list's dicts with its numeric values unchanged (strings,
booleans and nulls dropped); the dict must carry its step under `step`. Sources, each
read at the commit named here from a fetched mirror:
- upul/grpo-from-scratch, `results/history.json`: the run behind the tutorial's result
  (`code/grpo_gsm8k.py`, `log_metrics()` appends one record every `log_every` steps and
  `save_ckpt()` dumps the list).
Usage: python history_json.py <owner/name> <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import sys

from _mirror import git, numeric, write_rows

SOURCES = {  # repository -> (commit, [(path, run id)])
    "upul/grpo-from-scratch": (
        "8f5bf898892fbf9f4caf2c080ac1ef3a9ba340eb",
        [("results/history.json", "p4_upulgrpo_qwen15b_gsm8k")],
    ),
}


def rows_of(text: str) -> list[dict]:
    rows = [numeric(obj) for obj in json.loads(text)]
    steps = [r["step"] for r in rows]
    if steps != sorted(set(steps)):
        raise ValueError("steps not strictly increasing")
    return rows


def main(repo: str, git_dir: str, out: str) -> None:
    if repo not in SOURCES:
        raise SystemExit(f"{repo}: not one of {sorted(SOURCES)}")
    commit, runs = SOURCES[repo]
    for path, run_id in runs:
        rows = rows_of(git(git_dir, "show", f"{commit}:{path}"))
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
