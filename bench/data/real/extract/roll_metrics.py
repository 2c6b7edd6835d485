"""ROLL (alibaba/ROLL) RLVR pipeline metrics written one JSON object per step -> corpus rows.

The objects carry ROLL's metric names (`actor/*`, `actor_train/grad_norm`, `length/*`,
`reward/*`, ...) and the step under `system/step`, not `step`: a corpus row is the
object with its numeric values unchanged (strings, booleans and nulls dropped) plus
`step` = `system/step`, checked to count 1, 2, 3, ... with no gap. Where a file has several
committed versions, each is checked to be a prefix of the one taken. Sources, each read
at the commit named here from a fetched mirror:
- beingamanforever/RDAN-GRPO, `results/training/metrics.jsonl` (the run's per-step
  metrics, per `docs/EXPERIMENTS.md`; earlier versions at 7e5ca03 and 6131296 hold its
  first 353 and 385 steps).
Usage: python roll_metrics.py <owner/name> <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import sys

from _mirror import git, numeric, write_rows

SOURCES = {  # repository -> (commit, [(path, run id, earlier commits)])
    "beingamanforever/RDAN-GRPO": (
        "f108c50db7d6772c2ad302ad046e5824f94fe673",
        [
            (
                "results/training/metrics.jsonl",
                "p4_rdangrpo_qwen3_4b",
                ("7e5ca03", "6131296"),
            )
        ],
    ),
}


def rows_of(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        row = numeric(obj)
        rows.append({"step": int(row["system/step"]), **row})
    if [r["step"] for r in rows] != list(range(1, len(rows) + 1)):
        raise ValueError("system/step does not count 1, 2, 3, ...")
    return rows


def main(repo: str, git_dir: str, out: str) -> None:
    if repo not in SOURCES:
        raise SystemExit(f"{repo}: not one of {sorted(SOURCES)}")
    commit, runs = SOURCES[repo]
    for path, run_id, earlier in runs:
        text = git(git_dir, "show", f"{commit}:{path}")
        for old in earlier:
            lines = git(git_dir, "show", f"{old}:{path}").splitlines()
            if text.splitlines()[: len(lines)] != lines:
                raise ValueError(f"{path} at {old} is not a prefix of the version taken")
        rows = rows_of(text)
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
