"""TRL GRPOTrainer console logs committed to public repositories -> corpus rows.

Sources (one run each; the repository's longest committed version of the log):
- JuncyLu/trl_DAPO, `training_logs/20251022_120531/run_terminal.md`: a GRPO (DAPO-style)
  run of Qwen2.5-VL-3B-Instruct on A-OKVQA, captured terminal output.
- Radar-Lei/SCU_TSC, `.docker_run.log`: a GRPO run (after an SFT phase) of a traffic-signal
  control policy, captured Docker output.
- screechingviolet/epic-tikz-diagram-generator, `train_grpo.log`: GRPO of Qwen2-0.5B on
  TikZ from a saved adapter; a copy made page by page (`COPIED`, its length checked).

TRL prints the metrics it logs every `logging_steps` updates as a Python dict on one line,
inside the tqdm progress bar's output. A dict carries no step: the step is the count of the
last progress-bar update printed before it (`N/total [`), checked to advance by one constant
interval and to equal the interval times the dict's rank. Dicts without `reward` are the SFT
phase's (Radar-Lei/SCU_TSC trains SFT first), not GRPO steps. Values unchanged (newer
versions print them as strings, led by `reward`).
Usage: python trl_console.py <mirror root> <out dir> [<copies root: owner+name/commit/path>]
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
    (
        "trl_tikz_grpo_q2_0p5b",
        "screechingviolet/epic-tikz-diagram-generator",
        "0a52775dacaeb862a57887d1eb644448e10c3c99",
        "train_grpo.log",
    ),
]
COPIED = {"screechingviolet/epic-tikz-diagram-generator": 266087}  # repo: characters stored
BUFFERED = {"trl_tikz_grpo_q2_0p5b"}
"""Runs whose stdout reached the log behind the bar: the first 34 dicts follow bar 34."""
BAR = re.compile(r"(\d+)/(\d+) \[")
STEP_DICT = re.compile(r"\{'(?:loss|reward)': [^{}]*\}")


def rows_of(text: str, buffered: bool = False) -> list[dict]:
    """The GRPO step dicts, each at the progress bar's count before it; `buffered`: the
    script's stdout reached the file in blocks behind the bar (stderr), so a dict's step is
    its rank, checked to be one per planned step and never ahead of the bar."""
    rows = []
    for m in STEP_DICT.finditer(text):
        values = ast.literal_eval(m.group(0))
        if "reward" not in values:
            continue
        bars = BAR.findall(text, 0, m.start())
        if not bars:
            raise ValueError("a step dict before any progress bar")
        step = len(rows) + 1 if buffered else int(bars[-1][0])
        if step > int(bars[-1][0]):
            raise ValueError(f"dict {step - 1}: ahead of the progress bar ({bars[-1][0]})")
        rows.append({"step": step, **{k: float(v) for k, v in values.items()}})
    if buffered and len(rows) != (plan := int(BAR.findall(text)[-1][1])):
        raise ValueError(f"{len(rows)} dicts for {plan} planned steps")
    interval = rows[0]["step"]
    for i, row in enumerate(rows):
        if row["step"] != interval * (i + 1):
            raise ValueError(f"dict {i}: step {row['step']}, expected {interval * (i + 1)}")
    return rows


def main(mirrors: str, out: str, copies: str = "") -> None:
    for name, repo, commit, path in RUNS:
        folder = repo.replace("/", "+")
        if repo in COPIED:
            if not copies:
                print(f"skipped\t{name}\tno copies root given")
                continue
            with open(Path(copies, folder, commit, path), encoding="utf-8", newline="") as f:
                text = f.read()  # as stored: the progress bars' carriage returns kept
            if len(text) != COPIED[repo]:
                raise ValueError(f"{path}: {len(text)} characters, stored {COPIED[repo]}")
        else:
            text = git(str(Path(mirrors, folder, "repo")), "show", f"{commit}:{path}")
        rows = rows_of(text, buffered=name in BUFFERED)
        write_rows(out, name, rows)
        print(f"{name}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
