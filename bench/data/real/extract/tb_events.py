"""TensorBoard event files of TRL runs committed to a public repository -> corpus rows.

Hugging Face's Trainer (TRL's GRPOTrainer) writes every logged value to TensorBoard as a
scalar under the "train/" prefix, keyed by the global step; one event file is one training
process. A corpus row is one step: every scalar logged at that step under its own tag, the
stored value unchanged (TensorBoard keeps float32). The closing summary TRL logs at the last
step (`train_runtime`, `train_loss`, `total_flos`, `train_*_per_second`) is not a step's
metric and is dropped; a tag logged twice at one step must repeat its value. A file is a
corpus run when `train/reward` has at least 20 finite points; the others are listed, not kept.

Source: every event file under alexchilton/CAS_NLP_MODULE4_GRPO's
`lara/4070/output5/wordle-grpo-rtx4070/logs/` (SOURCES.md has the runs).
Usage: python tb_events.py <mirror root, holding owner+name/repo> <out dir>
"""

from __future__ import annotations

import collections
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from _mirror import git, write_rows
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util

REPO = "alexchilton/CAS_NLP_MODULE4_GRPO"
COMMIT = "0a4da0d62f59f1b776904c9174fdd67ebd2bce79"
FOLDER = "lara/4070/output5/wordle-grpo-rtx4070/logs"
SUMMARY = {
    "train/train_runtime",
    "train/train_loss",
    "train/total_flos",
    "train/train_samples_per_second",
    "train/train_steps_per_second",
}
MIN_POINTS = 20


def scalars(path: str) -> dict[int, dict[str, float]]:
    """step -> {tag: value} of one event file's scalar summaries."""
    steps: dict[int, dict[str, float]] = collections.defaultdict(dict)
    for event in EventFileLoader(path).Load():
        for value in event.summary.value if event.HasField("summary") else ():
            if value.HasField("simple_value"):
                number = float(value.simple_value)
            elif value.metadata.plugin_data.plugin_name == "scalars":
                number = float(tensor_util.make_ndarray(value.tensor))
            else:
                continue  # the run's args and model config, logged as text
            if value.tag in SUMMARY:
                continue
            row = steps[event.step]
            if value.tag in row and row[value.tag] != number:
                raise ValueError(f"{path}: {value.tag} logged twice at step {event.step}")
            row[value.tag] = number
    return steps


def main(mirrors: str, out: str) -> None:
    git_dir = Path(mirrors, REPO.replace("/", "+"), "repo")
    files = git(git_dir, "ls-tree", "--name-only", f"{COMMIT}:{FOLDER}").split()
    with tempfile.TemporaryDirectory() as tmp:
        for name in files:
            local = Path(tmp, name)
            blob = ["git", "--git-dir", str(git_dir), "show", f"{COMMIT}:{FOLDER}/{name}"]
            local.write_bytes(subprocess.run(blob, capture_output=True, check=True).stdout)
            steps = scalars(str(local))
            rows = [{"step": step, **steps[step]} for step in sorted(steps)]
            points = sum(math.isfinite(r.get("train/reward", math.nan)) for r in rows)
            run_id = f"c6_caswordle_tb_{name.split('.')[3]}"
            if points < MIN_POINTS:
                print(f"not a run\t{FOLDER}/{name}\t{points} reward points")
                continue
            write_rows(out, run_id, rows)
            print(f"{run_id}\t{REPO}\t{FOLDER}/{name}\t{len(rows)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
