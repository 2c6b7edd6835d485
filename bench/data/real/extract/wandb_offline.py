"""W&B offline run files (`run-<id>.wandb`) committed to a repository -> one corpus file per
GRPO run, one row per GRPO step.

A `.wandb` file is W&B's own transaction log: a 7-byte header (`:W&B`, magic, version),
then LevelDB-style log records (7-byte header: CRC-32C, length, type full/first/middle/last;
32 KiB blocks, a block's tail under 7 bytes left as padding), each a `wandb.proto` `Record`.
Its `history` records are what `wandb.log` was given. Read here without the SDK (whose
reader moved to its Go core). Source: JPassionQ/assignment5-alignment's
`cs336_alignment/wandb/offline-run-*/run-*.wandb` (SOURCES.md): per GRPO step one reward
row (`grpo_step`), one row per optimizer update, an evaluation row every 5 steps
(`eval_step`, the GRPO step). A corpus row holds the step's reward, its last update's
numbers and its evaluation, values unchanged. Runs with fewer than 20 GRPO steps (the
author's SFT and trial runs) are not taken; files the snapshot lists without content are
skipped. Usage: python wandb_offline.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator

from _mirror import git, git_bytes, increasing, numeric, write_rows

REPO, COMMIT = "JPassionQ/assignment5-alignment", "64fcffa40920b832abf2d976f5db03bf19ed39a6"
FOLDER = "cs336_alignment/wandb"
MIN_STEPS = 20
BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(data: bytes) -> Iterator[bytes]:
    """The payloads of a `.wandb` file's log records, in order."""
    if data[:4] != b":W&B":
        raise ValueError("not a W&B transaction log")
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if left < HEADER or (length == 0 and kind == 0):  # a block's padding
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
            pending = b""
        else:
            raise ValueError(f"record type {kind} at byte {pos}")


def history(data: bytes) -> list[dict]:
    """The file's `wandb.log` rows."""
    from wandb.proto import wandb_internal_pb2 as pb  # the dev environment's wandb

    rows = []
    for raw in records(data):
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            item = record.history.item
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in item})
    return rows


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
        grpo = grpo_rows(history(git_bytes(mirror, "cat-file", "blob", blob)))
        if sum("train/reward_mean" in r for r in grpo) < MIN_STEPS:
            continue
        run_id = path.rsplit("-", 1)[1].removesuffix(".wandb")
        write_rows(out, f"c13_jpq_{run_id}", grpo)
        print(f"c13_jpq_{run_id}\t{REPO}\t{path}\t{len(grpo)} steps\t{COMMIT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
