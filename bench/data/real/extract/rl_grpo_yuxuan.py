"""yuxuanwang2009/RL_GRPO: `grpo_metrics.json`, which the repository's own GRPO loop
(`train_grpo.py`) writes once at the end of a run -> one corpus row per logged point.

The file is a dict of equal-length lists, one entry per logged point: every 10 training steps
the loop appends the mean of its last 10 (`v1`) or up to 20 (later runs) per-step values
(`rewards_avg`, `accuracies_avg` / `train_accuracies_avg`, `kl_avg`) and, from `parity`
on, one greedy evaluation on fresh held-out prompts made at that step (`val_accuracies_avg`).
The file has no step field: a row's `step` is the training step its code appends it at,
10 (i + 1) for `v1` (from step 10, once 10 values are held), 10 i for the later runs (from
step 0); values unchanged. Five runs rewrote the file (none a prefix of another); `v2`
(`SKIPPED`) does not match the code committed with it, so its steps are unknown.
Checked: all lists of one length, all numbers, >= 20 points, the set of versions, and each
training accuracy x window x rollouts a whole count (the window each code version implies).
Usage: python rl_grpo_yuxuan.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import sys

from _mirror import git, numeric, write_rows

PATH = "grpo_metrics.json"
ACC, TRAIN_ACC = "accuracies_avg", "train_accuracies_avg"
RUNS = [  # (corpus id, commit, rollouts per step, accuracy list, window rule)
    ("c9_yuxuan_arith_v1", "6c2cf6c568e4e087983ef8c59a2d22299956e88d", 32, ACC, "10"),
    ("c9_yuxuan_arith_v3", "a4d587d4a3d93404eceb6965d343fd2d943a470c", 32, ACC, "0"),
    ("c9_yuxuan_parity", "ff04ed71de47a76d9602c2846065fd1822cf79ef", 64, TRAIN_ACC, "0"),
    ("c9_yuxuan_countdown", "becc93a6ef1a59b89aaa5aa9e2803409ad11e57f", 64, TRAIN_ACC, "0"),
]
SKIPPED = "c354c3f8a96611f1188237afdcc6f0b436af3678"  # arith v2: 199 points, its code 400
MIN_POINTS = 20


def window(rule: str, i: int) -> int:
    """Steps averaged into point i: a fixed window, or ("0") logged from step 0 with a
    20-deep deque, so min(10 i + 1, 20)."""
    return min(10 * i + 1, 20) if rule == "0" else int(rule)


def rows_of(text: str, rollouts: int, acc_key: str, rule: str) -> list[dict]:
    data = json.loads(text)
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ValueError("not a dict of lists")
    lengths = {k: len(v) for k, v in data.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"lists of unequal length: {lengths}")
    n = next(iter(lengths.values()))
    if n < MIN_POINTS:
        raise ValueError(f"{n} points, fewer than {MIN_POINTS}")
    rows = []
    for i in range(n):
        record = {k: v[i] for k, v in data.items()}
        row = numeric(record)
        if len(row) != len(record):
            raise ValueError(f"point {i + 1}: a value that is not a number: {record}")
        count = row[acc_key] * window(rule, i) * rollouts  # correct rollouts in the window
        if abs(count - round(count)) > 1e-6:
            raise ValueError(f"point {i + 1}: {acc_key} {row[acc_key]} is no whole count")
        rows.append({"step": 10 * i if rule == "0" else 10 * (i + 1), **row})
    return rows


def main(git_dir: str, out: str) -> None:
    blobs = {}
    for c in git(git_dir, "log", "--all", "--format=%H", "--", PATH).split():
        listed = git(git_dir, "ls-tree", c, "--", PATH).split()
        if listed:
            blobs[listed[2]] = c
    taken = [commit for _, commit, *_ in RUNS] + [SKIPPED]
    want = {git(git_dir, "rev-parse", f"{commit}:{PATH}").strip() for commit in taken}
    if set(blobs) != want:
        raise ValueError(f"{PATH}: {len(blobs)} versions in the history, {len(want)} taken")
    texts = {commit: git(git_dir, "show", f"{commit}:{PATH}") for commit in taken}
    lists = {c: json.loads(t) for c, t in texts.items()}
    for a in lists:  # no version continues another (each run rewrote the file)
        for b in lists:
            if (
                a != b
                and lists[a].keys() <= lists[b].keys()
                and all(lists[b][k][: len(v)] == v for k, v in lists[a].items())
            ):
                raise ValueError(f"{a} is a prefix of {b}")
    for run_id, commit, rollouts, acc_key, rule in RUNS:
        rows = rows_of(texts[commit], rollouts, acc_key, rule)
        write_rows(out, run_id, rows)
        print(f"{run_id}\t{PATH}\t{len(rows)} steps\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
