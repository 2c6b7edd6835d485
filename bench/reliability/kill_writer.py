"""A `Monitor` writer killed over and over, and readers polling the store it writes.

The writer logs WIDTH scalars per step in a tight loop (plus an event every 50 steps);
the harness SIGKILLs it at a random moment, checks the store, and starts it again the
documented way (`Monitor(run_dir, resume=True)`, logging from `last_step() + 1`).
Checks after every kill: SQLite's integrity check passes, the steps are 1..last with no
gap, and every stored step is complete (all WIDTH values, each the one written). While
it runs, reader threads poll the store through `RunReader` (summary, series, export
rows) and `minirl analyze` / `minirl export` run against it: any lock error is counted.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import REPO
from bench.reliability import procs

WIDTH = 20
WRITER = f"""
import sys
from monitor import Monitor
run = sys.argv[1]
mon = Monitor(run, resume=True)
step = (mon.last_step() or 0) + 1
while True:
    mon.log(step, {{f"m/{{i:02d}}": step * 1000.0 + i for i in range({WIDTH})}})
    if step % 50 == 0:
        mon.event("checkpoint", {{"step": step}})
    step += 1
"""


@dataclass
class WriterResult:
    """What the kill loop saw; every count but kills, steps and reads must end at 0.

    Attributes:
        kills: SIGKILLs sent to the writer, each in the middle of its logging.
        steps: steps in the store at the end.
        reads: reads while the writer was being killed (RunReaders, and `minirl analyze`
            / `export` in subprocesses); `lock_errors` of them failed on a lock (the busy
            timeout elapsed), `other_read_errors` holds any other error's message.
        gaps: store checks (one after each kill) at which the steps were not 1..N
            without a hole.
        incomplete: stored steps with fewer metrics than the writer logs per step (torn).
        wrong_values: stored values differing from what the writer computes for their
            step and name.
        integrity_failures: SQLite `PRAGMA integrity_check` results other than ok.
    """

    kills: int = 0
    steps: int = 0
    reads: int = 0
    lock_errors: int = 0
    other_read_errors: list[str] = field(default_factory=list)
    gaps: int = 0
    incomplete: int = 0
    wrong_values: int = 0
    integrity_failures: int = 0


def check_store(run: Path, result: WriterResult) -> int:
    """Integrity, contiguity and completeness of the store; returns its last step."""
    conn = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True, timeout=10)
    try:
        if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            result.integrity_failures += 1
        steps = [r[0] for r in conn.execute("SELECT step FROM steps ORDER BY step")]
        result.gaps += int(steps != list(range(1, len(steps) + 1)))
        rows = conn.execute(
            "SELECT s.step, count(*), sum(s.value = s.step * 1000.0 + CAST(substr(m.name, 3)"
            " AS INTEGER)) FROM scalars s JOIN metrics m ON m.id = s.metric_id GROUP BY s.step"
        ).fetchall()
        result.incomplete += sum(n != WIDTH for _, n, _ in rows) + len(steps) - len(rows)
        result.wrong_values += sum(n - ok for _, n, ok in rows)
        return steps[-1] if steps else 0
    finally:
        conn.close()


def _poll(run: Path, stop: threading.Event, result: WriterResult, lock: threading.Lock) -> None:
    from core.errors import UserError
    from monitor import RunReader

    while not stop.is_set():
        try:
            with RunReader(run) as reader:
                reader.summary()
                names = reader.metric_names()
                reader.scalars(names[:5], every=10, agg="max")
                for _ in reader.rows(start=max(0, (reader.last_step() or 0) - 50)):
                    pass
            ok, error = True, ""
        except UserError as err:
            ok, error = False, str(err)
        with lock:
            result.reads += 1
            if not ok:
                _count(error, result)


NOT_YET = ("no run store", "(empty database)")
"""Before the first writer has created the store (its file, then its tables): no run yet."""


def _count(error: str, result: WriterResult) -> None:
    if "locked" in error or "busy" in error:
        result.lock_errors += 1
    elif not any(text in error for text in NOT_YET):
        result.other_read_errors.append(error[:200])


def _cli_reads(run: Path, stop: threading.Event, result: WriterResult, lock) -> None:
    while not stop.is_set():
        for args in (("analyze", str(run), "--json"), ("export", str(run), "--format", "csv")):
            out = subprocess.run(
                [sys.executable, "-m", "app.cli", *args],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=120,
            )
            with lock:
                result.reads += 1
                if out.returncode != 0:
                    _count(out.stderr.strip(), result)


def run(work: Path, kills: int, seed: int = 0, readers: int = 2) -> WriterResult:
    run_dir, result, lock = work / "writer", WriterResult(), threading.Lock()
    work.mkdir(parents=True, exist_ok=True)
    rng, stop = random.Random(seed), threading.Event()
    threads = [
        threading.Thread(target=_poll, args=(run_dir, stop, result, lock)) for _ in range(readers)
    ] + [threading.Thread(target=_cli_reads, args=(run_dir, stop, result, lock))]
    started = False
    try:
        for _ in range(kills):
            proc = procs.python(WRITER, str(run_dir), log=work / "writer.log")
            procs.wait_for(lambda: (run_dir / "store.sqlite").is_file(), 60, proc)
            if not started:
                for t in threads:
                    t.start()
                started = True
            time.sleep(rng.uniform(0.3, 1.5))
            if proc.poll() is not None:
                raise RuntimeError(f"the writer died by itself; see {work / 'writer.log'}")
            procs.stop(proc)
            result.kills += 1
            result.steps = check_store(run_dir, result)
    finally:
        stop.set()
        for t in threads:
            if t.is_alive() or started:
                t.join(timeout=180)
    return result
