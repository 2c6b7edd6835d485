"""Live sources for `minirl watch`: an appended JSONL file or console log, a TensorBoard
log directory, a W&B run file. Each `poll()` returns the values written since the last
poll as `Parsed` (peer names, keyed by step), reusing the importers' decoders on the new
bytes only.

A source says whether its units are whole steps (`whole_rows`: a JSONL line, a W&B
history row) or single values that may spread one step over several polls (a TensorBoard
event per tag); the watch loop waits for the latter to settle. `state()` is JSON and
restores the source after a restart (see files.py for truncation and rotation).
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any, Protocol

from core.errors import UserError
from monitor.importers import Parsed
from monitor.importers.console import ConsoleReader
from monitor.importers.jsonl import read_line
from monitor.importers.tensorboard import WireError, _read_event, masked_crc
from monitor.watch.files import FileCursor


class Source(Protocol):
    whole_rows: bool

    def poll(self, final: bool = False) -> Parsed: ...

    def state(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class JsonlSource:
    """One JSON object per line, appended (verl's file logger, any `print(json.dumps(...))`).
    A line without its newline is read once it has one, or at the final poll."""

    whole_rows = True
    unit = "line"
    """What the garbage count of a poll counts."""

    def __init__(self, path: Path, state: dict[str, Any] | None = None) -> None:
        self.cursor = FileCursor(path, (state or {}).get("file"))
        self.lines = int((state or {}).get("lines", 0))

    def poll(self, final: bool = False) -> Parsed:
        parsed = Parsed(unit=self.unit)
        data = self.cursor.read()
        if self.cursor.offset == 0:
            self._restart()
        end = data.rfind(b"\n") + 1
        if final and end < len(data) and data[end:].strip():
            end = len(data)
        for line in data[:end].splitlines():
            self.lines += 1
            if line.strip():
                self._line(line, f"line {self.lines}", parsed)
        self.cursor.advance(end)
        return parsed

    def _restart(self) -> None:
        """The file is read from its start (new, truncated or rotated)."""
        self.lines = 0

    def _line(self, line: bytes, where: str, parsed: Parsed) -> None:
        read_line(line, where, parsed)

    def state(self) -> dict[str, Any]:
        return {"file": self.cursor.state(), "lines": self.lines}

    def close(self) -> None:
        self.cursor.close()


class ConsoleSource(JsonlSource):
    """A trainer's console output, appended (`... | tee run.log`): verl's `step:N - k:v`
    lines, a Hugging Face trainer's printed log dicts, JSON lines; other text is skipped
    (monitor/importers/console.py)."""

    unit = "metric line"

    def __init__(self, path: Path, state: dict[str, Any] | None = None) -> None:
        super().__init__(path, state)
        self.reader = ConsoleReader(int((state or {}).get("hf_logs", 0)))

    def _restart(self) -> None:
        super()._restart()
        self.reader.hf_logs = 0  # a truncated or rotated log numbers its logs anew

    def _line(self, line: bytes, where: str, parsed: Parsed) -> None:
        self.reader.feed(line.decode("utf-8", errors="replace"), where, parsed)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "hf_logs": self.reader.hf_logs}


_FRAME = struct.Struct("<QI")


def _tfrecords(data: bytes, where: str, parsed: Parsed, plugins: dict[str, str]) -> int:
    """Decode the whole TFRecords at the front of `data` into `parsed`; returns the bytes
    consumed (a record cut by the end is left). -1 if the framing is lost."""
    pos = 0
    while pos + _FRAME.size <= len(data):
        length, length_crc = _FRAME.unpack_from(data, pos)
        if masked_crc(data[pos : pos + 8]) != length_crc:
            parsed.units += 1
            parsed.bad(f"{where} offset {pos}", "bad length checksum; rest of file skipped")
            return -1
        end = pos + _FRAME.size + length
        if end + 4 > len(data):
            break
        payload = data[pos + _FRAME.size : end]
        parsed.units += 1
        if masked_crc(payload) != struct.unpack_from("<I", data, end)[0]:
            parsed.bad(f"{where} offset {pos}", "bad payload checksum")
        else:
            try:
                _read_event(payload, plugins, parsed, f"{where} offset {pos}")
            except (WireError, struct.error, UnicodeDecodeError) as err:
                parsed.bad(f"{where} offset {pos}", f"not an Event protobuf ({err})")
        pos = end + 4
    return pos


class TensorBoardSource:
    """Every `*tfevents*` file under a directory (or one event file), new files included.
    One event per tag and step: a step is whole once a later step appears or it settles."""

    whole_rows = False
    RESCAN_S = 1.0

    def __init__(self, path: Path, state: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.cursors: dict[str, FileCursor] = {
            name: FileCursor(Path(s["path"]), s)
            for name, s in (state or {}).get("files", {}).items()
        }
        self.dead: set[str] = set((state or {}).get("dead", []))
        self.plugins: dict[str, str] = dict((state or {}).get("plugins", {}))
        self._scanned = 0.0

    def _scan(self) -> None:
        if self.path.is_file() or "tfevents" in self.path.name:
            files = [self.path]
        elif self.path.is_dir():
            files = sorted(p for p in self.path.rglob("*tfevents*") if p.is_file())
        else:
            files = []
        for file in files:
            name = str(file)
            if name not in self.cursors and name not in self.dead:
                self.cursors[name] = FileCursor(file)
        self._scanned = time.monotonic()

    def poll(self, final: bool = False) -> Parsed:
        parsed = Parsed(unit="record")
        if final or time.monotonic() - self._scanned >= self.RESCAN_S:
            self._scan()
        for name, cursor in list(self.cursors.items()):
            data = cursor.read()
            if not data:
                if not cursor.path.exists():  # deleted and read to its end: forget it
                    cursor.close()
                    del self.cursors[name]
                continue
            used = _tfrecords(data, cursor.path.name, parsed, self.plugins)
            if used < 0:
                self.dead.add(name)
                cursor.close()
                del self.cursors[name]
            else:
                cursor.advance(used)
        return parsed

    def state(self) -> dict[str, Any]:
        return {
            "files": {name: c.state() for name, c in self.cursors.items()},
            "dead": sorted(self.dead),
            "plugins": self.plugins,
        }

    def close(self) -> None:
        for cursor in self.cursors.values():
            cursor.close()


class WandbSource:
    """The `.wandb` transaction log of one W&B run (a run directory, `wandb/` with its
    latest-run, or the file); one history record is one whole row."""

    whole_rows = True

    def __init__(self, path: Path, state: dict[str, Any] | None = None) -> None:
        from monitor.importers import wandb

        self._wandb = wandb
        self.path = Path(path)
        saved = (state or {}).get("file")
        self.cursor = FileCursor(Path(saved["path"]), saved) if saved else None

    def poll(self, final: bool = False) -> Parsed:
        parsed = Parsed(unit="record")
        if self.cursor is None:
            try:
                self.cursor = FileCursor(self._wandb.run_file(self.path))
            except UserError:
                if self.path.is_file() or any(self.path.glob("*.wandb")):
                    raise  # more than one run file: the user must choose
                return parsed  # the run has not started yet
        data = self.cursor.read()
        start = self.cursor.offset
        if start == 0:
            if len(data) < self._wandb.HEADER.size:
                return parsed
            self._wandb.check_header(data, str(self.cursor.path))
        framed = self._wandb.read_log(data, start)
        self._wandb.add_rows(framed, parsed)
        self.cursor.advance(framed.end - start)
        return parsed

    def state(self) -> dict[str, Any]:
        return {"file": self.cursor.state() if self.cursor else None}

    def close(self) -> None:
        if self.cursor is not None:
            self.cursor.close()
