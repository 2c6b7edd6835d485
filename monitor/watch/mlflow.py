"""An MLflow tracking store in SQLite (`sqlite:///path/mlruns.db`, verl's `mlflow` default)
as a live source, read with the standard library: no mlflow install needed.

MLflow's SQL store keeps one row per logged value in `metrics` (key, value, timestamp,
run_uuid, step, is_nan; NaN is stored as value 0 with is_nan 1) and the runs in `runs`
(run_uuid, name, status, start_time, lifecycle_stage). Rows are only ever inserted, so
SQLite's rowid orders them: the cursor is the last rowid read. The store is opened
read-only and each poll is one indexed range query, so the trainer's writes never wait.

Which run: `run` (a run id or run name) if given, else the most recently started active
run, chosen at the first poll that finds one and kept from then on.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from core.errors import UserError
from monitor.importers import Parsed

PREFIX = "sqlite:///"
BATCH = 50_000


def store_file(uri: str) -> Path:
    """The database file of a `sqlite:///` URI (four slashes: an absolute path)."""
    if not uri.startswith(PREFIX):
        raise UserError(f"MLflow sources are sqlite:/// URIs, got {uri!r}")
    return Path(uri[len(PREFIX) :])


class MlflowSource:
    """Metrics of one MLflow run, as they are inserted (see the module docstring)."""

    whole_rows = False

    def __init__(self, uri: str, run: str | None = None, state: dict[str, Any] | None = None):
        self.file = store_file(uri)
        self.wanted = run
        self.run_uuid: str | None = (state or {}).get("run_uuid")
        self.rowid = int((state or {}).get("rowid", 0))
        self.resets = 0
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is None and self.file.is_file():
            conn = sqlite3.connect(f"file:{self.file}?mode=ro", uri=True, timeout=5)
            try:
                conn.execute("SELECT 1 FROM metrics LIMIT 1")
                conn.execute("SELECT run_uuid, name, start_time FROM runs LIMIT 1")
            except sqlite3.OperationalError as err:
                conn.close()
                if "no such table" in str(err):
                    return None  # mlflow is still creating its tables
                raise UserError(f"{self.file} is not an MLflow tracking store: {err}") from None
            except sqlite3.DatabaseError as err:
                conn.close()
                raise UserError(f"{self.file} is not an MLflow tracking store: {err}") from None
            self._conn = conn
        return self._conn

    def _pick_run(self, conn: sqlite3.Connection) -> str | None:
        if self.wanted:
            row = conn.execute(
                "SELECT run_uuid FROM runs WHERE run_uuid = ? OR name = ?"
                " ORDER BY start_time DESC LIMIT 1",
                (self.wanted, self.wanted),
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT run_uuid FROM runs WHERE lifecycle_stage = 'active'"
                " ORDER BY start_time DESC LIMIT 1"
            ).fetchone()
        return row[0] if row else None

    def poll(self, final: bool = False) -> Parsed:
        parsed = Parsed(unit="row")
        conn = self._connect()
        if conn is None:
            return parsed
        try:
            if self.run_uuid is None:
                self.run_uuid = self._pick_run(conn)
                if self.run_uuid is None:
                    return parsed
            newest = conn.execute("SELECT max(rowid) FROM metrics").fetchone()[0] or 0
            if newest < self.rowid:  # the store was recreated: start over
                self.rowid, self.resets = 0, self.resets + 1
            rows = conn.execute(
                "SELECT rowid, key, value, step, is_nan FROM metrics"
                " WHERE rowid > ? AND run_uuid = ? ORDER BY rowid LIMIT ?",
                (self.rowid, self.run_uuid, BATCH),
            ).fetchall()
        except sqlite3.OperationalError as err:  # locked past the timeout: try next poll
            parsed.bad("store", f"not readable now ({err})")
            return parsed
        for rowid, key, value, step, is_nan in rows:
            parsed.units += 1
            if step is None or step < 0:
                parsed.bad(f"rowid {rowid}", f"step {step!r} is not a step")
            else:
                parsed.add(int(step), key, float("nan") if is_nan else float(value))
            self.rowid = rowid
        if not rows and newest > self.rowid:
            self.rowid = newest  # only other runs' rows since: skip past them
        return parsed

    def state(self) -> dict[str, Any]:
        return {"run_uuid": self.run_uuid, "rowid": self.rowid}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
