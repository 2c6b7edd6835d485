"""jorahn/rookworld-rlvr: `src/mini/logs/training_history.jsonl`, which the "mini" GRPO
script (`src/mini/train_logged.py`) appends one JSON object per training step to
(`{"step", "loss", "mean_reward", "kl_div", "memory_gb", ["actual_memory_gb"],
"elapsed_time"}`), -> one corpus row per step.

Every run appends to the same file with its step from 1, so the file is several runs glued
together: it is split where the step falls back to 1; inside a run each step must be the
previous + 1 and every record must carry the same keys (else it raises). A row is a record's
numbers unchanged. Runs with fewer than 20 steps are not taken (`MIN_STEPS`). The file is read
at `COMMIT`, its last version (deleted in the next, ac08353); each earlier version is checked
to be a byte prefix of it. No held-out evaluation is logged in the file.
Usage: python rookworld_mini.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import sys

from _mirror import git, numeric, write_rows

PATH = "src/mini/logs/training_history.jsonl"
COMMIT = "0df4c18d8a44772b02bb6dafd9526459112211e5"
RUNS = {3: "c9_rookworld_mini_run3", 4: "c9_rookworld_mini_run4", 5: "c9_rookworld_mini_run5"}
MIN_STEPS = 20


def runs_of(text: str) -> list[list[dict]]:
    """The file's records split into runs at each restart of the step counter."""
    runs: list[list[dict]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict) or type(record.get("step")) is not int:
            raise ValueError(f"line {n}: no integer step")
        row = numeric(record)
        if len(row) != len(record):
            raise ValueError(f"line {n}: a value that is not a number: {record}")
        if record["step"] == 1:
            runs.append([row])
            continue
        if not runs or record["step"] != runs[-1][-1]["step"] + 1:
            raise ValueError(f"line {n}: step {record['step']} out of sequence")
        if row.keys() != runs[-1][-1].keys():
            raise ValueError(f"line {n}: keys {sorted(row)} change inside a run")
        runs[-1].append(row)
    return runs


def main(git_dir: str, out: str) -> None:
    text = git(git_dir, "show", f"{COMMIT}:{PATH}")
    for c in git(git_dir, "log", "--all", "--format=%H", "--", PATH).split():
        listed = git(git_dir, "ls-tree", c, "--", PATH).strip()
        if listed and not text.startswith(git(git_dir, "show", f"{c}:{PATH}")):
            raise ValueError(f"{PATH} @ {c} is not a prefix of the version @ {COMMIT}")
    runs = runs_of(text)
    taken = {i for i, r in enumerate(runs, 1) if len(r) >= MIN_STEPS}
    if taken != set(RUNS):
        raise ValueError(f"runs with >= {MIN_STEPS} steps: {sorted(taken)}, named: {sorted(RUNS)}")
    for i, run_id in RUNS.items():
        write_rows(out, run_id, runs[i - 1])
        print(f"{run_id}\t{PATH} (run {i} of {len(runs)})\t{len(runs[i - 1])} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
