"""Salvage a damaged run store: what SQLite can still read, checked, in a new store.

1. Copy the damaged file (and its WAL) to a temporary folder: the original is never
   opened, so nothing can change it (even a read-only open may replay a WAL).
2. Read every row SQLite can still reach, table by table, in key order: where a read
   fails on an unreadable page, seek past it (doubling the jump, then narrowing back to
   the first key that reads again), so one bad page costs the rows on it, not the rest
   of the table. (The sqlite3 shell's `.recover` scans raw pages instead, but it needs
   the `sqlite_dbpage` virtual table, which Debian's build of SQLite 3.40 lacks.)
3. Write the rows that decode into a fresh store of the current schema, table by table:
   a config that is not JSON, a blob of the wrong length, a step out of range is dropped
   and counted; the 256-step chunks are rebuilt from the rows (and fill rows lost from
   `scalars`); a step with values keeps its heartbeat row.

The report says, per table, how many rows were kept and dropped, and how many the
damaged file still counted, when it could count them.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.errors import UserError
from monitor.store.schema import (
    APP_ID,
    CHUNK_STEPS,
    MAX_STEP,
    MIGRATIONS,
    SCHEMA_VERSION,
    STORE_FILE,
    compact,
    name_problem,
    text_problem,
)

TABLES = ("meta", "metrics", "steps", "scalars", "histograms", "alerts", "actions", "events")
_KEYS = {"meta": "key", "metrics": "id", "steps": "step", "scalars": "step",
         "histograms": "step", "alerts": "id", "actions": "id", "events": "id",
         "scalar_chunks": "lo"}  # fmt: skip
"""The key each table is walked by; the (metric, step) tables are walked per metric."""
_PER_METRIC = ("scalars", "histograms", "scalar_chunks")
_JSON_META = ("config", "controls", "started", "source")
MAX_KEY = 2**63 - 1
METHOD = "row by row, around unreadable pages"
_SQL_ERRORS = (sqlite3.Error, UnicodeDecodeError)
"""A damaged schema can make SQLite's own error message invalid UTF-8."""


@dataclass
class SalvageReport:
    source: Path
    method: str
    kept: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    counted: dict[str, int | None] = field(default_factory=dict)
    """Rows the damaged file reported per table (None: it could not count them)."""
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for table in TABLES:
            before = self.counted.get(table)
            of = f" of {before}" if before is not None else " (the damaged file could not count)"
            bad = f", {self.dropped[table]} unreadable dropped" if self.dropped.get(table) else ""
            out.append(f"{table}: kept {self.kept.get(table, 0)}{of}{bad}")
        return out + self.notes

    def summary(self) -> str:
        lost = [
            f"{t} {self.counted[t] - self.kept.get(t, 0)} of {self.counted[t]}"
            for t in TABLES
            if self.counted.get(t) is not None and self.kept.get(t, 0) < self.counted[t]
        ]
        unknown = [t for t in TABLES if self.counted.get(t) is None]
        text = f"rows lost: {', '.join(lost) or 'none counted'}"
        return text + (f"; uncountable: {', '.join(unknown)}" if unknown else "")


@contextlib.contextmanager
def salvaged(src: Path) -> Iterator[tuple[Path, SalvageReport]]:
    """(a salvaged copy of store `src`, the report), in a temporary folder removed after."""
    with tempfile.TemporaryDirectory(prefix="minirl-salvaged-") as tmp:
        report = salvage(src, Path(tmp))
        yield Path(tmp) / STORE_FILE, report


def salvage(src: Path, dst_dir: Path) -> SalvageReport:
    """Salvage the store file `src` into a new store in `dst_dir` (which must not hold one)."""
    with tempfile.TemporaryDirectory(prefix="minirl-salvage-") as tmp:
        copy = Path(tmp) / "damaged.sqlite"
        shutil.copyfile(src, copy)
        if Path(f"{src}-wal").is_file():
            shutil.copyfile(f"{src}-wal", f"{copy}-wal")
        report = SalvageReport(src, METHOD, counted=_count(copy))
        try:
            source = sqlite3.connect(copy)
        except _SQL_ERRORS as err:
            raise UserError(f"{src}: SQLite cannot open it at all ({err})") from None
        source.text_factory = _text  # damaged text is dropped with its row, not fatal
        try:
            _rebuild(source, dst_dir / STORE_FILE, report)
        finally:
            source.close()
    return report


