"""Tinker cookbook RL runs' `metrics.jsonl` -> corpus rows (one per logged step).

tinker-cookbook's RL loop (`tinker_cookbook/rl/train.py`, logged by `utils/ml_log.py`)
writes one JSON object per training step, with the step under `step`, to
`<log_path>/metrics.jsonl`. A corpus row is that object with its numeric values
unchanged (strings, booleans and nulls dropped). Sources, each read at the commit named
here from a fetched mirror:
- arvindcr4/tinker-rl-lab, `experiments/results/arithmetic_metrics.jsonl` (math_rl recipe,
  arithmetic environment). The folder's `distillation_on_metrics.jsonl` is on-policy
  distillation (no task reward: `env/all/reward/total` is 0 at every step) and is not taken;
  `distillation_off_metrics.jsonl` is supervised.
Usage: python tinker_metrics.py <owner/name> <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import sys

from _mirror import git, numeric, write_rows

SOURCES = {  # repository -> (commit, [(path, run id)])
    "arvindcr4/tinker-rl-lab": (
        "21a99ef766543a1ca86bfbad188445d3596ea73c",
        [("experiments/results/arithmetic_metrics.jsonl", "p4_tinkerlab_arithmetic")],
    ),
}


def rows_of(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        rows.append(numeric(obj))
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
