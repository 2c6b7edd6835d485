"""ShibukiZero/assignment5-alignment: ch7 GRPO runs' metrics.jsonl -> one row per GRPO step.

The source writes typed rows per GRPO step: `rollout` (one), `train` (one per optimizer
update), `eval` (every 5 steps) and `step`. A corpus row holds the rollout's numbers, the
numbers of the step's last optimizer update, and the eval's numbers under `eval/`; values
unchanged, strings, booleans and nulls dropped. Runs whose rollout rewards and evals are
identical to a run already taken (one reference run copied into several experiment
folders) are skipped. The repository's history holds earlier executions of the same
experiments (reruns replaced them at the same paths): a version whose rollout rewards are
not a prefix of a run already taken (nor the reverse) is a run of its own, taken in its
longest committed version and named with its commit. Usage:
python cs336_shibuki.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COMMIT = "40e01e28650467be81a77b65cfbc1c793b8279be"
ROOT = "artifacts/experiments/main/ch7"
RUNS = [  # (experiment, run) in the order they are taken; duplicates are skipped
    ("grpo_off_policy_sweep", "on_policy_reference_e1_tb256_std_norm"),
    ("grpo_baselines", "no_baseline"),
    ("grpo_baselines", "reinforce_with_baseline"),
    ("grpo_group_standard_deviation", "no_std_normalization"),
    ("grpo_group_standard_deviation", "std_normalization"),
    ("grpo_length_normalization", "batch_token_mean"),
    ("grpo_length_normalization", "masked_mean"),
    ("grpo_length_normalization", "masked_normalize"),
    ("grpo_off_policy_clip_ablation", "GRPO-Clip_0.20_0.20_(e2_tb256)"),
    ("grpo_off_policy_clip_ablation", "GRPO-Clip_0.20_0.28_(e2_tb256)"),
    ("grpo_off_policy_clip_ablation", "GRPO-No-Clip_(e2_tb256)"),
    ("grpo_off_policy_sweep", "broad_e16_tb256"),
    ("grpo_off_policy_sweep", "broad_e2_tb128"),
    ("grpo_off_policy_sweep", "broad_e2_tb256"),
    ("grpo_off_policy_sweep", "broad_e2_tb32"),
    ("grpo_off_policy_sweep", "broad_e2_tb64"),
    ("grpo_off_policy_sweep", "broad_e4_tb128"),
    ("grpo_off_policy_sweep", "broad_e4_tb256"),
    ("grpo_off_policy_sweep", "broad_e8_tb256"),
    ("grpo_off_policy_sweep", "focused_e2_tb128"),
    ("grpo_off_policy_sweep", "focused_e2_tb256"),
    ("grpo_off_policy_sweep", "focused_e4_tb256"),
    ("grpo_prompt_ablation", "question_only"),
    ("grpo_prompt_ablation", "r1_zero_reference"),
    ("grpo_train_loop", "grpo_on_policy_lr1e-5"),
    ("leaderboard", "final_on_policy_lr4e-5_400_full_eval"),
    ("sft_kl_grpo", "direct_grpo_lr4e-5"),
    ("sft_kl_grpo", "grpo_sft256_step100_kl0p01_190"),
]


def _numbers(row: dict, prefix: str = "") -> dict:
    return {
        prefix + k: v
        for k, v in row.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k != "grpo_step"
    }


def rows_of(text: str) -> list[dict]:
    steps: dict[int, dict] = {}
    for line in text.splitlines():
        rec = json.loads(line)
        kind, step = rec.get("type"), rec.get("grpo_step")
        if step is None or kind not in ("rollout", "train", "eval"):
            continue
        row = steps.setdefault(int(step), {})
        if kind == "eval":
            row.update(_numbers(rec, "eval/"))
        else:  # a later train row of the step replaces an earlier one
            row.update(_numbers(rec))
    return [{"step": s, **steps[s]} for s in sorted(steps)]


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def _rewards(rows: list[dict]) -> tuple:
    return tuple(r["reward"] for r in rows if "reward" in r)


def _same_run(a: tuple, b: tuple) -> bool:
    n = min(len(a), len(b))
    return n >= 2 and a[:n] == b[:n]


def _history(git_dir: str) -> list[tuple[str, str, str]]:
    """(commit, path, blob) of every committed version of a ch7 run log, oldest first."""
    commits = _git(git_dir, "log", "--all", "--reverse", "--date-order", "--format=%H").split()
    seen, out = set(), []
    for c in commits:
        for line in _git(git_dir, "ls-tree", "-r", c).splitlines():
            meta, path = line.split("\t", 1)
            blob = meta.split()[2]
            log = "/ch7/" in path and path.endswith("/metrics.jsonl")
            if log and blob not in seen and "/sft_256_step100/" not in path:  # that one: SFT
                seen.add(blob)
                out.append((c, path, blob))
    return out


def main(git_dir: str, out: str) -> None:
    seen: dict[tuple, str] = {}
    for exp, run in RUNS:
        path = f"{ROOT}/{exp}/runs/{run}/metrics.jsonl"
        text = subprocess.run(
            ["git", "-C", git_dir, "show", f"{COMMIT}:{path}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = rows_of(text)
        key = tuple((r["step"], r.get("reward"), r.get("eval/reward")) for r in rows)
        name = "cs336shibuki_" + run.lower().replace("(", "").replace(")", "").replace(".", "")
        if key in seen:
            print(f"skip {exp}/{run}: same as {seen[key]}")
            continue
        seen[key] = name
        Path(out, f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{name}\t{path}\t{len(rows)} steps\t{COMMIT}")
    taken = [
        _rewards(rows_of(_git(git_dir, "show", f"{COMMIT}:{ROOT}/{e}/runs/{r}/metrics.jsonl")))
        for e, r in RUNS
    ]
    older: list[tuple[str, str, list[dict]]] = []  # (commit, path, rows), one per run
    for commit, path, blob in _history(git_dir):
        rows = rows_of(_git(git_dir, "cat-file", "-p", blob))
        rewards = _rewards(rows)
        if len(rewards) < 20 or any(_same_run(rewards, t) for t in taken):
            continue
        same = [i for i, (_, _, o) in enumerate(older) if _same_run(_rewards(o), rewards)]
        if not same:
            older.append((commit, path, rows))
        elif len(rows) > len(older[same[0]][2]):
            older[same[0]] = (commit, path, rows)
    for commit, path, rows in older:
        run = path.split("/runs/")[1].split("/")[0]
        name = "cs336shibuki_" + run.lower().replace("(", "").replace(")", "").replace(".", "")
        name += "_" + commit[:8]
        Path(out, f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{name}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
