"""Sunshine535/nips-grpo-dynamics: TRL console logs of the rho sweep -> corpus rows.

Each run's console log (`results/logs/exp1a/rho*.log`, `results/logs/exp2/*.log`) holds the
dicts TRL's GRPOTrainer prints every `logging_steps` (5) optimizer steps, one per line, as
Python literals; the run's closing `{'train_runtime': ...}` summary is not a step and is
dropped. The dicts carry no step, so the step is 5 x their rank, checked two ways: a run
must print exactly 40 of them (`max_steps` 200) and its summary, and each logged
`learning_rate` must be the one the config's schedule (1e-4, linear warmup over 10 steps,
linear decay to 0 at step 200) gives at that step. Values unchanged.
A run whose rewards are a prefix of another's would be skipped: none is.
Usage: python nips_grpo_dynamics.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

COMMIT = "2cd2efce1c0622bfd77899c555357107706a0c54"
FOLDERS = ("results/logs/exp1a", "results/logs/exp2")
LOGGING_STEPS, MAX_STEPS, LR, WARMUP = 5, 200, 1e-4, 10
STEP_DICT = re.compile(r"\{'loss': [^{}]*\}")


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def scheduled_lr(step: int) -> float:
    """TRL logs the rate after `step - 1` scheduler steps."""
    n = step - 1
    return LR * n / WARMUP if n < WARMUP else LR * (MAX_STEPS - n) / (MAX_STEPS - WARMUP)


def rows_of(text: str) -> list[dict]:
    dicts = [ast.literal_eval(m.group(0)) for m in STEP_DICT.finditer(text)]
    if len(dicts) != MAX_STEPS // LOGGING_STEPS or "{'train_runtime'" not in text:
        raise ValueError(f"{len(dicts)} step dicts, expected {MAX_STEPS // LOGGING_STEPS}")
    rows = [
        {"step": LOGGING_STEPS * (i + 1), **{k: float(v) for k, v in d.items()}}
        for i, d in enumerate(dicts)
    ]
    for r in rows:
        if abs(r["learning_rate"] - scheduled_lr(r["step"])) > 1e-12:
            raise ValueError(f"step {r['step']}: learning_rate {r['learning_rate']} off schedule")
    return rows


def main(git_dir: str, out: str) -> None:
    paths = [
        p
        for p in _git(git_dir, "ls-tree", "-r", "--name-only", COMMIT, *FOLDERS).split()
        if p.endswith(".log") and "/eval_" not in p
    ]
    runs = {p: rows_of(_git(git_dir, "show", f"{COMMIT}:{p}")) for p in paths}
    rewards = {p: [r["reward"] for r in rows] for p, rows in runs.items()}
    for path, rows in runs.items():
        mine = rewards[path]
        longer = [q for q, r in rewards.items() if q != path and r[: len(mine)] == mine]
        if longer:
            print(f"skip {path}: a prefix of {longer[0]}")
            continue
        stem = Path(path).stem.replace(".", "")
        name = f"nipsgrpo_{Path(path).parent.name}_{stem}"
        Path(out, f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{name}\t{path}\t{len(rows)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
