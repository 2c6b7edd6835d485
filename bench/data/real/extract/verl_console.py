"""verl's console log, as a training script's stdout saved to a file -> corpus rows.

Sources (SOURCES.md): uqcxu9/qwen2.5_300step_NEW_CONSIS_RESULT (verl `main_ppo` GRPO runs of
an economic agent), `logs/*.log`; Zhukewen321/dual-agent-finqa-reasoning (a verl GRPO run of
a FinQA agent), `train_output.log`; eric-haibin-lin/verl-data (verl's own PPO baselines on
GSM8K, December 2024), `gsm8k/*.log`; yushengsu-thu/verl_training_log and
diqiuzhuanzhuan/verldata (baseline logs verl's `docs/algo/baseline.md` links: GRPO and PPO
of deepseek-llm-7b-chat, GPG of Qwen2-7B-Instruct), `*/*.log`. verl's console logger prints
one line per step, `step:N - name:value - ...` (an evaluation before training may be a line
of its own at step 0, joined to that step's row), behind Ray's `(TaskRunner pid=N)` prefix
and ANSI colour codes, which are stripped; the values are parsed as in verl_wandb_console.py
(Python reprs, `np.float64(x)` unwrapped), unchanged, non-numbers dropped. The lines are not
cut (no W&B capture). `RUNS` names each run once (the copies beside it); a listed file whose
scores are a prefix of another listed file's of the same repository is a copy or a resumed
run, and stops the script.
Usage: python verl_console.py <mirror root, holding owner+name/repo> <out dir>
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import verl_wandb_console
from _mirror import git, increasing, same_step_joined, write_rows

_ECON = ("uqcxu9/qwen2.5_300step_NEW_CONSIS_RESULT", "96eca073e807f7aac8d9c1f581515f53e25f5a0b")
_FINQA = ("Zhukewen321/dual-agent-finqa-reasoning", "2ff072c9b652812482505be49cd8332a164b6ad7")
_BASELINES = ("eric-haibin-lin/verl-data", "f07af3291bd1c87fe8a7301cc3b883c0d2572720")
_YUSHENG = ("yushengsu-thu/verl_training_log", "deb1507ca0740580d2019e7150d08edf8dd6ca35")
_DIQIU = ("diqiuzhuanzhuan/verldata", "42e31cd07ea08b66e709a74e9aed2bd740589c34")
_QWEN = "gsm8k/Qwen2.5-0.5B"
RUNS = [  # ((repo, commit), path, run id); copies not listed: uqcxu9's
    # logs/train_new_reward.log (= train_v2_300steps), RL/train.log (= logs/rl_train.log)
    (_ECON, "logs/grpo_train.log", "v8_econagent_grpo_54"),
    (_ECON, "logs/train_300steps.log", "v8_econagent_300steps"),
    (_ECON, "logs/train_v2_300steps.log", "v8_econagent_v2"),
    (_ECON, "logs/train_v3_reward.log", "v8_econagent_v3"),
    (_ECON, "logs/train_v4_reward.log", "v8_econagent_v4"),
    (_ECON, "logs/train_v5_reward.log", "v8_econagent_v5"),
    (_ECON, "logs/train_v6_reward.log", "v8_econagent_v6"),
    (_ECON, "logs/training_v9.log", "v8_econagent_v9"),
    (_ECON, "logs/rl_train.log", "v8_econagent_rl_train"),
    (_FINQA, "train_output.log", "c9_finqa_dualagent_grpo"),
    (_BASELINES, f"{_QWEN}-bsz256_2-prompt1024-resp512-0.567.log", "c10_verlppo_q05b_r512"),
    (_BASELINES, f"{_QWEN}-bsz256_2-prompt512-resp256-0.538.log", "c10_verlppo_q05b_r256"),
    (
        _BASELINES,
        "gsm8k/gemma-2-2b-it-ppo-bsz512_4-prompt1024-resp-512-0.640.log",
        "c10_verlppo_gemma2_2b",
    ),
    (_YUSHENG, "gsm8k/grpo_run_deepseek7b_llm.log", "c16_verlbase_grpo_ds7b"),
    (_YUSHENG, "gsm8k/ppo_run_deepseek7b_llm.log", "c16_verlbase_ppo_ds7b"),
    (_DIQIU, "run_logs/qwen2-7b_math.log", "c16_verlbase_gpg_q2_7b"),
    (_DIQIU, "run_logs/qwen2-7b_math_megatron.log", "c16_verlbase_gpg_q2_7b_megatron"),
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_PREFIX = re.compile(r"^\(\w+ pid=\d+\) ", re.M)


def rows_of(text: str) -> list[dict]:
    lines = verl_wandb_console.rows_of(RAY_PREFIX.sub("", ANSI.sub("", text)), cut=None)
    return increasing(same_step_joined(lines))


def main(mirrors: str, out: str) -> None:
    runs = {}
    for (repo, commit), path, _ in RUNS:
        git_dir = Path(mirrors, repo.replace("/", "+"), "repo")
        runs[repo, path] = rows_of(git(git_dir, "show", f"{commit}:{path}"))
    scores = {key: [r.get("critic/score/mean") for r in rows] for key, rows in runs.items()}
    for (repo, commit), path, run_id in RUNS:
        mine = scores[repo, path]
        longer = [
            q for (r, q), s in scores.items() if r == repo and q != path and s[: len(mine)] == mine
        ]
        if longer:
            raise ValueError(f"{path}: a prefix of {longer[0]}")
        write_rows(out, run_id, runs[repo, path])
        print(f"{run_id}\t{repo}\t{path}\t{len(runs[repo, path])} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
