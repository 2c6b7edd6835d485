"""The GRPO runs whose per-step logs rasbt/reasoning-from-scratch commits (the book's
from-scratch GRPO scripts of chapters 6 and 7) -> corpus rows.

Each script writes its steps twice: a CSV (`step,total_steps,name,...`, the held-out
`eval_acc` only at evaluation steps) and a text log (`[Step N/T] name=value ...`); a run
is read from its CSV when one holds it. The logs were overwritten and renamed as the book
was revised, so one path's versions can be different runs and one run can sit under two
paths: `RUNS` names every distinct run of the history once, at the newest commit holding
it, and the script stops if two listed runs share their first rewards (a copy). Not
listed: `ch07/02_logs/ch06_rlvr_grpo_original_no_kl_metrics.csv`, whose 500 rewards and
10 evaluations are those of `7_3_plus_tracking`'s log (which adds entropy). A file that
starts again at a lower step (an aborted start) keeps its last part; `total_steps` (the
plan) is dropped; values unchanged. Usage: python rasbt_grpo.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import csv
import io
import re
import sys

from _mirror import git, increasing, name_values, write_rows

REPO = "rasbt/reasoning-from-scratch"
_CH6 = "ch06/02_rlvr_grpo_scripts_intro/logs/rlvr_grpo_original_no_kl_metrics.csv"
_CH7 = "ch07/02_logs/"
_B, _C = (  # the two commits of the ch07 logs read
    "f57c7e8d1499886b94de2db288fc97726483df91",
    "4215ed35b422ed9123b4a920899bce93d73a1c34",
)
RUNS = [  # (commit, path, run id after c15_rasbt_)
    ("935b5a130ec960ef0759af307a9f283bfe7154c6", _CH6, "ch6_no_kl"),
    (
        "7987537d89ff5f64684fc78b93291d957b4774e5",
        f"{_CH7}ch06_rlvr_grpo_original_no_kl_1024_metrics.txt",
        "ch6_no_kl_500_first",
    ),
    (_B, f"{_CH7}7_3_plus_tracking_metrics.csv", "7_3_tracking"),
    (_B, f"{_CH7}7_4_plus_clip_ratio_metrics.csv", "7_4_clip_ratio"),
    (_B, f"{_CH7}7_5_plus_kl_metrics.csv", "7_5_kl"),
    (_B, f"{_CH7}7_6_plus_format_reward_metrics.csv", "7_6_format_first"),
    (_C, f"{_CH7}7_6_plus_format_reward_metrics.csv", "7_6_format"),
    (_C, f"{_CH7}7_6_plus_format_reward_conditional_metrics.csv", "7_6_format_conditional"),
]
STEP_LINE = re.compile(r"^\[Step (\d+)/(\d+)\] (.*)$")
SAME_RUN = 25  # rewards compared to find a copy


def records(text: str, path: str) -> list[dict]:
    """Every logged step of the file, in order: numbers as written, empty cells and the
    plan (`total_steps`) left out."""
    if path.endswith(".csv"):
        return [
            {
                k: int(v) if k == "step" else float(v)
                for k, v in row.items()
                if v != "" and k != "total_steps"
            }
            for row in csv.DictReader(io.StringIO(text))
        ]
    return [
        {"step": int(m.group(1)), **name_values(m.group(3).split(), f"{path} line {n}")}
        for n, line in enumerate(text.splitlines(), 1)
        if (m := STEP_LINE.match(line))
    ]


def last_start(rows: list[dict]) -> list[dict]:
    """The rows from the last point where the step falls back (the run after an aborted
    start)."""
    starts = [i for i in range(1, len(rows)) if rows[i]["step"] <= rows[i - 1]["step"]]
    return increasing(rows[starts[-1] :] if starts else rows)


def main(mirror: str, out: str) -> None:
    seen: dict[tuple, str] = {}
    for commit, path, run_id in RUNS:
        rows = last_start(records(git(mirror, "show", f"{commit}:{path}"), path))
        head = tuple(r["reward_avg"] for r in rows[:SAME_RUN])
        if head in seen:
            raise SystemExit(f"{run_id}: the same run as {seen[head]}")
        seen[head] = run_id
        write_rows(out, f"c15_rasbt_{run_id}", rows)
        print(f"c15_rasbt_{run_id}\t{REPO}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
