"""TRL GRPOTrainer console output committed to public repositories -> corpus rows.

Sources (one run each; SOURCES.md has each file, commit and run): RaghuHemadri/
openenv_hack `output1.txt`, Panacea-OpenEnv/Panacea-OpenEnv `logs/grpo_run_1.log`,
Gouravbirwaz/meta-hackathon-final-idea `agent_traing_log.log`. TRL prints one dict per
logged step (`logging_steps` 1 here); the closing `train_runtime` dict is not a step. A
terminal that hard-wrapped its lines splits a dict anywhere, so line breaks inside a dict
are removed before parsing. With no step in the dict, the step is its rank, checked by the
dict count against the run's steps, by the progress-bar count printed after it where one
survives, or by TRL's linear learning-rate schedule. Every row must add up: `reward`
equals the sum of its `rewards/*/mean` parts within the printed digits (a token broken by
the wrap would upset it).
Usage: python trl2_console.py <mirror root, holding owner+name/repo> <out dir>
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from _mirror import git, write_rows

RUNS = [  # (corpus id, repository, commit, path, planned steps, step check)
    (
        "trl2_watchdog_qwen3_8b",
        "RaghuHemadri/openenv_hack",
        "4a2bf3d61bd45e1579d5d794e31db53ab95bb6c6",
        "output1.txt",
        200,
        "summary",
    ),
    (
        "trl2_panacea_grpo_run1",
        "Panacea-OpenEnv/Panacea-OpenEnv",
        "3118c8b2795523afbccf155f412bc44dad838152",
        "logs/grpo_run_1.log",
        300,
        "bar",
    ),
    (
        "trl2_kisan_grpo",
        "Gouravbirwaz/meta-hackathon-final-idea",
        "19c7a2fb260025cc8bdcca8cf6908e1c326a94d8",
        "agent_traing_log.log",
        60,
        ("lr", 1e-5, 6),
    ),
]
STEP_DICT = re.compile(r"\{'loss': [^{}]*\}")
BAR = re.compile(r"(\d+)/(\d+) \[")


def scheduled_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """TRL's linear schedule as logged at `step` (after `step - 1` scheduler steps)."""
    n = step - 1
    return peak * n / warmup if n < warmup else peak * (total - n) / (total - warmup)


def rows_of(text: str, planned: int, check: str | tuple[str, float, int]) -> list[dict]:
    matches = list(STEP_DICT.finditer(text))
    dicts = [ast.literal_eval(m.group(0).replace("\n", "")) for m in matches]
    if len(dicts) != planned or (check == "summary" and "{'train_runtime'" not in text):
        raise ValueError(f"{len(dicts)} step dicts, expected {planned} (and a summary)")
    rows = []
    for rank, (m, values) in enumerate(zip(matches, dicts, strict=True), start=1):
        if check == "bar":
            bar = BAR.search(text, m.end())
            if bar is None or (int(bar.group(1)), int(bar.group(2))) != (rank, planned):
                raise ValueError(f"dict {rank}: next progress bar {bar and bar.group(0)}")
        elif check[0] == "lr":
            lr = scheduled_lr(rank, check[1], check[2], planned)
            if abs(float(values["learning_rate"]) - lr) > 1e-12:
                raise ValueError(f"dict {rank}: learning_rate {values['learning_rate']} != {lr}")
        if "reward" in values:
            row = {k: float(v) for k, v in values.items()}
            parts = sum(
                v for k, v in row.items() if k.startswith("rewards/") and k.endswith("/mean")
            )
            if abs(row["reward"] - parts) > 2e-3:  # the printed parts add up to the total
                raise ValueError(f"dict {rank}: reward {row['reward']} != sum of parts {parts}")
            rows.append({"step": rank, **row})
    return rows


def main(mirrors: str, out: str) -> None:
    for name, repo, commit, path, planned, check in RUNS:
        git_dir = Path(mirrors, repo.replace("/", "+"), "repo")
        text = git(str(git_dir), "show", f"{commit}:{path}")
        rows = rows_of(text, planned, check)
        write_rows(out, name, rows)
        print(f"{name}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
