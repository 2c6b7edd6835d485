"""The run store's schema: tables, versions and migrations, and the row decoders.

Version in `PRAGMA user_version`; `MIGRATIONS[v]` upgrades a store from v to v + 1 inside
the writer's transaction (readers never migrate). Tables:
    meta(key, value)                    app='minirl', run_id, created_at, config, controls
    metrics(id, name, kind)             kind 'scalar' | 'histogram'
    steps(step, time)                   one row per log call: the heartbeat
    scalars(metric_id, step, value)     WITHOUT ROWID, keyed (metric_id, step)
    scalar_chunks(metric_id, lo, hi, n, steps, vals)  v2: complete 256-step blobs
    histograms(metric_id, step, lo, hi, counts BLOB int64 LE [bins+2], n, ..., p01..p99)
    alerts(id, step, detector, severity, metric, value, baseline, window_steps, factor,
           ..., since_step)          v3: since_step
    actions(id, kind, params JSON, reason, source, alert_id, status, step, ...)
    events(id, step, kind, detail JSON, time)
Values: REAL; ±inf as IEEE infinities, NaN as NULL (SQLite has no NaN); −0.0 reads back
as 0.0. This module holds no connection of its own; store.py writes, reader.py reads.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import UserError
from monitor.store.histograms import QUANTILES
from monitor.store.records import Action, Alert

STORE_FILE = "store.sqlite"
APP_ID = "minirl"
_QCOLS = tuple(QUANTILES)  # p01 .. p99 columns of `histograms`


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Statement by statement: `executescript` would commit the caller's transaction."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _v0_to_v1(conn: sqlite3.Connection) -> None:
    q = ", ".join(f"{c} REAL" for c in _QCOLS)
    _run_script(
        conn,
        f"""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE metrics (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                              kind TEXT NOT NULL DEFAULT 'scalar');
        CREATE TABLE steps (step INTEGER PRIMARY KEY, time REAL NOT NULL);
        CREATE TABLE scalars (metric_id INTEGER NOT NULL, step INTEGER NOT NULL, value REAL,
                              PRIMARY KEY (metric_id, step)) WITHOUT ROWID;
        CREATE TABLE histograms (metric_id INTEGER NOT NULL, step INTEGER NOT NULL,
                                 lo REAL NOT NULL, hi REAL NOT NULL, counts BLOB NOT NULL,
                                 n INTEGER NOT NULL, n_nonfinite INTEGER NOT NULL,
                                 mean REAL, std REAL, min REAL, max REAL, {q},
                                 PRIMARY KEY (metric_id, step)) WITHOUT ROWID;
        CREATE TABLE alerts (id INTEGER PRIMARY KEY, step INTEGER NOT NULL,
                             detector TEXT NOT NULL, severity TEXT NOT NULL,
                             metric TEXT NOT NULL, value REAL, baseline REAL,
                             window_steps INTEGER NOT NULL, factor TEXT NOT NULL,
                             message TEXT NOT NULL, remedy TEXT NOT NULL, time REAL NOT NULL,
                             cleared_step INTEGER);
        CREATE INDEX alerts_by_step ON alerts (step);
        CREATE TABLE actions (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, params TEXT NOT NULL,
                              reason TEXT NOT NULL, source TEXT NOT NULL, alert_id INTEGER,
                              status TEXT NOT NULL
                                CHECK (status IN ('pending', 'applied', 'rejected')),
                              step INTEGER, time REAL NOT NULL, resolved_step INTEGER,
                              resolved_time REAL, detail TEXT NOT NULL DEFAULT '');
        CREATE INDEX actions_by_status ON actions (status);
        CREATE TABLE events (id INTEGER PRIMARY KEY, step INTEGER, kind TEXT NOT NULL,
                             detail TEXT NOT NULL, time REAL NOT NULL);
        """,
    )


CHUNK_STEPS = 256  # steps per compacted chunk of one metric's series


def _v1_to_v2(conn: sqlite3.Connection) -> None:
    """Chunked copies of the scalar series: one row per (metric, 256 steps) holding the
    steps and values as little-endian int64/float64 blobs, so that a 100k-step series is
    ~400 rows to read instead of 100k (the dashboard's interactive load)."""
    _run_script(
        conn,
        """
        CREATE TABLE scalar_chunks (metric_id INTEGER NOT NULL, lo INTEGER NOT NULL,
                                    hi INTEGER NOT NULL, n INTEGER NOT NULL,
                                    steps BLOB NOT NULL, vals BLOB NOT NULL,
                                    PRIMARY KEY (metric_id, lo)) WITHOUT ROWID;
        INSERT OR REPLACE INTO meta (key, value) VALUES ('compacted_upto', '0')
        """,
    )
    last = conn.execute("SELECT max(step) FROM steps").fetchone()[0]
    if last is not None:
        compact(conn, (last // CHUNK_STEPS) * CHUNK_STEPS)


def compacted_upto(conn: sqlite3.Connection) -> int:
    """Steps below this are in `scalar_chunks` (as well as in `scalars`)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'compacted_upto'").fetchone()
    return int(row[0]) if row else 0


def compact(conn: sqlite3.Connection, upto: int) -> None:
    """Copy the scalars of steps in [compacted_upto, upto) into chunks; `upto` is a
    multiple of CHUNK_STEPS and at most the last step's chunk start, so a chunk never
    changes once written (the last step may still be merged into; earlier ones cannot)."""
    done = compacted_upto(conn)
    if upto <= done:
        return
    chunks = [
        r[0]
        for r in conn.execute(
            f"SELECT DISTINCT step / {CHUNK_STEPS} FROM steps WHERE step >= ? AND step < ?",
            (done, upto),
        )
    ]
    ids = [r[0] for r in conn.execute("SELECT id FROM metrics WHERE kind = 'scalar'")]
    for c in chunks:
        lo, hi = c * CHUNK_STEPS, (c + 1) * CHUNK_STEPS
        for mid in ids:
            rows = conn.execute(
                "SELECT step, value FROM scalars WHERE metric_id = ? AND step >= ? AND step < ?"
                " ORDER BY step",
                (mid, lo, hi),
            ).fetchall()
            if rows:
                arr = np.array(rows, dtype=np.float64)  # NULL -> NaN
                conn.execute(
                    "INSERT OR REPLACE INTO scalar_chunks VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        mid,
                        lo,
                        hi,
                        len(rows),
                        arr[:, 0].astype("<i8").tobytes(),
                        arr[:, 1].astype("<f8").tobytes(),
                    ),
                )
    conn.execute("UPDATE meta SET value = ? WHERE key = 'compacted_upto'", (str(upto),))


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    """Where an alert's signal began to move (`Alert.since`), where its detector knows it."""
    conn.execute("ALTER TABLE alerts ADD COLUMN since_step INTEGER")


# MIGRATIONS[v] upgrades a store at version v to v + 1, inside the caller's transaction.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v0_to_v1, _v1_to_v2, _v2_to_v3]
READABLE = (2, 3)
"""Versions a reader reads: v2 stores (alerts without `since_step`) read as `since` None,
so that runs written by the previous minirl stay readable without a writer migrating them."""
SCHEMA_VERSION = len(MIGRATIONS)


MAX_STEP = 2**53
"""The largest step a store takes: float64 (numpy, JSON readers, the browser) holds every
integer up to it exactly, and SQLite's INTEGER holds it."""


def name_problem(name: object, what: str = "metric name") -> str | None:
    """Why `name` cannot be a metric name (None if it can): a non-empty string."""
    if not isinstance(name, str) or not name:
        return f"{what}s must be non-empty strings, got {name!r:.80}"
    return text_problem(name, what)


def text_problem(text: str, what: str) -> str | None:
    """Why `text` cannot be stored as TEXT (None if it can): SQLite keeps UTF-8, which
    has no lone surrogate (Python strings may hold one, e.g. from a JSON escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} {text!r:.80} is not valid Unicode (a lone surrogate)"
    return None


def store_path(run: str | os.PathLike[str]) -> Path:
    """`run` is a run directory or a store file; return the store file's path."""
    path = Path(run)
    return path / STORE_FILE if path.is_dir() or path.suffix != ".sqlite" else path


def runs_below(folder: Path) -> list[Path]:
    """The run directories one level below `folder` (each holds a store), by name: a
    folder of runs, as `minirl import` writes one for a log of several runs."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / STORE_FILE).is_file())


def _not_a_store(path: Path, why: str) -> UserError:
    return UserError(f"{path} is not a readable minirl run store ({why})")


def _check_identity(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of a minirl store, or UserError for anything else."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == 0 and not tables:
            return 0  # a new, empty database
        row = None
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'app'").fetchone()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
        if "malformed" in str(err) or isinstance(err, UnicodeDecodeError):  # damaged pages
            from monitor.store.damage import StoreDamaged

            raise StoreDamaged(path, "the table list", str(err)) from None
        raise _not_a_store(path, str(err)) from None
    if row is None or row[0] != APP_ID:
        raise _not_a_store(path, "no minirl metadata: a SQLite database of something else")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{path} has schema version {version}, newer than this minirl's "
            f"{SCHEMA_VERSION}; upgrade minirl to read it"
        )
    return version


def _nan_to_none(value: float) -> float | None:
    return None if math.isnan(value) else value


def _f(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True, default=str)


# columns in the order of the records' fields, so that a row unpacks into its record
_ALERT_COLUMNS = (
    "detector, severity, metric, value, baseline, window_steps, factor, message, remedy,"
    " since_step, id, step, time, cleared_step"
)
_ACTION_COLUMNS = (
    "id, kind, params, reason, source, alert_id, status, step, time, resolved_step,"
    " resolved_time, detail"
)


def _select(conn: sqlite3.Connection, table: str, columns: str, where: str, args: Sequence[Any]):
    """Rows of `table` that match `where` (the SQL after FROM, or ""), oldest first."""
    return conn.execute(f"SELECT {columns} FROM {table} {where} ORDER BY id", args).fetchall()


def _alerts(
    conn: sqlite3.Connection, where: str, args: Sequence[Any], version: int = SCHEMA_VERSION
) -> list[Alert]:
    """Alerts matching `where` (SQL conditions, each starting with AND, or ""), of a store
    at schema `version` (a reader's v2 store has no since_step)."""
    columns = _ALERT_COLUMNS
    if version < 3:
        columns = columns.replace(" since_step,", " NULL,")
    rows = _select(conn, "alerts", columns, f"WHERE 1 = 1{where}", args)
    return [Alert(*r[:3], _f(r[3]), _f(r[4]), *r[5:]) for r in rows]


def _actions(conn: sqlite3.Connection, where: str, args: Sequence[Any]) -> list[Action]:
    """Actions matching `where` (a WHERE clause, or "")."""
    rows = _select(conn, "actions", _ACTION_COLUMNS, where, args)
    return [Action(r[0], r[1], json.loads(r[2]), *r[3:]) for r in rows]
