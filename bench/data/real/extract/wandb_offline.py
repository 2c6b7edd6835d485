"""W&B offline run files (`run-<id>.wandb`) committed to a repository -> one corpus file per
GRPO run, one row per GRPO step.

Read with `minirl import`'s own reader of W&B run files (`monitor.importers.wandb`: the
record framing and checksums, each record a `wandb.proto` `Record`); a corrupt chunk stops
the extraction. Source: JPassionQ/assignment5-alignment's
`cs336_alignment/wandb/offline-run-*/run-*.wandb` (SOURCES.md): per GRPO step one reward
row (`grpo_step`), one row per optimizer update, an evaluation row every 5 steps
(`eval_step`, the GRPO step). A corpus row holds the step's reward, its last update's
numbers and its evaluation, values unchanged. Runs with fewer than 20 GRPO steps (the
author's SFT and trial runs) are not taken; files the snapshot lists without content are
skipped. Usage (the project's environment): python wandb_offline.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import sys

from _mirror import git, git_bytes, increasing, numeric, write_rows

from monitor.importers.wandb import check_header, history_rows, read_log

REPO, COMMIT = "JPassionQ/assignment5-alignment", "64fcffa40920b832abf2d976f5db03bf19ed39a6"
FOLDER = "cs336_alignment/wandb"
MIN_STEPS = 20


def history(data: bytes, name: str) -> list[dict]:
    """The file's `wandb.log` rows, every chunk's checksum verified."""
    check_header(data, name)
    framed = read_log(data)
    if framed.bad:
        raise SystemExit(f"{name}: {'; '.join(framed.bad)}")
    return [row for _where, _step, row in history_rows(framed.records)]


def grpo_rows(rows: list[dict]) -> list[dict]:
    """One row per GRPO step: its reward, its last update's numbers, its evaluation."""
    steps: dict[int, dict] = {}
    for row in rows:
        values = {k: v for k, v in numeric(row).items() if k[0] != "_" and not k.endswith("step")}
        step = row.get("grpo_step", row.get("eval_step"))
        if step is not None:
            steps.setdefault(int(step), {}).update(values)
    return increasing([{"step": s, **steps[s]} for s in sorted(steps)])


def main(mirror: str, out: str) -> None:
    listing = git(mirror, "ls-tree", "-r", "-l", COMMIT, FOLDER).splitlines()
    for line in listing:
        meta, path = line.split("\t")
        _mode, _kind, blob, size = meta.split()
        if not path.endswith(".wandb"):
            continue
        if not size.isdigit():  # listed, but its content is not in the snapshot
            print(f"skipped\t{path}\tnot in the snapshot")
            continue
        grpo = grpo_rows(history(git_bytes(mirror, "cat-file", "blob", blob), path))
        if sum("train/reward_mean" in r for r in grpo) < MIN_STEPS:
            continue
        run_id = path.rsplit("-", 1)[1].removesuffix(".wandb")
        write_rows(out, f"c13_jpq_{run_id}", grpo)
        print(f"c13_jpq_{run_id}\t{REPO}\t{path}\t{len(grpo)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
