"""sanjuhs/open-env-meta-final-hackathon (CADForge): TRL GRPOTrainer console dicts -> rows.

Each GRPO run's report folder `training/reports/<run>/` holds `metrics.json`: the dicts
TRL's GRPOTrainer printed to the run's console log, one per logged step (`logging_steps`
1), parsed by the repository's `training/make_training_report.py` (Python literals, each
value through `float`, so the printed 4-significant-digit numbers), plus the closing
`train_runtime` dict. The dicts carry no step: the step is the dict's rank, checked
against the same folder's `tensorboard_scalars.json` (the run's TensorBoard scalars,
exported by that script with their steps): at every rank the TensorBoard `train/reward`
rounded to 4 significant digits equals the dict's `reward`, and the TensorBoard steps are
exactly 1..n. Values are `metrics.json`'s, unchanged. Runs with fewer than 20 logged steps
(`qwen35-9b-grpo-smoke`: 2) are not taken; no run's rewards are a prefix of another's.
Usage: python trl2_cadforge.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import sys

from _mirror import git, write_rows

COMMIT = "201f78a1d4355f9eb9b74a8b6e4fb23e083e134e"
RUNS = {  # corpus id -> report folder
    "trl2_cadforge_2b_grpo_final": "qwen35-2b-grpo-final",
    "trl2_cadforge_9b_grpo_final": "qwen35-9b-grpo-final",
    "trl2_cadforge_9b_strict_build": "qwen35-9b-grpo-strict-build-20260426-strict-build",
    "trl2_cadforge_9b_adaptive_repair": "qwen35-9b-grpo-20260426-adaptive-repair",
    "trl2_cadforge_9b_adaptive_repair_8192": "qwen35-9b-grpo-20260426-adaptive-repair-final-8192",
}


def _show(git_dir: str, path: str) -> str:
    return git(git_dir, "show", f"{COMMIT}:{path}")


def rows_of(dicts: list[dict], scalars: dict[str, list[dict]]) -> list[dict]:
    steps = [d for d in dicts if "reward" in d]
    rest = [d for d in dicts if "reward" not in d]
    if len(rest) != 1 or "train_runtime" not in rest[0]:
        raise ValueError(f"expected one train_runtime summary, got {rest}")
    tb = {int(p["step"]): p["value"] for p in scalars["train/reward"]}
    if sorted(tb) != list(range(1, len(steps) + 1)):
        raise ValueError("TensorBoard steps are not 1..n")
    for rank, d in enumerate(steps, start=1):
        if float(f"{tb[rank]:.4g}") != d["reward"]:
            raise ValueError(f"rank {rank}: reward {d['reward']} vs TensorBoard {tb[rank]}")
    return [{"step": rank, **d} for rank, d in enumerate(steps, start=1)]


def main(git_dir: str, out: str) -> None:
    for name, folder in RUNS.items():
        base = f"training/reports/{folder}"
        dicts = json.loads(_show(git_dir, f"{base}/metrics.json"))
        scalars = json.loads(_show(git_dir, f"{base}/tensorboard_scalars.json"))
        rows = rows_of(dicts, scalars)
        write_rows(out, name, rows)
        print(f"{name}\t{base}/metrics.json\t{len(rows)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
