"""MiniMind (jingyaogong/minimind) GRPO trainer console logs -> corpus rows.

MiniMind's GRPO scripts print one line per optimizer step,
`Epoch:[e/E](s/S), Reward: r, KL_ref: k, ...`; a corpus row is the line's `name: value`
pairs under the source's own names, values unchanged, with `step` = s, checked to count
1..S with no gap (one epoch). Other lines (debug samples, warnings) are not steps.
Sources, each read at the commit named here from a fetched mirror:
- Coicozoi/minimind-from-scratch, `logs/grpo.log` (GRPO v1, `trainer/train_grpo.py` with a
  reward model) and `logs/r1_main.log` (GRPO v2, the repository's `trainer/train_grpo_r1.py`
  with a rule-based GSM8K reward); the first commit's `logs/r1_main.log` is an earlier
  200-step execution of v2, replaced by the 500-step rerun: its rewards are not a prefix
  of the rerun's, so it is a run of its own.
Usage: python minimind_log.py <owner/name> <mirror git dir> <out dir>
"""

from __future__ import annotations

import re
import sys

from _mirror import git, write_rows

HEAD = "dc34a2d689504c2436f87e1b0b2029a5d2b6489e"
FIRST = "a1fbaada49352486510b44720ee9d44b6b4d17bf"
SOURCES = {  # repository -> [(commit, path, run id)]
    "Coicozoi/minimind-from-scratch": [
        (HEAD, "logs/grpo.log", "p4_minimind_grpo_v1_rm"),
        (HEAD, "logs/r1_main.log", "p4_minimind_grpo_v2_r1"),
        (FIRST, "logs/r1_main.log", "p4_minimind_grpo_v2_r1_200_a1fbaada"),
    ],
}
LINE = re.compile(r"^Epoch:\[\d+/\d+\]\((\d+)/(\d+)\), (.*)$", re.M)


def rows_of(text: str) -> list[dict]:
    rows, total = [], None
    for m in LINE.finditer(text):
        pairs = (part.split(": ") for part in m.group(3).split(", "))
        rows.append({"step": int(m.group(1)), **{k: float(v) for k, v in pairs}})
        total = int(m.group(2))
    if [r["step"] for r in rows] != list(range(1, (total or 0) + 1)):
        raise ValueError(f"steps do not count 1..{total}")
    return rows


def main(repo: str, git_dir: str, out: str) -> None:
    if repo not in SOURCES:
        raise SystemExit(f"{repo}: not one of {sorted(SOURCES)}")
    for commit, path, run_id in SOURCES[repo]:
        text = git(git_dir, "show", f"{commit}:{path}")
        rows = rows_of(text)
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{repo}\t{path}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
