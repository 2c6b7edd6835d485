"""W&B run files (`wandb/run-*/run-*.wandb`): the local transaction log of every W&B run.

Every run, online or offline, writes its full history to this file before anything goes
over the network, so it is readable with no login and no network. The framing is
LevelDB's log format behind a 7-byte header (`:W&B`, magic 0xBEE1, version 0):

- the file is a sequence of 32 KiB blocks (the header sits at the start of block 0);
- a chunk is `crc uint32 | length uint16 | type uint8 | data` (little-endian), never
  crossing a block; fewer than 7 bytes left in a block are zero padding;
- type FULL holds a whole record, FIRST/MIDDLE/LAST hold the pieces of a longer one;
- the checksum covers the type byte and the data. wandb writes a plain CRC-32 (zlib's);
  LevelDB's own masked CRC-32C is accepted too.

Each record is a `wandb.proto.wandb_internal_pb2.Record`; history rows are
`record.history.item` (`nested_key` joined with '/', or `key`; the value in `value_json`
or in the typed `value` oneof). The framing is read here; the protobufs need the `wandb`
package, imported only when a record is decoded. A corrupt chunk skips the rest of its
block (as LevelDB's reader does), counted as garbage.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from monitor.importers.parsed import STEP_KEYS, Parsed, as_step, as_value
from monitor.importers.tensorboard import masked_crc

HEADER = struct.Struct("<4sHB")
IDENT, MAGIC, VERSION = b":W&B", 0xBEE1, 0
BLOCK = 32 * 1024
CHUNK = struct.Struct("<IHB")
ZERO, FULL, FIRST, MIDDLE, LAST = 0, 1, 2, 3, 4


@dataclass
class Framed:
    """Whole records read from a byte range of a run file."""

    records: list[tuple[int, bytes]] = field(default_factory=list)
    """(file offset where the record starts, payload)."""
    end: int = 0
    """File offset after the last whole record: where the next read starts."""
    bad: list[str] = field(default_factory=list)
    """Corrupt chunks skipped ('offset 123: bad checksum')."""


def _crc_ok(kind: int, data: bytes, crc: int) -> bool:
    head = bytes((kind,))
    return zlib.crc32(data, zlib.crc32(head)) == crc or masked_crc(head + data) == crc


def check_header(data: bytes, name: str) -> None:
    """UserError unless `data` starts with the W&B run file header."""
    ident, magic, version = HEADER.unpack_from(data)
    if ident != IDENT or magic != MAGIC or version != VERSION:
        raise UserError(f"{name} is not a W&B run file (header {data[:7]!r})")


def read_log(data: bytes, start: int = 0) -> Framed:
    """The whole records in `data`, the bytes of a run file from offset `start` on (a
    record boundary: 0, or a previous `Framed.end`). A record cut by the end of `data`
    is left for the next read; `end` says where it begins."""
    out = Framed(end=start)
    pos, n = (HEADER.size if start == 0 else start), start + len(data)
    if start == 0:
        if len(data) < HEADER.size:
            return out
        out.end = HEADER.size
    parts: list[bytes] = []
    first = pos
    while True:
        left = BLOCK - pos % BLOCK
        if left < CHUNK.size:  # block trailer: zero padding
            if pos + left > n:
                break
            pos += left
            continue
        if pos + CHUNK.size > n:
            break
        crc, length, kind = CHUNK.unpack_from(data, pos - start)
        if crc == 0 and length == 0 and kind == ZERO:  # not written yet (or preallocated)
            break
        if length + CHUNK.size > left or kind not in (FULL, FIRST, MIDDLE, LAST):
            out.bad.append(f"offset {pos}: bad chunk header (type {kind}, length {length})")
            parts, pos = [], pos + left  # the framing of this block is lost: skip it
            out.end = min(pos, n)
            continue
        if pos + CHUNK.size + length > n:
            break
        body = data[pos - start + CHUNK.size : pos - start + CHUNK.size + length]
        chunk_at, pos = pos, pos + CHUNK.size + length
        if not _crc_ok(kind, body, crc):
            out.bad.append(f"offset {chunk_at}: bad checksum")
            parts, pos = [], chunk_at + left
            out.end = min(pos, n)
            continue
        if kind in (FULL, FIRST) and parts:
            out.bad.append(f"offset {first}: record without its last piece")
            parts = []
        if kind in (FULL, FIRST):
            first = chunk_at
        if kind == FULL:
            out.records.append((first, body))
            out.end = pos
        elif kind == FIRST:
            parts = [body]
        elif not parts:  # MIDDLE or LAST without a FIRST (e.g. after a skipped block)
            out.bad.append(f"offset {chunk_at}: record piece without its first piece")
            out.end = pos
        elif kind == MIDDLE:
            parts.append(body)
        else:
            out.records.append((first, b"".join([*parts, body])))
            parts, out.end = [], pos
    return out


def _record_class() -> Any:
    try:
        from wandb.proto.wandb_internal_pb2 import Record
    except ImportError as err:
        raise UserError(
            f"reading W&B run files needs the wandb package (pip install wandb): {err}"
        ) from None
    return Record


def _item_value(item: Any) -> object:
    kind = item.WhichOneof("value")
    if kind in ("integer", "number", "boolean"):
        return float(getattr(item, kind))
    if kind == "json":
        return json.loads(item.json)
    if kind is not None:  # text, none
        return None
    return json.loads(item.value_json) if item.value_json else None


def history_rows(records: list[tuple[int, bytes]]) -> Iterator[tuple[str, int | None, dict]]:
    """(where, step, {name: decoded value}) of each history record; step None if absent."""
    record_cls = _record_class()
    for offset, payload in records:
        record = record_cls()
        try:
            record.ParseFromString(payload)
        except Exception:  # protobuf's DecodeError; keep the rest of the file
            yield f"offset {offset}", None, {"": "not a W&B Record"}
            continue
        if record.WhichOneof("record_type") != "history":
            continue
        row: dict = {}
        step: int | None = record.history.step.num if record.history.HasField("step") else None
        for item in record.history.item:
            name = "/".join(item.nested_key) if item.nested_key else item.key
            try:
                row[name] = _item_value(item)
            except ValueError:
                row[name] = None
        # a trainer's step key that holds a step wins over W&B's own (NaN or 1.5 is not one)
        step = next((s for k in STEP_KEYS if (s := as_step(row.get(k))) is not None), step)
        yield f"offset {offset}", step, row


def add_rows(framed: Framed, parsed: Parsed) -> None:
    """History rows of `framed` into `parsed` (underscore keys are W&B bookkeeping)."""
    for where in framed.bad:
        parsed.units += 1
        parsed.bad(where, "corrupt chunk skipped")
    for where, step, row in history_rows(framed.records):
        parsed.units += 1
        if "" in row:
            parsed.bad(where, row[""])
            continue
        if step is None:
            parsed.bad(where, "history row without a step")
            continue
        for name, raw in row.items():
            if name.startswith("_") or name in STEP_KEYS:
                continue
            value = as_value(raw)
            if value is None:
                parsed.non_numeric += 1
            else:
                parsed.add(step, name, value)


def run_file(path: Path) -> Path:
    """The `.wandb` file of `path`: the file itself, a run directory, or a `wandb/`
    directory (its `latest-run`). UserError if there is none or more than one."""
    if path.is_file():
        return path
    if (path / "latest-run").is_dir():
        path = (path / "latest-run").resolve()
    found = sorted(path.glob("*.wandb"))
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise UserError(f"{what} W&B run files (*.wandb) in {path}; point at one run directory")
    return found[0]


def is_wandb(path: Path) -> bool:
    """A `.wandb` file, or a directory holding one (a run dir, or `wandb/` with latest-run)."""
    if path.is_file():
        return path.suffix == ".wandb"
    return path.is_dir() and (any(path.glob("*.wandb")) or (path / "latest-run").is_dir())


def parse_wandb(path: Path) -> Parsed:
    """Every history row of a W&B run file (or run directory)."""
    file = run_file(path)
    data = file.read_bytes()
    parsed = Parsed(unit="record")
    if len(data) < HEADER.size:
        return parsed
    check_header(data, str(file))
    add_rows(read_log(data), parsed)
    return parsed
