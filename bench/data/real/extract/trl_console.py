"""TRL GRPOTrainer console logs committed to public repositories -> corpus rows.

Sources (one run each; the repository's longest committed version of the log):
- JuncyLu/trl_DAPO, `training_logs/20251022_120531/run_terminal.md`: a GRPO (DAPO-style)
  run of Qwen2.5-VL-3B-Instruct on A-OKVQA, captured terminal output.
- Radar-Lei/SCU_TSC, `.docker_run.log`: a GRPO run (after an SFT phase) of a traffic-signal
  control policy, captured Docker output.

TRL prints the metrics it logs every `logging_steps` updates as a Python dict on one line,
inside the tqdm progress bar's output. A dict carries no step: the step is the count of the
last progress-bar update printed before it (`N/total [`), checked to advance by one constant
interval and to equal the interval times the dict's rank. Dicts without `reward` are the SFT
phase's (Radar-Lei/SCU_TSC trains SFT first) and are not GRPO steps. Values unchanged.
Usage: python trl_console.py <mirror root, holding owner+name/repo> <out dir>
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from _mirror import git, write_rows

RUNS = [  # (corpus id, repository, commit, path)
    (
        "trl_juncy_dapo_vl3b_aokvqa",
        "JuncyLu/trl_DAPO",
        "fe981fe20ec2ef7784415a4b6d0ae9c851c4f26b",
        "training_logs/20251022_120531/run_terminal.md",
    ),
    (
        "trl_scutsc_grpo_tsc",
        "Radar-Lei/SCU_TSC",
        "3bc29139bb4e794b6c3b67c0add5c20ed1585531",
        ".docker_run.log",
    ),
]
BAR = re.compile(r"(\d+)/(\d+) \[")
STEP_DICT = re.compile(r"\{'loss': [^{}]*\}")


def rows_of(text: str) -> list[dict]:
    rows = []
    for m in STEP_DICT.finditer(text):
        values = ast.literal_eval(m.group(0))
        if "reward" not in values:
            continue
        bars = BAR.findall(text, 0, m.start())
        if not bars:
            raise ValueError("a step dict before any progress bar")
        step = int(bars[-1][0])
        rows.append({"step": step, **{k: float(v) for k, v in values.items()}})
    interval = rows[0]["step"]
    for i, row in enumerate(rows):
        if row["step"] != interval * (i + 1):
            raise ValueError(f"dict {i}: step {row['step']}, expected {interval * (i + 1)}")
    return rows


def main(mirrors: str, out: str) -> None:
    for name, repo, commit, path in RUNS:
        git_dir = Path(mirrors, repo.replace("/", "+"), "repo")
        text = git(str(git_dir), "show", f"{commit}:{path}")
        rows = rows_of(text)
        write_rows(out, name, rows)
        print(f"{name}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
