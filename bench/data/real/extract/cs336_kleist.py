"""KleistvonLiu/assignment5-alignment: `outputs/grpo_full_mathv2/{rollout,train,eval}_metrics
.jsonl` -> one corpus file per run, one row per GRPO step.

The source's GRPO loop appends to the three files: per step a rollout record (rewards,
advantages, lengths) and a training record (`train/*`: loss, entropy, gradient norm), and an
evaluation every 10 steps (held-out rewards on 1,024 problems, here `eval/<name>`). Every run
appends from step 1 (its evaluation from step 0), so each file is several runs glued
together: each is split where its step falls back; the three must give the same runs (the
same steps in the rollout and training files, but for a last rollout whose update was not
logged; evaluations within them); a row joins its step's records, numbers unchanged, strings
and nested summaries dropped. Runs with fewer than 20 steps are not taken. No snapshot: the
files were copied page by page with `read_file`, each copy checked against its stored length.
Usage: python cs336_kleist.py <folder of copies> <out dir>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _mirror import increasing, numeric, write_rows

REPO, COMMIT = "KleistvonLiu/assignment5-alignment", "3368ea6d12043782bbaa74f2ce4330e18720a046"
FOLDER = "outputs/grpo_full_mathv2"
COPY_CHARS = {
    "rollout_metrics.jsonl": 186724,
    "train_metrics.jsonl": 63230,
    "eval_metrics.jsonl": 18000,
}
STEP_KEYS = {"rollout_metrics.jsonl": "rollout_step", "train_metrics.jsonl": "rollout_step"}
MIN_STEPS = 20
RUN_IDS = ["c12_kleist_grpo_a", "c12_kleist_grpo_b", "c12_kleist_grpo_c"]
"""The runs taken, in the order the files hold them (the first, 5 steps, is not taken)."""


def runs_of(folder: Path, name: str) -> list[list[dict]]:
    """The file's records, split into runs where the step falls back."""
    text = Path(folder, FOLDER, name).read_text(encoding="utf-8")
    if len(text) != COPY_CHARS[name]:
        raise ValueError(f"{name}: {len(text)} characters, stored {COPY_CHARS[name]}")
    key = STEP_KEYS.get(name, "eval_step")
    runs: list[list[dict]] = []
    for line in text.splitlines():
        if line.strip():
            record = json.loads(line)
            if not runs or record[key] <= runs[-1][-1][key]:
                runs.append([])
            runs[-1].append(record)
    return runs


def values(record: dict) -> dict:
    """A record's numbers but its step counters (the row's step says it once)."""
    return {k: v for k, v in numeric(record).items() if not k.endswith("_step")}


def main(folder: str, out: str) -> None:
    rollouts, trains, evals = (
        runs_of(Path(folder), f"{kind}_metrics.jsonl") for kind in ("rollout", "train", "eval")
    )
    if not len(rollouts) == len(trains) == len(evals):
        raise ValueError("the three files hold different numbers of runs")
    taken = [i for i, run in enumerate(rollouts) if len(run) >= MIN_STEPS]
    if len(taken) != len(RUN_IDS):
        raise ValueError(f"{len(taken)} runs of {MIN_STEPS} steps or more, not {len(RUN_IDS)}")
    for run_id, i in zip(RUN_IDS, taken, strict=True):
        steps = [r["rollout_step"] for r in rollouts[i]]
        trained = [r["rollout_step"] for r in trains[i]]
        if steps != list(range(1, len(steps) + 1)) or trained != steps[: len(trained)]:
            raise ValueError(f"run {i}: rollout and training steps differ or skip")
        if len(steps) - len(trained) > 1:  # a run stopped between a rollout and its update
            raise ValueError(f"run {i}: {len(steps) - len(trained)} rollouts without an update")
        rows = {r["rollout_step"]: values(r) for r in rollouts[i]}
        for train in trains[i]:
            rows[train["rollout_step"]] |= values(train)
        for record in evals[i]:
            step = record["rollout_step"]
            if step not in rows and step != 0:
                raise ValueError(f"run {i}: an evaluation at step {step}, after the run's steps")
            rows.setdefault(step, {}).update({f"eval/{k}": v for k, v in values(record).items()})
        write_rows(out, run_id, increasing([{"step": s, **rows[s]} for s in sorted(rows)]))
        print(f"{run_id}\t{REPO}\t{FOLDER} run {i + 1}\t{len(steps)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
