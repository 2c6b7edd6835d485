"""Tianshi-Xu/assignment5-alignment: logs of its GRPO loop (cs336_alignment/rl.py) -> one corpus
row per rollout batch (the source's `step`, from 0; one optimizer step each).

Per batch the script logs `rollout batch N generated, length: L`, then, at its one optimizer
step, `rl_loss: x, time: t, l2_norm: g, token_entropy: e, reward_data: {...}` (the loss and
entropy of the step's last micro-batch, the gradient norm before clipping to 1.0, and the
batch's reward totals over `total_num` rollouts); every 10 batches, after the update, four
`<format>_format_<answer>_answer:k` counts over the 1,024 test problems and `... batch N done,
eval_acc: a`. A row: `rl_loss`, `l2_norm`, `token_entropy`, `reward` (total over num), and
`format_reward`, `answer_reward` likewise; an evaluation's `eval_acc` and counts on its batch's
row. Checked: batches rise by one with one update each, `length` equals `total_num`, the four
counts sum to 1,024 and `eval_acc` is the first of them over that sum. A line that looks like
one of these and does not parse raises.
Usage: python cs336_tianshi.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import ast
import re
import sys

from _mirror import git, write_rows

RUNS = [  # (corpus id, commit, path)
    ("c10_tianshi_grpo_base", "9a9b29f1ac8fea1f990bd0b54db1d30ac97b835f", "rl_grpo_base.log"),
    ("c10_tianshi_early_stop", "ebb6ff53dce4400b55ab15d8da45ba1425ac3cb3", "rl_early_stop.log"),
]
EVAL_PROBLEMS = 1024  # rl.py: evaluate(..., sample_num=1024)
PREFIX = r"^\S+ \S+ - train - INFO - "
GENERATED = re.compile(PREFIX + r"rollout batch (\d+) generated, length: (\d+)$")
UPDATE = re.compile(
    PREFIX + r"rl_loss: (\S+), time: \S+, l2_norm: (\S+), token_entropy: (\S+), "
    r"reward_data: (\{[^}]*\})$"
)
COUNT = re.compile(PREFIX + r"(right|wrong)_format_(right|wrong)_answer:(\d+)$")
EVALUATED = re.compile(PREFIX + r"(?:rollout|step) batch (\d+) done, eval_acc: (\S+)$")
LOOKS_LIKE = re.compile(PREFIX + r"(rollout batch|step batch|rl_loss|\w+_format_\w+_answer)")


def rows_of(text: str) -> list[dict]:
    rows: list[dict] = []
    counts: dict[str, int] = {}
    for n, line in enumerate(text.split("\n"), 1):
        if not LOOKS_LIKE.match(line):
            continue
        if m := GENERATED.match(line):
            step, length = int(m.group(1)), int(m.group(2))
            if step != len(rows) or (rows and "reward" not in rows[-1]):
                raise ValueError(f"line {n}: batch {step} out of place")
            rows.append({"step": step, "length": length})
        elif m := UPDATE.match(line):
            row = rows[-1] if rows else {}
            data = ast.literal_eval(m.group(4))
            if "reward" in row or data["total_num"] != row.get("length"):
                raise ValueError(f"line {n}: an update out of place or of another batch")
            num = data["total_num"]
            row |= {
                "rl_loss": float(m.group(1)),
                "l2_norm": float(m.group(2)),
                "token_entropy": float(m.group(3)),
                "reward": data["total_reward"] / num,
                "format_reward": data["total_format_reward"] / num,
                "answer_reward": data["total_answer_reward"] / num,
            }
        elif m := COUNT.match(line):
            counts[f"eval_{m.group(1)}_format_{m.group(2)}_answer"] = int(m.group(3))
        elif m := EVALUATED.match(line):
            step, acc = int(m.group(1)), float(m.group(2))
            if not rows or step != rows[-1]["step"] or "reward" not in rows[-1]:
                raise ValueError(f"line {n}: evaluation of batch {step} out of place")
            if len(counts) != 4 or sum(counts.values()) != EVAL_PROBLEMS:
                raise ValueError(f"line {n}: eval counts {counts}")
            if acc != counts["eval_right_format_right_answer"] / EVAL_PROBLEMS:
                raise ValueError(f"line {n}: eval_acc {acc} is not the right-right count")
            rows[-1] |= {"eval_acc": acc, **counts}
            counts = {}
        else:
            raise ValueError(f"line {n}: does not parse: {line[:80]}")
    if rows and "reward" not in rows[-1]:
        rows.pop()  # a batch generated, not trained: the log ends in it
    for row in rows:
        del row["length"]
    return rows


def main(git_dir: str, out: str) -> None:
    for run_id, commit, path in RUNS:
        rows = rows_of(git(git_dir, "show", f"{commit}:{path}"))
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
