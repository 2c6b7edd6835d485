"""W&B histories exported in long form (`run_name,metric,step,value`, one file per figure) ->
one corpus file per run.

Source (SOURCES.md): garg-aayush/building-from-scratch, `grpo/results/*/*_data.csv`, the
histories of its GRPO ablations, one CSV per plot. A run plotted in several figures is in
several files, each with some of its metrics: a run is the union of its rows, and a value
two files give for one (run, metric, step) must be the same. A GRPO step with several
optimizer steps (off-policy runs: epochs × rollout batch / train batch) logs each under the
GRPO step: the row holds their mean, and their count must be that product (`UPDATES`). Runs
with fewer than 20 evaluations are not taken (the corpus's floor for an outcome).
Usage: python wandb_long_csv.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import csv
import io
import sys
from collections import defaultdict

from _mirror import git, write_rows

REPO, COMMIT = "garg-aayush/building-from-scratch", "714e4ca1f7923d9e603cf2c7567a026971cc216d"
FOLDER = "grpo/results"
OUTCOME, FLOOR = "eval/reward", 20
UPDATES = {"off_policy_full_e1_tb128_ga32": 2, "off_policy_full_e2_tb256_ga64": 2}
"""Optimizer steps per GRPO step where it is not 1: epochs × rollout batch (256) / train
batch, from the run's config (`grpo/configs/off_policy_sweep/*.yaml`)."""


def histories(files: dict[str, str]) -> dict[str, dict[str, dict[int, list[float]]]]:
    """run -> metric -> step -> the values logged there, each file's rows added once."""
    runs: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    for path, text in sorted(files.items()):
        mine: dict[tuple[str, str, int], list[float]] = defaultdict(list)
        for row in csv.DictReader(io.StringIO(text)):
            mine[row["run_name"], row["metric"], int(row["step"])].append(float(row["value"]))
        for (run, metric, step), values in mine.items():
            seen = runs[run][metric].setdefault(step, values)
            if seen != values:
                raise ValueError(f"{path}: {run} {metric} at {step}: {values}, elsewhere {seen}")
    return runs


def rows_of(run: str, metrics: dict[str, dict[int, list[float]]]) -> list[dict]:
    updates = UPDATES.get(run, 1)
    steps: dict[int, dict] = defaultdict(dict)
    for metric, by_step in metrics.items():
        for step, values in by_step.items():
            want = 1 if metric.startswith("eval/") else updates
            if len(values) != want:
                raise ValueError(f"{run} {metric} at {step}: {len(values)} values, not {want}")
            steps[step][metric] = sum(values) / len(values)
    return [{"step": s, **steps[s]} for s in sorted(steps)]


def main(git_dir: str, out: str) -> None:
    paths = git(git_dir, "ls-tree", "-r", "--name-only", COMMIT, FOLDER).split()
    files = {p: git(git_dir, "show", f"{COMMIT}:{p}") for p in paths if p.endswith("_data.csv")}
    for run, metrics in sorted(histories(files).items()):
        evals = len(metrics.get(OUTCOME, {}))
        if evals < FLOOR:
            print(f"{run}\tnot taken: {evals} evaluations")
            continue
        rows = rows_of(run, metrics)
        run_id = "c10_gargfs_" + run.replace(".", "p").replace("-", "m")
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{REPO}\t{run}\t{len(rows)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
