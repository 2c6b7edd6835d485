"""Following one growing file across truncation and rotation, by byte offset.

A `FileCursor` hands out the bytes appended since the last read; the caller parses the
whole units at the front and `advance`s past them, so a record cut by the end of the file
is read again, whole, next time. It notices:

- truncation (the file is shorter than the offset, or its first bytes changed: a logger
  that reopened it with "w"): read again from 0;
- rotation (the path names another inode: logrotate's rename + create): the old file is
  drained to its end through the descriptor still open, then the new one read from 0.
  After a restart the rotated file is found by its inode among its siblings.

Its `state()` (path, inode, offset, head fingerprint) is JSON, stored with the run so a
restarted watcher continues where it stopped. One file per cursor; no parsing here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

HEAD = 64
"""Bytes at the start of a file whose hash tells a rewritten file from a grown one."""
MAX_READ = 64 * 1024 * 1024
"""Bytes handed out per read: a huge backlog is parsed in pieces, memory stays bounded."""


def _head_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class FileCursor:
    """The unread bytes of one file (see the module docstring)."""

    def __init__(self, path: Path, state: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.offset = 0
        self.ino: int | None = None
        self.head_len, self.head = 0, ""
        self.resets = 0
        """Times the file was found truncated, rewritten or rotated."""
        self._fh: Any = None
        if state:
            self.offset, self.ino = int(state["offset"]), state.get("ino")
            self.head_len, self.head = int(state.get("head_len", 0)), state.get("head", "")

    def state(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "offset": self.offset,
            "ino": self.ino,
            "head_len": self.head_len,
            "head": self.head,
        }

    def read(self) -> bytes:
        """Bytes from the offset to the end (at most MAX_READ); b"" if nothing is new.
        After a reset the offset is back at 0 (check `offset` before parsing)."""
        if self._fh is None and not self._open():
            return b""
        st_now = self._stat_path()
        if st_now is not None and st_now.st_ino != self.ino:  # rotated (or recreated)
            tail = self._read_fh()
            if tail:
                return tail  # drain the old file first; switch on a later read
            self._close()
            self._reset()
            return self.read() if self._open() else b""
        size = os.fstat(self._fh.fileno()).st_size
        if size < self.offset or (size > self.offset and not self._same_head()):
            self._reset()
        return self._read_fh()

    def advance(self, n: int) -> None:
        """The caller consumed `n` bytes from the offset."""
        if self.offset < HEAD and n:
            first = os.pread(self._fh.fileno(), HEAD, 0)
            self.head_len, self.head = len(first), _head_hash(first)
        self.offset += n

    def close(self) -> None:
        self._close()

    # internals ---------------------------------------------------------------------------
    def _stat_path(self) -> os.stat_result | None:
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def _open(self) -> bool:
        """Open the file the state refers to: the path, or (after a restart) its rotated
        sibling with the same inode; else the path from offset 0."""
        st_path = self._stat_path()
        target = self.path
        if self.ino is not None and (st_path is None or st_path.st_ino != self.ino):
            target = self._find_inode() or self.path
            if target == self.path:
                self._reset()
        try:
            self._fh = open(target, "rb", buffering=0)  # noqa: SIM115 (held open: rotation)
        except OSError:
            return False
        ino = os.fstat(self._fh.fileno()).st_ino
        if self.ino is not None and ino != self.ino:
            self._reset()
        self.ino = ino
        return True

    def _find_inode(self) -> Path | None:
        try:
            siblings = list(self.path.parent.iterdir())
        except OSError:
            return None
        for sibling in siblings:
            try:
                if sibling.is_file() and sibling.stat().st_ino == self.ino:
                    return sibling
            except OSError:
                continue
        return None

    def _same_head(self) -> bool:
        if not self.head_len:
            return True
        return _head_hash(os.pread(self._fh.fileno(), self.head_len, 0)) == self.head

    def _reset(self) -> None:
        if self.offset or self.head_len:
            self.resets += 1
        self.offset, self.head_len, self.head = 0, 0, ""

    def _read_fh(self) -> bytes:
        """Unbuffered positional reads: a buffered reader could serve stale bytes."""
        fd = self._fh.fileno()
        size = os.fstat(fd).st_size
        if size <= self.offset:
            return b""
        return os.pread(fd, min(size - self.offset, MAX_READ), self.offset)

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            self.ino = None