def _count(path: Path) -> dict[str, int | None]:
    counted: dict[str, int | None] = dict.fromkeys(TABLES)
    with contextlib.suppress(*_SQL_ERRORS), contextlib.closing(sqlite3.connect(path)) as conn:
        conn.text_factory = bytes
        for table in TABLES:
            with contextlib.suppress(*_SQL_ERRORS):
                counted[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return counted


def _rows(conn: sqlite3.Connection, table: str, columns: str, where: str = "") -> Iterator:
    """Rows of `table` in key order, around unreadable pages. Integer keys are walked
    with seeks past the damage; `meta`'s text keys are read forwards to the first bad
    page, then backwards from the end to it."""
    key = _KEYS[table]
    if table == "meta":
        yield from _both_ways(conn, table, key, columns)
        return
    select = f"SELECT {key}, {columns} FROM {table} WHERE {where}{key} > ? ORDER BY {key}"

    def readable(after: int) -> bool:
        try:
            conn.execute(select + " LIMIT 1", (after,)).fetchall()
        except _SQL_ERRORS:
            return False
        return True

    last = -1
    while True:
        try:
            for row in conn.execute(select, (last,)):
                last = row[0]
                yield row[1:]
            return  # read to the end
        except _SQL_ERRORS:
            jump = 1
            while not readable(last + jump):
                jump *= 2
                if last + jump > MAX_KEY:
                    return  # nothing after the damage can be reached
            lo, hi = last + jump // 2, last + jump  # the first key that reads is in (lo, hi]
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if readable(mid) else (mid, hi)
            last = hi


def _both_ways(conn: sqlite3.Connection, table: str, key: str, columns: str) -> Iterator:
    seen: set = set()
    for order in ("ASC", "DESC"):
        try:
            for row in conn.execute(f"SELECT {key}, {columns} FROM {table} ORDER BY {key} {order}"):
                if row[0] in seen:
                    return
                seen.add(row[0])
                yield row[1:]
            return
        except _SQL_ERRORS:
            continue


def _rebuild(source: sqlite3.Connection, path: Path, report: SalvageReport) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    dst = sqlite3.connect(path, isolation_level=None)
    dst.execute("PRAGMA journal_mode=WAL")
    dst.execute("BEGIN IMMEDIATE")
    for migrate in MIGRATIONS:
        migrate(dst)
    dst.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    columns = {t: [r[1] for r in dst.execute(f"PRAGMA table_info({t})")] for t in _KEYS}
    got = {t: _read(source, t, columns[t]) for t in ("meta", "metrics")}
    metric_ids = {r[0] for r in got["metrics"] if _ok(_metric_ok, r)}
    for t in (*TABLES, "scalar_chunks"):
        if t in _PER_METRIC:
            got[t] = [r for m in sorted(metric_ids) for r in _read(source, t, columns[t], m)]
        elif t not in got:
            got[t] = _read(source, t, columns[t])
    checks: dict[str, Callable[[tuple], bool]] = {
        "metrics": _metric_ok,
        "steps": lambda r: _step_ok(r[0]) and _number(r[1]),
        "scalars": lambda r: r[0] in metric_ids and _step_ok(r[1]) and _value_ok(r[2]),
        "histograms": lambda r: r[0] in metric_ids and _step_ok(r[1]) and _hist_ok(r),
        "alerts": _alert_ok,
        "actions": lambda r: _json_ok(r[2]) and r[6] in ("pending", "applied", "rejected"),
        "events": lambda r: _json_ok(r[3]) and _number(r[4]) and _text_ok(r[2]),
    }
    _write_meta(dst, got["meta"], report)
    for table, ok in checks.items():
        good = [r for r in got[table] if _ok(ok, r)]
        report.dropped[table] = len(got[table]) - len(good)
        marks = ", ".join("?" * len(columns[table]))
        dst.executemany(f"INSERT OR IGNORE INTO {table} VALUES ({marks})", good)
        report.kept[table] = len(good)
    _fill_from_chunks(dst, got["scalar_chunks"], metric_ids, report)
    _fill_heartbeats(dst, report)
    last = dst.execute("SELECT max(step) FROM steps").fetchone()[0]
    dst.execute("UPDATE meta SET value = '0' WHERE key = 'compacted_upto'")
    if last is not None:
        compact(dst, (last // CHUNK_STEPS) * CHUNK_STEPS)
    dst.execute("COMMIT")
    dst.close()


def _read(source: sqlite3.Connection, table: str, columns: list[str], metric: int | None = None):
    where = f"metric_id = {int(metric)} AND " if metric is not None else ""
    out: list[tuple] = []
    with contextlib.suppress(*_SQL_ERRORS):  # a table SQLite cannot even name
        out.extend(_rows(source, table, ", ".join(columns), where))
    return out


def _text(raw: bytes) -> str:
    """Text as stored; bytes that are not UTF-8 become lone surrogates, which `_ok` refuses."""
    return raw.decode("utf-8", "surrogateescape")


def _ok(check: Callable[[tuple], bool], row: tuple) -> bool:
    """The row passes its table's check and every text in it is valid Unicode."""
    if any(isinstance(x, str) and text_problem(x, "") is not None for x in row):
        return False
    try:
        return bool(check(row))
    except (ValueError, TypeError, KeyError, IndexError, OverflowError):
        return False


def _write_meta(dst: sqlite3.Connection, rows: list[tuple], report: SalvageReport) -> None:
    meta = {str(k): v for k, v in rows if _ok(lambda r: isinstance(r[1], str), (k, v))}
    good = {"app": APP_ID, "compacted_upto": "0"}
    for key in _JSON_META:
        if key in meta and _json_ok(meta[key]):
            good[key] = meta[key]
        elif key in ("config", "controls"):
            good[key] = "{}"
            report.notes.append(f"meta {key}: {'unreadable' if key in meta else 'lost'}; now {{}}")
    run_id = meta.get("run_id")
    good["run_id"] = run_id if run_id and _text_ok(run_id) else uuid.uuid4().hex[:12]
    if good["run_id"] != run_id:
        report.notes.append(f"meta run_id lost: the salvaged run is {good['run_id']}")
    created = meta.get("created_at")
    good["created_at"] = created if created and _number(_float(created)) else repr(time.time())
    if good["created_at"] != created:
        report.notes.append("meta created_at lost: set to the time of the salvage")
    dst.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", good.items())
    report.kept["meta"] = sum(meta.get(k) == v for k, v in good.items())
    report.dropped["meta"] = len(rows) - report.kept["meta"]


def _fill_from_chunks(dst: sqlite3.Connection, chunks: list[tuple], ids: set, report) -> None:
    """Values lost from `scalars` but still in a 256-step chunk come back from the chunk."""
    restored = 0
    for metric_id, _lo, _hi, n, steps_blob, vals_blob in chunks:
        with contextlib.suppress(ValueError, TypeError):
            steps = np.frombuffer(steps_blob, dtype="<i8")
            vals = np.frombuffer(vals_blob, dtype="<f8")
            if metric_id not in ids or len(steps) != len(vals) or len(steps) != n:
                continue
            rows = [
                (metric_id, int(s), None if math.isnan(v) else float(v))
                for s, v in zip(steps.tolist(), vals.tolist(), strict=True)
                if 0 <= s <= MAX_STEP
            ]
            before = dst.total_changes
            dst.executemany("INSERT OR IGNORE INTO scalars VALUES (?, ?, ?)", rows)
            restored += dst.total_changes - before
    if restored:
        report.kept["scalars"] = report.kept.get("scalars", 0) + restored
        report.notes.append(f"scalars: {restored} value(s) restored from the 256-step chunks")


def _fill_heartbeats(dst: sqlite3.Connection, report: SalvageReport) -> None:
    """A step that has values keeps a row in `steps` (its time: the step before's)."""
    missing = [
        r[0]
        for r in dst.execute(
            "SELECT DISTINCT step FROM scalars WHERE step NOT IN (SELECT step FROM steps)"
        )
    ]
    created = float(dst.execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()[0])
    for step in missing:
        before = dst.execute("SELECT max(time) FROM steps WHERE step < ?", (step,)).fetchone()[0]
        dst.execute("INSERT INTO steps VALUES (?, ?)", (step, before or created))
    if missing:
        report.notes.append(f"steps: {len(missing)} step row(s) rebuilt from their values")


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _step_ok(x: object) -> bool:
    return isinstance(x, int) and 0 <= x <= MAX_STEP


def _value_ok(x: object) -> bool:
    return x is None or isinstance(x, float | int)


def _text_ok(x: object) -> bool:
    return isinstance(x, str) and bool(x) and text_problem(x, "text") is None


def _json_ok(x: object) -> bool:
    if not isinstance(x, str):
        return False
    try:
        json.loads(x)
    except (ValueError, RecursionError):
        return False
    return True


def _metric_ok(r: tuple) -> bool:
    return isinstance(r[0], int) and name_problem(r[1]) is None and r[2] in ("scalar", "histogram")


def _hist_ok(r: tuple) -> bool:
    counts = r[4]
    return isinstance(counts, bytes) and len(counts) % 8 == 0 and _number(r[2]) and _number(r[3])


def _alert_ok(r: tuple) -> bool:
    texts = (r[2], r[4], r[8], r[9], r[10])  # detector, metric, factor, message, remedy
    numbers = _value_ok(r[5]) and _value_ok(r[6]) and _number(r[11])  # value, baseline, time
    severity = r[3] in ("info", "warning", "critical")
    return _step_ok(r[1]) and all(_text_ok(t) for t in texts) and numbers and severity
