"""TRL `log_history` records committed to public repositories -> corpus rows.

Sources (one GRPOTrainer run each, two for gauri0508/med-record; SOURCES.md has each file,
commit and run): `trainer_state.json` of a checkpoint at the run's last step (earlier
checkpoints of the same folder hold prefixes of its history, checked, and are not runs),
the training scripts' own dumps of `trainer.state.log_history`, and the `on_log` records a
TrainerCallback wrote one JSON object a line. A row is one logged entry carrying `reward`
(the GRPO steps), keyed by its own `step`, numbers unchanged (a NaN TRL wrote stays NaN);
the closing `train_runtime` summary TRL appends and the evaluation entries (only `eval_*`
keys besides `epoch` and `step`) are not training steps and are dropped. Steps must
increase strictly. GuoCheng24/batch-logprob-gap's `results/q1/*.json` (unfetchable) were read
page by page, the joined text checked against the stored character count (`JOINED`).
Usage: python trl2_log_history.py <mirror root, holding owner+name/repo> <out dir>
   or: python trl2_log_history.py --joined <joined file> <repo path> <out dir>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _mirror import git, increasing, write_rows

_STAGE2 = "expert_guy/post_training_project/threestage/stage2_output"
_RUNS8B = "enhanced_grpo_8B_runs/v3-LR6e-6-"
_MP = "model_parallel_only_outputs/"
_GRPO_CLEAN_2 = [  # (tag, run folder, last checkpoint, earlier checkpoints); the three
    # folders whose history has fewer than 20 logged steps are not runs for the corpus
    ("v3_r16_0612", f"{_RUNS8B}R16-20250612-175657", 600, range(560, 600, 10)),
    ("v3_r16_0615", f"{_RUNS8B}R16-20250615-021543", 310, range(270, 310, 10)),
    ("mp_r64_0616", f"{_MP}pure-model-parallel-LR2e-5-R64-20250616-081316", 280, (240, 260)),
    ("debug_r64_0616a", f"{_MP}DEBUG-model-parallel-LR2e-5-R64-BS2x8-20250616-220508", 40, (20,)),
    ("debug_r64_0616b", f"{_MP}DEBUG-model-parallel-LR2e-5-R64-BS2x8-20250616-230237", 20, ()),
    ("debug_r32_0617", f"{_MP}DEBUG-model-parallel-LR2e-5-R32-BS2x8-20250617-112133", 40, (20,)),
]
RUNS = [  # (corpus id, repository, commit, path, earlier versions that must be prefixes)
    (
        "trl2_f1strat_grpo_v1",
        "Deltasthicc/F1_Simulator_OpenENV",
        "a123eb9d5b18f50ad01bc55729b817259fff8cbf",
        "grpo_v1/checkpoint-800/trainer_state.json",
        [f"grpo_v1/checkpoint-{n}/trainer_state.json" for n in range(50, 800, 50)],
    ),
    (
        "trl2_incidentcmdr_grpo",
        "hs-zz27/incident-commander-openenv",
        "5239fbd7986408d3a06cb31e73721a33cece5e7e",
        "results/training_log.json",
        [],
    ),
    (
        "trl2_cybersoc_grpo",
        "AmitChowdary122/cyber-openenv",
        "603755ed1518444ece190f3ac0e7246db050fb67",
        "assets/training_log.json",
        [],
    ),
    (
        "trl2_opssim_grpo",
        "nithishgouds/Meta-x-OpenEnv-x-Pytorch-Hackathon",
        "f76fd361993a0b834454e956e3c5f6b1c9b1f199",
        "plots/train_metrics.jsonl",
        [],
    ),
    (
        "trl2_memredteam_grpo",
        "aaravarora01/agent-memory-redteam",
        "f2ee8947f6bc2d4bc0af8047936495aa90aec4e3",
        "trainer_state.json",
        [],
    ),
    (
        "trl2_medrecord_grpo_150",
        "gauri0508/med-record",
        "68eac28e0aa1322d3ab1ccbbb8e9f0714ab74184",
        "training/trainer_state.json",
        [],
    ),
    (
        "trl2_medrecord_grpo_100_9cases",
        "gauri0508/med-record",
        "895df82a86c3d0ba6a9cdd0870fd95a4b7220951",
        "training/trainer_state.json",
        [],
    ),
    (
        "trl2_forgerl_grpo",
        "rohanjain1648/META-HACKATHON",
        "b380a69c3bf75ffcb9dbfd9d8f5d727b089e1130",
        "forgerl_outputs/checkpoint-300/trainer_state.json",
        [f"forgerl_outputs/checkpoint-{n}/trainer_state.json" for n in range(50, 300, 50)],
    ),
    (
        "c6_caswordle_lara_4090_grpo",
        "alexchilton/CAS_NLP_MODULE4_GRPO",
        "0a4da0d62f59f1b776904c9174fdd67ebd2bce79",
        "lara/output_4090/wordle-grpo/checkpoint-400/trainer_state.json",
        ["lara/output_4090/wordle-grpo/checkpoint-300/trainer_state.json"],
    ),
    (
        "c6_caswordle_stage2_grpo",
        "alexchilton/CAS_NLP_MODULE4_GRPO",
        "0a4da0d62f59f1b776904c9174fdd67ebd2bce79",
        f"{_STAGE2}/checkpoint-160/trainer_state.json",
        [f"{_STAGE2}/checkpoint-{n}/trainer_state.json" for n in range(80, 160, 20)],
    ),
    *(
        (
            f"c6_grpoclean2_{tag}",
            "qhy991/GRPO-Clean-2",
            "7d5088036378013a39ca54b6408cd7267f358d7c",
            f"{folder}/checkpoint-{last}/trainer_state.json",
            [f"{folder}/checkpoint-{n}/trainer_state.json" for n in earlier],
        )
        for tag, folder, last, earlier in _GRPO_CLEAN_2
    ),
    (  # its checkpoint-{25,50,75} states beside it are of another, 75-step run
        "c9_text2sql_grpo_3b_1000",
        "HaoranLuo/text2sql-grpo",
        "cd1d7bb4e5e0859bcd3f956f21ee1454e92da980",
        "visualization_1000/trainer_state_1000steps.json",
        [],
    ),
]


def _show(git_dir: Path, commit: str, path: str) -> str:
    return git(str(git_dir), "show", f"{commit}:{path}")


def history(text: str, path: str) -> list[dict]:
    if path.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data["log_history"] if isinstance(data, dict) else data


def rows_of(entries: list[dict]) -> list[dict]:
    rows = []
    for entry in entries:
        if "reward" not in entry:
            if all(k.startswith("eval_") for k in entry.keys() - {"epoch", "step"}):
                continue
            if "train_runtime" not in entry:
                raise ValueError(f"an entry with neither reward nor train_runtime: {entry}")
            continue
        numbers = {k: v for k, v in entry.items() if isinstance(v, int | float) and k != "step"}
        rows.append({"step": int(entry["step"]), **numbers})
    return increasing(rows)


JOINED_REPO, JOINED_DIR = "GuoCheng24/batch-logprob-gap", "results/q1"
JOINED = {  # <arm>_s<seed> (the file JOINED_DIR/<arm>_s<seed>.json) -> (commit, characters)
    "A_s0": ("9f434d88e9cc0bf1793facd85ffe85a055253a35", 180759),
    "A_s1": ("d93ddbaf47dc1ce3dd925927891e5c9a53889298", 180672),
    "B_s0": ("9f434d88e9cc0bf1793facd85ffe85a055253a35", 191494),
    "B_s1": ("d93ddbaf47dc1ce3dd925927891e5c9a53889298", 191436),
    "C_s0": ("9f434d88e9cc0bf1793facd85ffe85a055253a35", 180907),
    "C_s1": ("d93ddbaf47dc1ce3dd925927891e5c9a53889298", 180682),
    "D_s0": ("d3ea38ed483b9df9bb35bf778441ea838fc1a96d", 191425),
    "D_s1": ("d93ddbaf47dc1ce3dd925927891e5c9a53889298", 191352),
    "E_s0": ("d3ea38ed483b9df9bb35bf778441ea838fc1a96d", 181630),
    "E_s1": ("ef87afda098a900c5e6700a63f76fa062a5d5871", 181260),
    "F_s0": ("ef87afda098a900c5e6700a63f76fa062a5d5871", 191116),
}
"""The run id of each is c8_blpgap_q1_<arm>_s<seed>."""


def joined(path: str, repo_path: str, out: str) -> None:
    arm = Path(repo_path).stem
    if repo_path != f"{JOINED_DIR}/{arm}.json" or arm not in JOINED:
        raise ValueError(f"{repo_path}: not one of the joined files ({', '.join(JOINED)})")
    (commit, chars), name = JOINED[arm], f"c8_blpgap_q1_{arm}"
    text = Path(path).read_text()
    if len(text) != chars:
        raise ValueError(f"{path}: {len(text)} characters, the source has {chars}")
    rows = rows_of(history(text, repo_path))
    write_rows(out, name, rows)
    print(f"{name}\t{JOINED_REPO}\t{repo_path}\t{len(rows)} steps\t{commit}")


def main(mirrors: str, out: str) -> None:
    for name, repo, commit, path, prefixes in RUNS:
        git_dir = Path(mirrors, repo.replace("/", "+"), "repo")
        entries = history(_show(git_dir, commit, path), path)
        for earlier in prefixes:
            part = history(_show(git_dir, commit, earlier), earlier)
            if entries[: len(part)] != part:
                raise ValueError(f"{earlier} is not a prefix of {path}")
        rows = rows_of(entries)
        write_rows(out, name, rows)
        print(f"{name}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    if sys.argv[1] == "--joined":
        joined(*sys.argv[2:5])
    else:
        main(*sys.argv[1:3])
