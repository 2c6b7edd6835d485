"""dequeueing/assignment5-alignment: GRPO runs' results/<run>/grpo_metrics.jsonl -> corpus rows.

The source writes one JSON object per GRPO step with a `step` field; a row is taken as it
is (values unchanged), with its nulls dropped (`val_accuracy` is null between evaluations).
A run whose rollout rewards are a prefix of a longer run's (the same execution logged
again, or its first steps) is skipped. Usage: python cs336_dequeueing.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COMMIT = "bf9443a386da95adb39df7e9cee73c9f8e0d56ac"


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def rows_of(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        rec = json.loads(line)
        rows.append({k: v for k, v in rec.items() if v is not None})
    return rows


def main(git_dir: str, out: str) -> None:
    paths = [
        p
        for p in _git(git_dir, "ls-tree", "-r", "--name-only", COMMIT, "results").split()
        if p.endswith("/grpo_metrics.jsonl")
    ]
    runs = {p: rows_of(_git(git_dir, "show", f"{COMMIT}:{p}")) for p in paths}
    rewards = {p: [r["rollout_reward_mean"] for r in rows] for p, rows in runs.items()}
    for path, rows in runs.items():
        mine = rewards[path]
        longer = [q for q, r in rewards.items() if len(r) > len(mine) and r[: len(mine)] == mine]
        if longer:
            print(f"skip {path}: a prefix of {longer[0]}")
            continue
        run = path.split("/")[1].removeprefix("grpo_")
        name = "cs336deq_" + run.replace(".", "").replace("-", "")
        Path(out, f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{name}\t{path}\t{len(rows)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
