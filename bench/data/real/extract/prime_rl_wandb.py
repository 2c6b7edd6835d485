"""A prime-rl run's two W&B histories (orchestrator and trainer) -> one corpus file.

prime-rl runs its orchestrator (rollouts, rewards, lengths) and its trainer (entropy,
gradient norm, training-inference mismatch) as two processes, each with its own W&B run
on the same `step` axis. A corpus row is the union of the two runs' rows of one step:
the orchestrator's row (every step) and the trainer's where W&B's sampled history kept
one. Cells are read as `wandb_history_csv.rows_of` reads them. W&B's own `_runtime` and
`_timestamp` are dropped (each run has its own); the trainer's names that the
orchestrator also logs (`perf/throughput`, `time/step`, `time/save_ckpt`) get the prefix
`trainer/`. Source (SOURCES.md): HarleyCoops/Qwen3-RailroadEngineer1959-RL's
`wandb_analysis/`, W&B runs 29hn8w98 (orchestrator) and 7nikv4vp (trainer).
Usage: python prime_rl_wandb.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import sys

from _mirror import git, increasing, write_rows
from wandb_history_csv import rows_of

REPO = "HarleyCoops/Qwen3-RailroadEngineer1959-RL"
COMMIT = "45851f1573511028ee06f719d28df8bed42474a1"
RUNS = {  # corpus run -> (orchestrator history, trainer history)
    "c17_prime_dakota_q3_0p6b": (
        "wandb_analysis/29hn8w98/29hn8w98_history.csv",
        "wandb_analysis/7nikv4vp/7nikv4vp_history.csv",
    ),
}
WANDB_OWN = ("_runtime", "_timestamp")


def joined(orchestrator: list[dict], trainer: list[dict]) -> list[dict]:
    """One row per step: the orchestrator's, with the trainer's of that step added."""
    by_step = {r["step"]: {k: v for k, v in r.items() if k not in WANDB_OWN} for r in orchestrator}
    for row in trainer:
        if row["step"] not in by_step:
            raise ValueError(f"trainer step {row['step']} has no orchestrator row")
        out = by_step[row["step"]]
        for name, value in row.items():
            if name == "step" or name in WANDB_OWN:
                continue
            out[f"trainer/{name}" if name in out else name] = value
    return increasing([by_step[s] for s in sorted(by_step)])


def main(git_dir: str, out: str) -> None:
    for run_id, (orch_path, trainer_path) in RUNS.items():
        orch = rows_of(git(git_dir, "show", f"{COMMIT}:{orch_path}"))
        trainer = rows_of(git(git_dir, "show", f"{COMMIT}:{trainer_path}"))
        rows = joined(orch, trainer)
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{REPO}\t{len(rows)} steps ({len(trainer)} with trainer metrics)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
