"""Slices of one W&B history export in long form (one row per run, metric and W&B step) ->
one corpus file per run.

Source (SOURCES.md): Wedsonlin/assignment5-alignment,
`analysis_outputs/wandb_mcp_report/wandb_full_step_history_long.csv` (14,368,078
characters; columns `project,run_id,run_name,state,history_line_count,metric,step,
logical_step,value,timestamp,runtime`). The file is in no snapshot, so the blocks of a few
runs were copied through the search tool's `read_file`, each to `<run_id>/<metric>.csv`,
and each copy is checked here against the character range it was read from (`SLICES`).
W&B's step counts the training logs and the evaluations together; a training row's step is
its rank in the run's block (`logical_step`, which equals the run's own `train_step`
where that was copied), and an evaluation joins the last training step logged before it.
Usage: python wandb_long_slices.py <folder of copies> <out dir> [run id ...] (all by default)
"""

from __future__ import annotations

import bisect
import csv
import sys
from pathlib import Path

from _mirror import increasing, write_rows

REPO, COMMIT = "Wedsonlin/assignment5-alignment", "bdeeab74fb13f8f2388541970e11d0ebe3914566"
SLICES = {  # run id -> (corpus id, {metric: (start, end, rows)}: characters [start, end))
    "ryknfrsa": (
        "c11_wedson_lr1em4",
        {
            "eval/answer_reward": (4557909, 4558685, 7),
            "eval/response_length": (4559462, 4560274, 7),
            "eval/total_reward": (4560274, 4561043, 7),
            "eval_step": (4561043, 4561708, 7),
            "train/answer_reward": (4561708, 4569852, 75),
            "train/entropy": (4569852, 4578064, 75),
            "train/gradient_norm": (4586217, 4594475, 75),
            "train_step": (4610292, 4617603, 75),
        },
    ),
    "wqml7wt3": (
        "c11_wedson_lr3em4",
        {
            "eval/answer_reward": (4617603, 4618983, 13),
            "eval/response_length": (4620365, 4621893, 13),
            "eval/total_reward": (4621893, 4623260, 13),
            "eval_step": (4623260, 4624519, 13),
            "train/answer_reward": (4624519, 4638632, 131),
            "train/entropy": (4638632, 4653207, 131),
            "train/gradient_norm": (4667332, 4681494, 131),
            "train_step": (4708485, 4721517, 131),
        },
    ),
    "2q1jb04r": (
        "c11_wedson_no_baseline",
        {
            "eval/answer_reward": (4914226, 4916659, 20),
            "eval/response_length": (4919091, 4921571, 20),
            "eval/total_reward": (4921571, 4923984, 20),
            "eval_step": (4923984, 4926055, 20),
            "train/answer_reward": (4926055, 4949843, 200),
            "train/entropy": (4949843, 4973398, 200),
            "train/gradient_norm": (4996925, 5021362, 200),
            "train_step": (5067904, 5089167, 200),
        },
    ),
    "j9frkcon": (
        "c11_wedson_ep4_bs256",
        {
            "eval/answer_reward": (10596412, 10596996, 5),
            "eval/response_length": (10597588, 10598188, 5),
            "eval/total_reward": (10598188, 10598767, 5),
            "eval_step": (10598767, 10599265, 5),
            "train/answer_reward": (10599265, 10622443, 200),
            "train/entropy": (10646331, 10669271, 200),
            "train/gradient_norm": (10692435, 10716216, 200),
            "train/clip_fraction": (10622443, 10646331, 200),
            "train_step": (10761456, 10782108, 200),
        },
    ),
    "55ui37pa": (
        "c11_wedson_ep4_bs512",
        {
            "eval/answer_reward": (10782108, 10782697, 5),
            "eval/response_length": (10783287, 10783888, 5),
            "eval/total_reward": (10783888, 10784472, 5),
            "eval_step": (10784472, 10784968, 5),
            "train/answer_reward": (10784968, 10796437, 100),
            "train/entropy": (10808144, 10819508, 100),
            "train/gradient_norm": (10831003, 10842861, 100),
            "train/clip_fraction": (10796437, 10808144, 100),
            "train_step": (10865031, 10875201, 100),
        },
    ),
    "bsmsuzyq": (  # the first 1000 of its 2400 training rows
        "c11_wedson_ep6_bs32",
        {
            "eval/answer_reward": (10875201, 10875793, 5),
            "eval/response_length": (10876388, 10876989, 5),
            "eval/total_reward": (10876989, 10877576, 5),
            "eval_step": (10877576, 10878079, 5),
            "train/answer_reward": (10878079, 10993866, 1000),
            "train/entropy": (11454769, 11570337, 1000),
            "train/gradient_norm": (12017880, 12137299, 1000),
            "train/clip_fraction": (11160147, 11281618, 1000),
        },
    ),
    "0tphuooo": (  # the first 400 of its 1005 training rows
        "c11_wedson_ep6_bs64",
        {
            "eval/answer_reward": (13113932, 13114390, 4),
            "eval/response_length": (13114861, 13115339, 4),
            "eval/total_reward": (13115339, 13115793, 4),
            "eval_step": (13115793, 13116188, 4),
            "train/answer_reward": (13116188, 13161817, 400),
            "train/entropy": (13350644, 13396341, 400),
            "train/gradient_norm": (13581219, 13628898, 400),
            "train/clip_fraction": (13229572, 13277629, 400),
            "train_step": (13922383, 13963616, 400),
        },
    ),
}
FIELDS = 11
CUT = {"0tphuooo", "bsmsuzyq"}
"""Runs copied in part: an evaluation after the last copied training row is not taken."""


