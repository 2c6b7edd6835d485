"""verl console output captured by W&B (`wandb/run-*/files/output.log`) -> corpus rows.

Source: jianghoucheng/Agent_On_Policy_Distillation (a copy of Gen-Verse/Open-AgentRL, verl
with a teacher-KL reward term, `recipe/retool/run_{qwen2_3b,qwen3_4b}_opd.sh`): its
committed `wandb/` folder holds every console log of its runs. verl's console logger
prints one line per step, `step:N - name:value - name:value ...`, values as Python reprs
(`0.5`, `np.float64(0.5)`, `np.int32(2)`); the values are taken unchanged, non-numbers
dropped. W&B cuts a captured line at 4,096 characters: such a line's last item may be cut
mid-number and is dropped (the items before it are whole). A run is taken when at least
20 of its steps log `critic/score/mean` (the SFT runs of the same folder log none);
steps must rise strictly. A run whose scores are a prefix of another's would be skipped.
Usage: python verl_wandb_console.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from _mirror import git, increasing

REPO = "jianghoucheng/Agent_On_Policy_Distillation"
COMMIT = "5ce4586b3da5e20c82e0fa2c80f3db11f28fb7d9"
TAG = "v3_opd"
CUT = 4096
OUTCOME = "critic/score/mean"
LINE = re.compile(r"^step:(\d+) - (.*)$", re.M)
NUMPY = re.compile(r"^np\.\w+\((.*)\)$")


def number(text: str) -> float | None:
    m = NUMPY.match(text)
    try:
        return float(m.group(1) if m else text)
    except ValueError:
        return None


def rows_of(text: str, cut: int | None = CUT) -> list[dict]:
    """One row per `step:N - ...` line; `cut`: the length at which a line was cut (its
    last item dropped), None for a log written whole."""
    rows: list[dict] = []
    for m in LINE.finditer(text):
        items = m.group(2).split(" - ")
        if cut is not None and len(m.group(0)) >= cut:
            items = items[:-1]
        row: dict = {"step": int(m.group(1))}
        for item in items:
            name, _, raw = item.partition(":")
            value = number(raw)
            if value is None or name == "step":
                continue
            if name in row and json.dumps(row[name]) != json.dumps(value):
                raise ValueError(f"step {row['step']}: {name} is {row[name]} and {value}")
            row[name] = value
        rows.append(row)
    return rows


def main(git_dir: str, out: str) -> None:
    folders = git(git_dir, "ls-tree", "--name-only", COMMIT, "wandb/").split()
    runs = {}
    for folder in folders:
        path = f"{folder}/files/output.log"
        if not folder.startswith("wandb/run-") or path not in git(
            git_dir, "ls-tree", "-r", "--name-only", COMMIT, folder
        ):
            continue
        rows = rows_of(git(git_dir, "show", f"{COMMIT}:{path}"))
        if sum(OUTCOME in r and math.isfinite(r[OUTCOME]) for r in rows) >= 20:
            runs[path] = increasing(rows)
    scores = {p: [r[OUTCOME] for r in rows if OUTCOME in r] for p, rows in runs.items()}
    for path, rows in runs.items():
        mine = scores[path]
        longer = [q for q, s in scores.items() if q != path and s[: len(mine)] == mine]
        if longer:
            print(f"skip {path}: a prefix of {longer[0]}")
            continue
        name = f"{TAG}_{path.split('/')[1].rsplit('-', 1)[1]}"
        text = "".join(json.dumps(r) + "\n" for r in rows)
        Path(out, f"{name}.jsonl").write_text(text)
        print(f"{name}\t{path}\t{len(rows)} rows\t{len(mine)} scores\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
