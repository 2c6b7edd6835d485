"""Fuzzed run stores: a real store damaged byte by byte, then read by everything that reads.

The template is a run written through `Monitor` (scalars past one 256-step chunk, a
distribution, alerts, an action, events). Damage: bytes overwritten at any offset (a
page of zeros, random bytes, a flipped bit), the file cut short, or valid SQL writing
bad content (a config that is not JSON, blobs of the wrong length, a missing run id).
Then: the run list (beside a healthy run, which must stay listed), the summary,
`minirl analyze`, `minirl export`, the dashboard's loaders and `minirl repair`. Each
ends cleanly or with one UserError; repair never changes the damaged file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from bench.reliability.fuzzing import Tally, fuzz

STEPS = 300


def write_template(run: Path, steps: int = STEPS) -> None:
    """A run with every kind of record, its WAL checkpointed into the file."""
    from monitor import Monitor

    with Monitor(run, config={"name": "template", "monitor": {}}) as mon:
        for step in range(1, steps + 1):
            collapse = step > steps * 0.7
            scalars = {
                "reward/mean": 0.1 if collapse else 0.5 + 0.001 * step,
                "optim/grad_norm": 50.0 if collapse else 1.0 + 0.01 * (step % 7),
                "mismatch/kl": 1e-3 * (1 + step % 5),
                "eval/acc": 0.2 if collapse else 0.4,
            }
            dists = (
                {"policy/entropy": [0.1 * (i % 20) for i in range(64)]} if step % 10 == 0 else None
            )
            mon.log(step, scalars, dists)
        mon.request_action("scale_lr", {"factor": 0.5}, "fuzz template", source="user")
        mon.event("checkpoint", {"step": steps, "path": "x"})
    conn = sqlite3.connect(run / "store.sqlite")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


_BAD_SQL = (
    "UPDATE meta SET value = '{not json' WHERE key = 'config'",
    "UPDATE meta SET value = 'x' WHERE key = 'created_at'",
    "DELETE FROM meta WHERE key = 'run_id'",
    "UPDATE meta SET value = 'many' WHERE key = 'compacted_upto'",
    "UPDATE events SET detail = '[1, 2' WHERE id = (SELECT min(id) FROM events)",
    "UPDATE actions SET params = 'nope'",
    "UPDATE scalar_chunks SET vals = x'0102'",
    "UPDATE scalar_chunks SET steps = x'00'",
    "UPDATE histograms SET counts = x'010203' WHERE step = 10",
    "UPDATE scalars SET value = 'text' WHERE step = 5",
    "UPDATE steps SET time = NULL WHERE step = 7",
    "UPDATE alerts SET value = 'high'",
    "DROP TABLE alerts",
    "UPDATE metrics SET kind = 'other' WHERE id = 1",
)


@st.composite
def damages(draw: st.DrawFn, size: int) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["bytes", "bytes", "page", "bit", "cut", "sql"]))
    if kind == "sql":
        return kind, draw(st.lists(st.sampled_from(_BAD_SQL), min_size=1, max_size=3))
    if kind == "cut":
        return kind, draw(st.integers(0, size - 1))
    if kind == "page":
        return kind, draw(st.integers(0, size // 4096 - 1))
    offset = draw(st.integers(0, size - 1))
    if kind == "bit":
        return kind, (offset, draw(st.integers(0, 7)))
    return kind, (offset, draw(st.binary(min_size=1, max_size=64)))


def apply_damage(path: Path, damage: tuple[str, Any]) -> None:
    kind, arg = damage
    if kind == "sql":
        conn = sqlite3.connect(path)
        for sql in arg:
            with contextlib.suppress(sqlite3.Error):
                conn.execute(sql)
        conn.commit()
        conn.close()
        return
    data = bytearray(path.read_bytes())
    if kind == "cut":
        del data[arg:]
    elif kind == "page":
        data[arg * 4096 : (arg + 1) * 4096] = bytes(4096)
    elif kind == "bit":
        data[arg[0]] ^= 1 << arg[1]
    else:
        offset, chunk = arg
        data[offset : offset + len(chunk)] = chunk[: len(data) - offset]
    path.write_bytes(bytes(data))


def _read_everything(run: Path, tally: Tally) -> None:
    """Every reader on the damaged run; each may refuse with a UserError, nothing else."""
    from core.errors import UserError
    from monitor.cli.analyze import main as analyze_main
    from monitor.cli.export import main as export_main
    from monitor.store.reader import RunReader

    sink = io.StringIO()
    steps = [
        lambda: RunReader(run).summary(),
        lambda: analyze_main([str(run), "--json"]),
        lambda: export_main([str(run), "--format", "csv"]),
        lambda: _dashboard_loaders(run),
    ]
    for name, step in zip(("summary", "analyze", "export", "dashboard"), steps, strict=True):
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                step()
            tally.count(f"{name}: read")
        except UserError as err:
            assert "\n" not in str(err), f"{name}: a message of several lines: {err}"
            tally.count(f"{name}: refused in one line")


def _dashboard_loaders(run: Path) -> None:
    from dashboard import data
    from monitor.store.reader import RunReader

    with RunReader(run) as reader:
        summary = reader.summary()
    fp = (str(run), math.nan, summary.last_write)  # a fresh cache key per damaged copy
    records = data.load_records(str(run), fp)
    data.load_series(str(run), records.scalar_names, 500, fp)
    for name in records.hist_names:
        data.load_histograms(str(run), name, summary.last_step or 0, 100, 500, fp)


def fuzz_damaged_stores(n: int) -> Tally:
    """`n` damaged copies of the template store through every reader and `minirl repair`."""
    from monitor.cli.repair import main as repair_main
    from monitor.store.reader import list_runs

    with tempfile.TemporaryDirectory(prefix="fuzz-store-") as tmp:
        root = Path(tmp)
        template = root / "template"
        write_template(template)
        runs = root / "runs"
        write_template(runs / "healthy", steps=20)
        data = (template / "store.sqlite").read_bytes()

        def check(damage: tuple[str, Any], tally: Tally) -> None:
            run = runs / "damaged"
            shutil.rmtree(run, ignore_errors=True)
            shutil.rmtree(root / "repaired", ignore_errors=True)
            run.mkdir()
            store = run / "store.sqlite"
            store.write_bytes(data)
            apply_damage(store, damage)
            listed = {s.run_id: s for s in list_runs(runs)}
            healthy = [s for s in listed.values() if s.path.endswith("healthy")]
            assert healthy and healthy[0].error is None, "the healthy run disappeared"
            _read_everything(run, tally)
            before = hashlib.sha256(store.read_bytes()).hexdigest()
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                repair_main([str(run), "--out", str(root / "repaired")])
            assert hashlib.sha256(store.read_bytes()).hexdigest() == before, "repair wrote"
            tally.count("repaired")

        def names(damage: Any, message: str) -> bool:
            return "store" in message or str(runs) in message

        return fuzz("damaged run stores", damages(len(data)), check, n, names)