def block(folder: Path, run_id: str, metric: str) -> list[tuple[int, int, float]]:
    """(W&B step, logical step, value) of one copied block, once the copy is checked."""
    start, end, count = SLICES[run_id][1][metric]
    path = folder / run_id / (metric.replace("/", "__") + ".csv")
    text = path.read_text(encoding="utf-8")
    if len(text) != end - start:
        raise ValueError(f"{path}: {len(text)} characters, read from {end - start}")
    rows = list(csv.reader(text.splitlines()))
    wrong = [r for r in rows if len(r) != FIELDS or (r[1], r[5]) != (run_id, metric)]
    if len(rows) != count or wrong:
        raise ValueError(f"{path}: not {count} rows of {run_id} {metric}")
    out = [(int(r[6]), int(r[7]), float(r[8])) for r in rows]
    if [logical for _, logical, _ in out] != list(range(1, count + 1)):
        raise ValueError(f"{path}: logical steps are not 1..{count}")
    increasing([{"step": s} for s, _, _ in out])
    return out


def rows_of(folder: Path, run_id: str) -> list[dict]:
    metrics = {m: block(folder, run_id, m) for m in SLICES[run_id][1]}
    train = {m: b for m, b in metrics.items() if m.startswith("train")}
    wandb_steps = [s for s, _, _ in train["train/answer_reward"]]
    if any([s for s, _, _ in b] != wandb_steps[: len(b)] for b in train.values()):
        raise ValueError(f"{run_id}: training metrics logged at different W&B steps")
    if any(v != logical for _, logical, v in train.get("train_step", [])):
        raise ValueError(f"{run_id}: train_step is not the rank of the training row")
    steps: dict[int, dict] = {}
    for metric, b in metrics.items():
        for wandb_step, logical, value in b:
            if metric.startswith("train"):
                step = logical
            else:  # an evaluation: the last training step logged before it
                i = bisect.bisect_left(wandb_steps, wandb_step)
                if i == 0 or (i == len(wandb_steps) and run_id in CUT):
                    continue  # before the first training row, or after the copied ones
                step = i
            if metric not in ("train_step", "eval_step"):  # counters, not metrics
                steps.setdefault(step, {})[metric] = value
    return [{"step": s, **steps[s]} for s in sorted(steps)]


def main(folder: str, out: str, *run_ids: str) -> None:
    for run_id, (corpus_id, _) in SLICES.items():
        if run_ids and run_id not in run_ids:
            continue
        rows = rows_of(Path(folder), run_id)
        write_rows(out, corpus_id, rows)
        print(f"{corpus_id}\t{REPO}\t{run_id}\t{len(rows)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:])
