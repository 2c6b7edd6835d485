"""The disk filling up under a store write and under a checkpoint write.

Real when it can be: a small tmpfs mounted for the purpose (root on Linux), holding the
run directory; the store and the trainer then meet ENOSPC / SQLITE_FULL from the kernel.
Otherwise simulated: the store's file capped with `PRAGMA max_page_count` (SQLite then
reports SQLITE_FULL exactly as on a full disk) and `torch.save` failing with ENOSPC.
Checks: one clear error (a UserError of one line; `minirl train` exits 2 without a
traceback), the store intact (integrity check, every step before the failure kept), no
partial checkpoint file; after space is freed, the documented resume finishes the run.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

from bench.reliability import procs
from bench.reliability.kill_train import STEPS, tiny_config
from core.typed_config import yaml_dump

WRITER = """
import sys
from monitor import Monitor
from core.errors import UserError
try:
    with Monitor(sys.argv[1], resume=True) as mon:
        step = (mon.last_step() or 0) + 1
        while step <= int(sys.argv[2]):
            mon.log(step, {f"m/{i:02d}": float(step) for i in range(40)})
            step += 1
except UserError as err:
    print(f"UserError: {err}")
    sys.exit(2)
"""


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[bool]:
    """A tmpfs of `size` mounted at `where` (True), or an ordinary folder (False)."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                capture_output=True,
            ).returncode
            == 0
        )
    except OSError:
        mounted = False
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], capture_output=True)


def _grow(where: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)


def _store_ok(run: Path) -> tuple[bool, int]:
    conn = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
    try:
        ok = conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        steps = [r[0] for r in conn.execute("SELECT step FROM steps ORDER BY step")]
        return ok and steps == list(range(steps[0], steps[0] + len(steps))), len(steps)
    finally:
        conn.close()


def store_write(work: Path, size: str = "300k") -> dict:
    """A Monitor writer on a disk that fills up, then (space freed) resumed to the end."""
    mnt = work / "full-store"
    with tmpfs(mnt, size) as real:
        run = mnt / "run"
        if not real:  # simulated: cap the file at what 300 steps need
            return _store_write_simulated(work)
        out = subprocess.run(procs_cmd(run, 100_000), capture_output=True, text=True)
        message = out.stdout.strip()
        intact, kept = _store_ok(run)
        _grow(mnt, "64m")
        resumed = subprocess.run(procs_cmd(run, kept + 200), capture_output=True, text=True)
        after_ok, after = _store_ok(run)
    one_line = out.returncode == 2 and message.count("\n") == 0 and "full" in message
    ok = one_line and intact and resumed.returncode == 0 and after_ok and after == kept + 200
    return {
        "ok": ok,
        "how": "tmpfs " + size,
        "error": message[:400],
        "steps_kept": kept,
        "after_resume": after,
    }


def procs_cmd(run: Path, last: int) -> list[str]:
    import sys

    return [sys.executable, "-c", WRITER, str(run), str(last)]


def _store_write_simulated(work: Path) -> dict:
    from core.errors import UserError
    from monitor import Monitor

    run = work / "full-store-sim"
    message, kept = "", 0
    with Monitor(run) as mon:
        for step in range(1, 50):
            mon.log(step, {f"m/{i:02d}": float(step) for i in range(40)})
        pages = mon.store._conn.execute("PRAGMA page_count").fetchone()[0]
        mon.store._conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        try:
            for step in range(50, 100_000):
                mon.log(step, {f"m/{i:02d}": float(step) for i in range(40)})
        except UserError as err:
            message = str(err)
    intact, kept = _store_ok(run)
    ok = "full" in message and "\n" not in message and intact
    return {
        "ok": ok,
        "how": "simulated (max_page_count)",
        "error": message[:400],
        "steps_kept": kept,
    }


def checkpoint_write(work: Path, free: int = 2_500_000) -> dict:
    """`minirl train` on a tmpfs with `free` bytes left: more than the store needs until the
    first checkpoint (step 4), less than a checkpoint (3 MB). The checkpoint write meets
    the full disk: one line, exit 2; then (space freed) --resume finishes the run."""
    mnt = work / "full-train"
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "cache"
    config = work / "full.yaml"
    config.write_text(yaml_dump({**tiny_config(cache), "checkpoint_every": 4}))
    with tmpfs(mnt, "64m") as real:
        if not real:
            return {"ok": None, "how": "skipped: no tmpfs (the tests simulate it in-process)"}
        run, ballast = mnt / "run", mnt / "ballast"
        args = ("train", str(config), "--run-dir", str(run), "--quiet")
        log = work / "full-train.log"
        stat = os.statvfs(mnt)
        with ballast.open("wb") as f:  # the disk is nearly full before the run starts
            f.truncate(max(0, stat.f_bavail * stat.f_frsize - free))
            os.posix_fallocate(f.fileno(), 0, max(1, stat.f_bavail * stat.f_frsize - free))
        proc = procs.minirl(*args, log=log)
        code = proc.wait(timeout=600)
        text = log.read_text()
        intact, kept = _store_ok(run)
        partial = [p.name for p in run.rglob("*.tmp[0-9]*")]
        ballast.unlink()  # space freed
        (work / "full-train-first.log").write_text(text)
        resumed = procs.minirl(*args, "--resume", log=log).wait(timeout=600)
        _, after = _store_ok(run)
    error = [line for line in text.splitlines() if "error" in line]
    ok = code == 2 and len(error) == 1 and "Traceback" not in text and intact and not partial
    ok = ok and resumed == 0 and after == STEPS + 1
    return {
        "ok": ok,
        "how": f"tmpfs with {free // 1000} kB free",
        "exit": code,
        "error": (error or [""])[0][:400],
        "steps_kept": kept,
        "partial_files": partial,
        "resume_exit": resumed,
    }


def _stored(run: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute("SELECT count(*) FROM steps").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0
