"""The run store's writer: one SQLite file per run (`<run_dir>/store.sqlite`).

The hub of a run: the trainer appends one transaction per step through `RunStore`
(used by `Monitor`); the dashboard, `analyze` and `export` read through
`reader.RunReader` while the run is live; the dashboard requests actions with
`request_action` (here, because it writes). Schema and migrations: schema.py.

Durability: WAL journal, `synchronous=NORMAL`, one transaction per step. A killed
writer loses at most the step it was writing; the file stays readable. Readers use a
read-only URI and a busy timeout, so they never block the writer nor fail on its locks.
This module knows nothing of detectors or remediation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from core.errors import UserError
from monitor.remediation import actions as action_kinds
from monitor.store import schema
from monitor.store.damage import reading, reads
from monitor.store.histograms import HistogramRow
from monitor.store.records import Action, Alert, AlertDraft
from monitor.store.schema import (
    _QCOLS,
    APP_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    STORE_FILE,
    _actions,
    _alerts,
    _check_identity,
    _f,
    _json,
    _nan_to_none,
    _not_a_store,
    compact,
    compacted_upto,
    store_path,
    text_problem,
)

__all__ = ["SCHEMA_VERSION", "STORE_FILE", "RunStore", "request_action", "store_path"]

# ---------------------------------------------------------------------------- writer


class RunStore:
    """The single writer of a run store. Not thread-safe: one per process, one thread."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._metric_ids: dict[str, int] = dict(conn.execute("SELECT name, id FROM metrics"))
        self._compacted = compacted_upto(conn)
        self._in_tx = False

    @classmethod
    def open(
        cls,
        run_dir: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 10.0,
        synchronous: str = "NORMAL",
    ) -> RunStore:
        """Open (creating or migrating) `<run_dir>/store.sqlite` for writing."""
        run_dir = Path(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create run directory {run_dir}: {err.strerror}") from None
        path = run_dir / STORE_FILE
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
        except sqlite3.DatabaseError as err:
            raise _not_a_store(path, str(err)) from None
        version = _check_identity(conn, path)
        if version < SCHEMA_VERSION:
            try:
                conn.execute("BEGIN IMMEDIATE")
                for migrate in MIGRATIONS[version:]:
                    migrate(conn)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                if version == 0:
                    conn.executemany(
                        "INSERT INTO meta (key, value) VALUES (?, ?)",
                        [
                            ("app", APP_ID),
                            ("run_id", uuid.uuid4().hex[:12]),
                            ("created_at", repr(time.time())),
                            ("config", "{}"),
                            ("controls", "{}"),
                        ],
                    )
                conn.execute("COMMIT")
            except sqlite3.OperationalError as err:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                conn.close()
                if "full" in str(err):
                    raise UserError(f"{path}: cannot write ({err}); free some space") from None
                raise
        with reading(path, "metric names"):  # a damaged store: one line, not a traceback
            return cls(path, conn)

    # -- transactions
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything written inside is committed together or not at all. A full disk
        is one UserError: the transaction is rolled back, every earlier one is kept."""
        if self._in_tx:
            yield
            return
        self._conn.execute("BEGIN IMMEDIATE")
        self._in_tx = True
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException as err:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            if isinstance(err, sqlite3.OperationalError) and "full" in str(err):
                raise UserError(
                    f"{self.path}: cannot write ({err}); this write was not stored, every "
                    "earlier one is; free some space, then resume"
                ) from None
            raise
        finally:
            self._in_tx = False

    # -- metadata
    def set_meta(self, key: str, value: Any) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, _json(value))
        )

    @reads("meta")
    def meta_json(self, key: str) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    @reads("meta")
    def run_id(self) -> str:
        return self._conn.execute("SELECT value FROM meta WHERE key = 'run_id'").fetchone()[0]

    # -- per-step data
    def _metric_id(self, name: str, kind: str) -> int:
        mid = self._metric_ids.get(name)
        if mid is None:
            mid = self._conn.execute(
                "INSERT INTO metrics (name, kind) VALUES (?, ?)", (name, kind)
            ).lastrowid
            self._metric_ids[name] = mid
        return mid

    def write_step(self, step: int, scalars: Mapping[str, float], now: float) -> None:
        """The heartbeat row and the scalars of one step (replacing values of the same step)."""
        self._conn.execute("INSERT OR REPLACE INTO steps (step, time) VALUES (?, ?)", (step, now))
        self._conn.executemany(
            "INSERT OR REPLACE INTO scalars (metric_id, step, value) VALUES (?, ?, ?)",
            [(self._metric_id(k, "scalar"), step, _nan_to_none(v)) for k, v in scalars.items()],
        )
        boundary = (step // schema.CHUNK_STEPS) * schema.CHUNK_STEPS
        if boundary > self._compacted:
            compact(self._conn, boundary)  # once per CHUNK_STEPS steps
            self._compacted = boundary

    def write_histogram(self, step: int, name: str, row: HistogramRow) -> None:
        qs = [_nan_to_none(row.quantiles[c]) for c in _QCOLS]
        stats = [_nan_to_none(v) for v in (row.mean, row.std, row.min, row.max)]
        self._conn.execute(
            f"INSERT OR REPLACE INTO histograms VALUES ({', '.join('?' * (11 + len(_QCOLS)))})",
            (
                self._metric_id(name, "histogram"),
                step,
                row.lo,
                row.hi,
                row.counts.astype("<i8").tobytes(),
                row.n,
                row.n_nonfinite,
                *stats,
                *qs,
            ),
        )

    @reads("steps")
    def last_step(self) -> int | None:
        return self._conn.execute("SELECT max(step) FROM steps").fetchone()[0]

    # -- alerts, actions, events
    def insert_alert(self, step: int, a: AlertDraft, now: float) -> int:
        return self._conn.execute(
            "INSERT INTO alerts (step, detector, severity, metric, value, baseline, window_steps,"
            " factor, message, remedy, time, since_step)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                step,
                a.detector,
                a.severity,
                a.metric,
                _nan_to_none(a.value),
                _nan_to_none(a.baseline),
                a.window,
                a.factor,
                a.message,
                a.remedy,
                now,
                a.since,
            ),
        ).lastrowid

    def open_alerts(self) -> list[Alert]:
        """Alerts not cleared yet, oldest first."""
        return _alerts(self._conn, " AND cleared_step IS NULL", ())

    def clear_alerts(self, step: int, detector: str, metric: str) -> list[Alert]:
        """Mark the open alerts of (detector, metric) cleared at `step`; return them."""
        where, args = (
            " AND detector = ? AND metric = ? AND cleared_step IS NULL",
            (detector, metric),
        )
        cleared = _alerts(self._conn, where, args)
        self._conn.execute(f"UPDATE alerts SET cleared_step = ? WHERE 1 = 1{where}", (step, *args))
        return [dataclasses.replace(a, cleared_step=step) for a in cleared]

    def insert_action(
        self,
        kind: str,
        params: Mapping[str, Any],
        reason: str,
        source: str,
        alert_id: int | None,
        now: float,
    ) -> Action:
        return _insert_action(self._conn, kind, params, reason, source, alert_id, now)

    def resolve_action(self, action_id: int, status: str, detail: str, now: float) -> Action:
        row = self._conn.execute("SELECT status FROM actions WHERE id = ?", (action_id,)).fetchone()
        if row is None:
            raise UserError(f"no action with id {action_id}")
        if row[0] != "pending":
            raise UserError(f"action {action_id} is already {row[0]}")
        self._conn.execute(
            "UPDATE actions SET status = ?, detail = ?, resolved_step = ?, resolved_time = ?"
            " WHERE id = ?",
            (status, detail, self.last_step(), now, action_id),
        )
        return _actions(self._conn, "WHERE id = ?", (action_id,))[0]

    def pending_actions(self) -> list[Action]:
        return _actions(self._conn, "WHERE status = 'pending'", ())

    def all_actions(self) -> list[Action]:
        return _actions(self._conn, "", ())

    def insert_event(
        self, step: int | None, kind: str, detail: Mapping[str, Any], now: float
    ) -> int:
        return self._conn.execute(
            "INSERT INTO events (step, kind, detail, time) VALUES (?, ?, ?, ?)",
            (step, kind, _json(dict(detail)), now),
        ).lastrowid

    def delete_after(self, step: int) -> dict[str, int]:
        """Drop scalars, histograms, heartbeats and alerts of steps > `step`; return counts."""
        boundary = max(0, min(self._compacted, (step // schema.CHUNK_STEPS) * schema.CHUNK_STEPS))
        self._conn.execute("DELETE FROM scalar_chunks WHERE lo >= ?", (boundary,))
        self._conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'compacted_upto'", (str(boundary),)
        )
        self._compacted = boundary
        counts = {}
        for table in ("scalars", "histograms", "steps", "alerts"):
            counts[table] = self._conn.execute(
                f"DELETE FROM {table} WHERE step > ?", (step,)
            ).rowcount
        self._conn.execute("UPDATE alerts SET cleared_step = NULL WHERE cleared_step > ?", (step,))
        return counts

    @reads("scalars")
    def recent_scalars(self, first_step: int) -> list[tuple[int, dict[str, float]]]:
        """Every scalar of steps ≥ `first_step`, grouped by step (to rebuild detectors)."""
        out: dict[int, dict[str, float]] = {}
        for name, mid in self._metric_ids.items():
            rows = self._conn.execute(
                "SELECT step, value FROM scalars WHERE metric_id = ? AND step >= ?",
                (mid, first_step),
            )
            for step, value in rows:
                out.setdefault(step, {})[name] = _f(value)
        return sorted(out.items())

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._conn.close()


def _insert_action(
    conn: sqlite3.Connection,
    kind: str,
    params: Mapping[str, Any] | None,
    reason: str,
    source: str,
    alert_id: int | None,
    now: float,
) -> Action:
    params = action_kinds.validate(kind, params)
    if source not in ("policy", "dashboard", "user"):
        raise UserError(f"action source must be policy, dashboard or user, got {source!r}")
    if not isinstance(reason, str) or not reason.strip():
        raise UserError("an action needs a reason (one line saying why)")
    problem = text_problem(reason, "action reason")
    if problem is not None:
        raise UserError(problem)
    if alert_id is not None and (
        isinstance(alert_id, bool) or not isinstance(alert_id, int) or not 0 <= alert_id < 2**63
    ):
        raise UserError(f"action alert_id must be an alert's id, got {alert_id!r:.40}")
    step = conn.execute("SELECT max(step) FROM steps").fetchone()[0]
    action_id = conn.execute(
        "INSERT INTO actions (kind, params, reason, source, alert_id, status, step, time)"
        " VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)",
        (kind, _json(params), reason, source, alert_id, step, now),
    ).lastrowid
    return Action(action_id, kind, params, reason, source, alert_id, "pending", step, now)  # type: ignore[arg-type]


def request_action(
    run: str | os.PathLike[str],
    kind: str,
    params: Mapping[str, Any] | None,
    reason: str,
    source: Literal["dashboard", "user"] = "dashboard",
    alert_id: int | None = None,
    busy_timeout_s: float = 10.0,
) -> Action:
    """Write a pending action into a live (or finished) run's store from another process.

    The dashboard's entry point: the trainer's `Monitor.pending_actions()` picks it up at
    the next step boundary. Validated by monitor/remediation/actions.py; a same-kind pending action
    is not duplicated (the existing one is returned).
    """
    path = store_path(run)
    if not path.is_file():
        raise UserError(f"no run store at {path}")
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
    except sqlite3.DatabaseError as err:
        raise _not_a_store(path, str(err)) from None
    try:
        if _check_identity(conn, path) != SCHEMA_VERSION:
            raise UserError(f"{path} has an old schema; open the run with `minirl` to migrate it")
        action_kinds.validate(kind, params)
        conn.execute("BEGIN IMMEDIATE")
        try:
            same = _actions(conn, "WHERE status = 'pending' AND kind = ?", (kind,))
            action = (
                same[0]
                if same
                else _insert_action(conn, kind, params, reason, source, alert_id, time.time())
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return action
    except sqlite3.OperationalError as err:
        raise UserError(f"cannot write to {path}: {err}") from None
    finally:
        conn.close()
