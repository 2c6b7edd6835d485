"""TRL GRPOTrainer console logs whose progress bar cannot give the step -> corpus rows.

Sources (read at the commit named here from a fetched mirror; their runs in SOURCES.md):
- wallacexuhanxiao/FinQA-tool-calling-GRPO-GSPO, `logs/agent/train_stage7_grpo_long2400_r32.log`.
- aryan-gupta7/round2_sclr, `training/{l1_final,first_l2,first_completion_sample}.txt`.
- Brennen-Hill/Small-LLM-RLVR-Optimization, two runs' W&B-captured `output.log`: GRPO
  after an SFT phase in the same process (its dicts carry no `reward` and are not steps).

TRL prints the metrics it logs every `logging_steps` updates as a Python dict on one line.
In these logs the tqdm bar cannot date a dict (`trl_console.py` reads the step from it):
FinQA's is flushed in blocks (eleven dicts follow one count), round2_sclr's count lags a
dict by one in places, W&B kept one count per phase of Brennen-Hill's. The step is
`logging_steps` x the dict's rank instead, checked two ways: the log holds exactly
max_steps / logging_steps dicts and the closing `train_runtime` summary, and each logged
`learning_rate` equals the one the linear schedule gives at that step (TRL logs the rate
after step - 1 scheduler steps). Values unchanged.
Usage: python trl_console_ranked.py <owner/name> <mirror git dir> <out dir>
"""

from __future__ import annotations

import ast
import re
import sys

from _mirror import git, write_rows

SCLR = ("aryan-gupta7/round2_sclr", "1bf99d9faae5dca7d4ccd71c61410775268e616d")
RLVR = ("Brennen-Hill/Small-LLM-RLVR-Optimization", "40ee42c327a38615e9d4777ee9a372ce25e19b26")
_WANDB = "stabalization_experiments/wandb/run-"
RUNS = [  # (repository, commit, path, run id, logging_steps, max_steps, peak lr, warmup)
    (
        "wallacexuhanxiao/FinQA-tool-calling-GRPO-GSPO",
        "b5706ab865f5ec919be7c623a2b11eb44ae7cc05",
        "logs/agent/train_stage7_grpo_long2400_r32.log",
        "p4_finqa_grpo_qwen7b_long2400",
        1,
        2400,
        2e-7,
        0,
    ),
    (*SCLR, "training/l1_final.txt", "trl_sclr_recall_l1_final", 1, 200, 5e-6, 10),
    (*SCLR, "training/first_l2.txt", "trl_sclr_recall_first_l2", 1, 200, 5e-6, 10),
    (*SCLR, "training/first_completion_sample.txt", "trl_sclr_recall_first", 1, 100, 5e-6, 10),
    (
        *RLVR,
        f"{_WANDB}20251210_212520-o5oag64c/files/output.log",
        "c9_rlvr_code_bleu",
        10,
        2142,
        1e-6,
        0,
    ),
    (
        *RLVR,
        f"{_WANDB}20251211_200102-sv3uzmiq/files/output.log",
        "c9_rlvr_code_multi",
        10,
        2142,
        9.8e-7,
        0,
    ),
]
STEP_DICT = re.compile(r"\{'loss': [^{}]*\}")


def scheduled_lr(step: int, max_steps: int, lr: float, warmup: int) -> float:
    n = step - 1
    return lr * n / warmup if n < warmup else lr * (max_steps - n) / (max_steps - warmup)


def rows_of(text: str, every: int, max_steps: int, lr: float, warmup: int) -> list[dict]:
    dicts = [ast.literal_eval(m.group(0)) for m in STEP_DICT.finditer(text)]
    dicts = [d for d in dicts if "reward" in d]  # not an SFT phase's
    if len(dicts) != max_steps // every or "'train_runtime'" not in text:
        raise ValueError(f"{len(dicts)} step dicts, expected {max_steps // every}")
    rows = [
        {"step": every * (i + 1), **{k: float(v) for k, v in d.items()}}
        for i, d in enumerate(dicts)
    ]
    for r in rows:
        expected = scheduled_lr(r["step"], max_steps, lr, warmup)
        if abs(r["learning_rate"] - expected) > 1e-6 * lr:
            raise ValueError(f"step {r['step']}: learning_rate {r['learning_rate']} off schedule")
    return rows


def main(repo: str, git_dir: str, out: str) -> None:
    runs = [run for run in RUNS if run[0] == repo]
    if not runs:
        raise SystemExit(f"{repo}: not one of {sorted({run[0] for run in RUNS})}")
    for _, commit, path, run_id, every, max_steps, lr, warmup in runs:
        text = git(git_dir, "show", f"{commit}:{path}")
        rows = rows_of(text, every, max_steps, lr, warmup)
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
