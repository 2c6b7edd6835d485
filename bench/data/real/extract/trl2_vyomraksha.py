"""Xx-D3V-xX/Meta-Hack-VyomRaksha: TRL GRPOTrainer console logs of AWS jobs -> corpus rows.

The repository's `logs/aws/*.log` are the nohup output of its training jobs: several GRPO
runs per log, one per agent, each opened by the script's own line (`Starting GRPO
training: agent=<a> steps=<n>` and its variants). The rows are the dicts TRL printed that
carry `reward`, parsed as Python literals, values unchanged. The console flushed its dicts
late, so the dict stream is cut into runs where the learning rate jumps back up, and the
k-th cut is the k-th opened run (the counts must agree). The step is the dict's rank in
its run, checked by the learning rate (TRL's linear decay to 0 over the run's `steps`);
a run prints exactly `steps` dicts, except a log's last run, which may stop short and is
taken as logged. Log files with fewer than 20 step dicts (aborted starts) hold no run.
Usage: python trl2_vyomraksha.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import ast
import re
import sys

from _mirror import git, write_rows

COMMIT = "922e528fbfde541c49908a25c3ad69ab72491460"
LOGS = {  # log file -> run tag
    "phase1_card1_20260425_025844": "p1",
    "phase1_card2_20260425_090954": "p1",
    "phase1_5_c1_20260425_070807": "p15",
    "phase1_5_c2_20260425_114333": "p15",
    "phase2_sarvadrishi_20260425_140727": "p2",
    "phase2_retrain_20260426_034524": "p2retrain",
    "phase3_emergency_20260426_055840": "p3",
}
START = re.compile(
    r"Starting GRPO training: agent=(?P<a>\w+) steps=(?P<n>\d+)"
    r"|SarvaDrishti GRPO training: steps=(?P<n2>\d+)"
    r"|Phase 3 calibration: agent=(?P<a3>\w+) scope=\w+ steps=(?P<n3>\d+)"
)
STEP_DICT = re.compile(r"\{'(?:loss|train_runtime)': [^{}]*\}")


def runs_of(text: str) -> list[tuple[str, int, list[dict]]]:
    """(agent, planned steps, step dicts) for each run the log opens, in order."""
    opens = [
        (
            m.group("a") or m.group("a3") or "sarvadrishi",
            int(m.group("n") or m.group("n2") or m.group("n3")),
        )
        for m in START.finditer(text)
    ]
    dicts = [ast.literal_eval(d.group(0)) for d in STEP_DICT.finditer(text)]
    dicts = [d for d in dicts if "reward" in d]
    # the console flushes its dicts late (the next run's opening line can come first), so
    # runs are cut where the learning rate jumps back up: a new schedule starts
    cuts = [0] + [
        i for i in range(1, len(dicts)) if dicts[i]["learning_rate"] > dicts[i - 1]["learning_rate"]
    ]
    parts = [dicts[a:b] for a, b in zip(cuts, [*cuts[1:], len(dicts)], strict=True)]
    if len(parts) != len(opens):
        raise ValueError(f"{len(parts)} schedules for {len(opens)} runs")
    return [(agent, steps, part) for (agent, steps), part in zip(opens, parts, strict=True)]


def rows_of(steps: int, dicts: list[dict], last: bool) -> list[dict]:
    """Rows of one run; only a log's last run may stop short of its planned steps."""
    if len(dicts) > steps or (len(dicts) < steps and not last):
        raise ValueError(f"{len(dicts)} step dicts for a {steps}-step run")
    lr0 = dicts[0]["learning_rate"]
    for k, d in enumerate(dicts):
        if abs(d["learning_rate"] - lr0 * (1 - k / steps)) > 1e-12:
            raise ValueError(f"dict {k + 1}: learning_rate {d['learning_rate']} off schedule")
    return [{"step": k, **d} for k, d in enumerate(dicts, start=1)]


def main(git_dir: str, out: str) -> None:
    for log, tag in LOGS.items():
        path = f"logs/aws/{log}.log"
        text = git(git_dir, "show", f"{COMMIT}:{path}")
        runs = runs_of(text)
        for i, (agent, steps, dicts) in enumerate(runs):
            name = f"trl2_vyom_{tag}" + ("" if tag.startswith("p2") else f"_{agent}")
            rows = rows_of(steps, dicts, last=i == len(runs) - 1)
            write_rows(out, name, rows)
            print(f"{name}\t{path}\t{len(rows)}/{steps} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
