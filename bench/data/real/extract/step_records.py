"""Per-step records a training loop writes itself -> corpus rows: a JSON list of one dict per
logged step (`.json`), or one JSON object a line (`.jsonl`).

A corpus row is one record with its numeric values unchanged (strings, booleans and nulls
dropped); the record must carry its step under `step`, strictly increasing, except that an
evaluation written as a record of its own is joined to its step's training record; verl's
file logger writes `{"step": N, "data": {...}}`, whose `data` is the record. Sources
(`SOURCES`, each read at the commit named there; SOURCES.md has each run): own GRPO loops
(upul/grpo-from-scratch, rohunagrawal/reward-hacking-entropy on the Tinker SDK,
Rohanjain2312/grpo-reward-hacking-demo), tinker-cookbook's RL loop (arvindcr4/tinker-rl-lab,
sushantmehta-code/ and joanvelja/tinker-cookbook), verl 0.7.1 GRPO runs
(agentic-backdoor/agentic-backdoor), CS336 GRPO and DAPO loops (desirepathh/, whose step is
`iteration`, lenardst/ and sandyhu533/assignment5-alignment). Sources with no snapshot
were copied page by page, each copy's length checked (`COPY_CHARS`).
Usage: python step_records.py <owner/name> <mirror git dir, or folder of copies> <out dir>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _mirror import git, increasing, numeric, same_step_joined, write_rows

_DESIRE_FIRST = "d4ef575b73c4278689651f2f7fd0e05b163e33f7"  # the first GRPO run, overwritten
_SANDY_ON = "881cf6746162b809fdf8b21ecc3710e549ef763a"  # the on-policy runs' own commit
_SANDY = [  # (folder under grpo_runs/, run id after c12_sandy_, stored characters[, commit])
    ("offpolicy/clip/2026-06-14_23-51-35/seed_0", "offpolicy_clip", 63348),
    ("offpolicy/gspo/2026-06-15_00-12-35/seed_0", "offpolicy_gspo", 63302),
    ("offpolicy/naive/2026-06-14_23-06-02/seed_0", "offpolicy_naive", 61991),
    ("offpolicy/noclip/2026-06-14_23-29-17/seed_0", "offpolicy_noclip", 61957),
    ("onpolicy/lr_sweep/lr_3e-5/2026-06-14_06-50-29/seed_0", "lr3em5", 46194, _SANDY_ON),
    ("onpolicy/lr_sweep/lr_3e-6/2026-06-14_06-38-25/seed_0", "lr3em6", 52917, _SANDY_ON),
    ("onpolicy/prompt/question_only/2026-06-14_07-07-00/seed_0", "question_only", 50133, _SANDY_ON),
    (
        "onpolicy/prompt/r1_zero_three_shot/2026-06-14_07-26-04/seed_0",
        "r1_zero_3shot",
        64149,
        _SANDY_ON,
    ),
    ("onpolicy/standard/2026-06-14_05-58-54/seed_0", "standard_seed0", 59021, _SANDY_ON),
    ("onpolicy/standard/2026-06-14_05-58-54/seed_1", "standard_seed1", 60585, _SANDY_ON),
    ("onpolicy/variants/Dr_GRPO/2026-06-14_22-07-48/seed_0", "dr_grpo", 58146),
    ("onpolicy/variants/GRPO_constant/2026-06-14_21-49-05/seed_0", "grpo_constant", 61362),
    ("onpolicy/variants/MaxRL/2026-06-14_22-43-41/seed_0", "maxrl", 61005),
    ("onpolicy/variants/RFT/2026-06-14_22-26-16/seed_0", "rft", 58207),
]
_ROHUN = [  # (folder under outputs/, run id after c14_rohun_)
    ("rl-leetcode-entropy/llama-3.2-3b/g/entropy_bin_3", "entbin3_g"),
    *(
        (
            f"rl-leetcode/llama-3.2-3b/{level}-g-llmjudge-{judge}",
            f"{level.lower()}_judge_{judge.replace('-', '_')}",
        )
        for level in ("Easy", "Hard", "Medium")
        for judge in ("llama-small", "long")
    ),
    ("rl-leetcode/llama-3.2-3b/Easy-g-llmjudge-qwen", "easy_judge_qwen"),
    *(
        (f"rl-leetcode/meta-llama/Llama-3.2-3B/{reward}/{level}", f"{reward}_{level.lower()}")
        for reward in ("100f_g", "f_g", "g")
        for level in ("Easy", "Hard", "Medium")
    ),
]
_ROHANJAIN = {"baseline": 27339, "fixed_kl": 27192, "fixed_cap": 29805}  # run: characters
SOURCES = {  # repository -> (commit, [(path, run id) or (path, run id, its own commit)])
    "upul/grpo-from-scratch": (
        "8f5bf898892fbf9f4caf2c080ac1ef3a9ba340eb",
        [("results/history.json", "p4_upulgrpo_qwen15b_gsm8k")],
    ),
    "arvindcr4/tinker-rl-lab": (
        "21a99ef766543a1ca86bfbad188445d3596ea73c",
        [("experiments/results/arithmetic_metrics.jsonl", "p4_tinkerlab_arithmetic")],
    ),
    "agentic-backdoor/agentic-backdoor": (
        "99799a294a613bcf0abfd33eef4e7f7a71a25c2f",
        [
            ("rl-log/rl-grpo-qwen3-1.7B-clean.jsonl", "c7_agbackdoor_grpo_q3_1p7b_clean"),
            ("rl-log/rl-debug-run1.jsonl", "c7_agbackdoor_grpo_q3_1p7b_debug1"),
        ],
    ),
    "sushantmehta-code/tinker-cookbook": (
        "ce374943bea7dbf3436d67b2df3741803625cf49",
        [
            ("logs_v2/metrics.jsonl", "p5_tinkerrlvr_q3_4b_v2"),
            ("logs_v2p3/metrics.jsonl", "p5_tinkerrlvr_q3_4b_v2p3"),
            ("logs_v2p7/metrics.jsonl", "p5_tinkerrlvr_q3_4b_v2p7"),
        ],
    ),
    "joanvelja/tinker-cookbook": (  # deleted from the default branch after this commit
        "f59cdda2c2ff5f2cb67b382f1b6fba63a736a3d2",
        [
            ("reports/data/gptoss-20b-v2-metrics.jsonl", "c10_omnimath_gptoss20b_v2"),
            ("reports/data/gptoss-20b-v3b-metrics.jsonl", "c10_omnimath_gptoss20b_v3b"),
            ("reports/data/qwen3-30b-instruct-v3b-metrics.jsonl", "c10_omnimath_q3_30b_instruct"),
            ("reports/data/qwen3-30b-think-v3b-metrics.jsonl", "c10_omnimath_q3_30b_think"),
        ],
    ),
    "lenardst/assignment5-alignment": (  # no snapshot: copies read with `read_file`
        "8f47a9457f06eac841e43852c3429b0b1235309d",
        [
            (f"experiments/grpo_standard_on_policy/seed{k}/metrics.jsonl", f"c10_lenardst_seed{k}")
            for k in range(4)
        ],
    ),
    "sandyhu533/assignment5-alignment": (  # no snapshot: copies read with `read_file`
        "e7dd55ad7352bba72030929b9451b25c4d0d6c36",
        [(f"grpo_runs/{d}/metrics.jsonl", f"c12_sandy_{r}", *own) for d, r, _, *own in _SANDY],
    ),
    "rohunagrawal/reward-hacking-entropy": (  # the files of >= 20 steps that restart nowhere
        "a45643e71a5adb0c4146b8a81d98ba029225cfbe",
        [(f"outputs/{d}/metrics.jsonl", f"c14_rohun_{r}") for d, r in _ROHUN],
    ),
    "Rohanjain2312/grpo-reward-hacking-demo": (  # no snapshot: copies read with `read_file`
        "755c6d58cbbdf3a84e374b05b6775dfeb67fae49",
        [(f"results/{r}/metrics.jsonl", f"c14_rohanjain_{r}") for r in _ROHANJAIN],
    ),
    "desirepathh/assignment5-alignment": (
        "d789558c359bfa6033c3198fba9d6d3ca113293b",
        [
            ("output/grpo/training_log.jsonl", "c10_desire_grpo_first", _DESIRE_FIRST),
            ("output/grpo/training_log.jsonl", "c10_desire_grpo_add"),
            ("output/grpo_v2/training_log.jsonl", "c10_desire_grpo_v2"),
            ("output/dapo/training_log.jsonl", "c10_desire_dapo"),
            ("output/dapo_v2/training_log.jsonl", "c10_desire_dapo_v2"),
        ],
    ),
}
STEP_KEYS = {"desirepathh/assignment5-alignment": "iteration"}  # else `step`
COPY_CHARS = {  # a copy's length must be the stored file's, as `read_file` gave it
    **{
        f"experiments/grpo_standard_on_policy/seed{k}/metrics.jsonl": n
        for k, n in enumerate((56698, 56868, 55874, 55749))
    },
    **{f"grpo_runs/{d}/metrics.jsonl": n for d, _, n, *_ in _SANDY},
    **{f"results/{r}/metrics.jsonl": n for r, n in _ROHANJAIN.items()},
}


def rows_of(text: str, path: str, step_key: str = "step") -> list[dict]:
    if path.endswith(".jsonl"):
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        records = json.loads(text)
    records = [{"step": r["step"], **r["data"]} if "data" in r else r for r in records]
    if step_key != "step":
        records = [{"step": r.pop(step_key), **r} for r in records]
    if records and records[-1]["step"] == "summary":  # a run's closing timings, no step
        records = records[:-1]
    return increasing(same_step_joined([numeric(obj) for obj in records]))


def main(repo: str, source: str, out: str) -> None:
    """`source`: a fetched mirror's git dir, or a folder of the files copied at the commits
    `SOURCES` names (a repository with no snapshot, read page by page, each copy checked
    against the stored length)."""
    if repo not in SOURCES:
        raise SystemExit(f"{repo}: not one of {sorted(SOURCES)}")
    default, runs = SOURCES[repo]
    mirror = Path(source, "HEAD").is_file()
    for path, run_id, *own in runs:
        commit = own[0] if own else default
        if mirror:
            text = git(source, "show", f"{commit}:{path}")
        else:
            text = Path(source, path).read_text(encoding="utf-8")
            if len(text) != COPY_CHARS[path]:
                raise ValueError(f"{path}: {len(text)} characters, stored {COPY_CHARS[path]}")
        rows = rows_of(text, path, STEP_KEYS.get(repo, "step"))
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
