"""verl's console log, as a training script's stdout saved to a file -> corpus rows.

Source: uqcxu9/qwen2.5_300step_NEW_CONSIS_RESULT (verl `main_ppo` GRPO runs of an economic
agent, SOURCES.md), `logs/*.log`. verl's console logger prints one line per step, `step:N -
name:value - ...`, here behind Ray's `(TaskRunner pid=N)` prefix and ANSI colour codes,
which are stripped; the values are parsed as in verl_wandb_console.py (Python reprs,
`np.float64(x)` unwrapped), unchanged, non-numbers dropped. The lines are not cut (no W&B
capture). `RUNS` names each run once (the copies beside it); a listed file whose scores
are a prefix of another listed file's is a copy or a resumed run, and stops the script.
Usage: python verl_console.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import re
import sys

import verl_wandb_console
from _mirror import git, increasing, write_rows

REPO = "uqcxu9/qwen2.5_300step_NEW_CONSIS_RESULT"
COMMIT = "96eca073e807f7aac8d9c1f581515f53e25f5a0b"
RUNS = [  # (path, run id); copies not listed: logs/train_new_reward.log (= train_v2_300steps),
    # RL/train.log (= logs/rl_train.log)
    ("logs/grpo_train.log", "v8_econagent_grpo_54"),
    ("logs/train_300steps.log", "v8_econagent_300steps"),
    ("logs/train_v2_300steps.log", "v8_econagent_v2"),
    ("logs/train_v3_reward.log", "v8_econagent_v3"),
    ("logs/train_v4_reward.log", "v8_econagent_v4"),
    ("logs/train_v5_reward.log", "v8_econagent_v5"),
    ("logs/train_v6_reward.log", "v8_econagent_v6"),
    ("logs/training_v9.log", "v8_econagent_v9"),
    ("logs/rl_train.log", "v8_econagent_rl_train"),
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_PREFIX = re.compile(r"^\(\w+ pid=\d+\) ", re.M)


def rows_of(text: str) -> list[dict]:
    return increasing(verl_wandb_console.rows_of(RAY_PREFIX.sub("", ANSI.sub("", text)), cut=None))


def main(git_dir: str, out: str) -> None:
    runs = {path: rows_of(git(git_dir, "show", f"{COMMIT}:{path}")) for path, _ in RUNS}
    scores = {p: [r.get("critic/score/mean") for r in rows] for p, rows in runs.items()}
    for path, run_id in RUNS:
        mine = scores[path]
        longer = [q for q, s in scores.items() if q != path and s[: len(mine)] == mine]
        if longer:
            raise ValueError(f"{path}: a prefix of {longer[0]}")
        write_rows(out, run_id, runs[path])
        print(f"{run_id}\t{REPO}\t{path}\t{len(runs[path])} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
