"""Slices of one W&B history export in long form (one row per run, metric and W&B step) ->
one corpus file per run.

Source (SOURCES.md): Wedsonlin/assignment5-alignment,
`analysis_outputs/wandb_mcp_report/wandb_full_step_history_long.csv` (14,368,078
characters; columns `project,run_id,run_name,state,history_line_count,metric,step,
logical_step,value,timestamp,runtime`). The file is in no snapshot, so the blocks of a few
runs were copied through the search tool's `read_file`, each to `<run_id>/<metric>.csv`,
and each copy is checked here against the character range it was read from (`SLICES`, in
`wandb_long_slices.json`).
W&B's step counts the training logs and the evaluations together; a training row's step is
its rank in the run's block (`logical_step`, which equals the run's own `train_step`
where that was copied), and an evaluation joins the last training step logged before it.
Usage: python wandb_long_slices.py <folder of copies> <out dir> [run id ...] (all by default)
"""

from __future__ import annotations

import bisect
import csv
import json
import sys
from pathlib import Path

from _mirror import increasing, write_rows

REPO, COMMIT = "Wedsonlin/assignment5-alignment", "bdeeab74fb13f8f2388541970e11d0ebe3914566"
SLICES = json.loads(Path(__file__).with_suffix(".json").read_text(encoding="utf-8"))
"""run id -> {corpus_id, blocks: {metric: [start, end, rows]} (characters [start, end)),
partial: true where only a run's first training rows were copied}."""
FIELDS = 11


def block(folder: Path, run_id: str, metric: str) -> list[tuple[int, int, float]]:
    """(W&B step, logical step, value) of one copied block, once the copy is checked."""
    start, end, count = SLICES[run_id]["blocks"][metric]
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
    metrics = {m: block(folder, run_id, m) for m in SLICES[run_id]["blocks"]}
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
                if i == 0 or (i == len(wandb_steps) and SLICES[run_id].get("partial")):
                    continue  # before the first training row, or after the copied ones
                step = i
            if metric not in ("train_step", "eval_step"):  # counters, not metrics
                steps.setdefault(step, {})[metric] = value
    return [{"step": s, **steps[s]} for s in sorted(steps)]


def main(folder: str, out: str, *run_ids: str) -> None:
    unknown = sorted(set(run_ids) - set(SLICES))
    if unknown:
        raise SystemExit(f"no slices recorded for run ids {', '.join(unknown)}")
    for run_id, entry in SLICES.items():
        if run_ids and run_id not in run_ids:
            continue
        corpus_id = entry["corpus_id"]
        rows = rows_of(Path(folder), run_id)
        write_rows(out, corpus_id, rows)
        print(f"{corpus_id}\t{REPO}\t{run_id}\t{len(rows)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:])
