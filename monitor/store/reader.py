"""Reading a run store: `RunReader` and `list_runs`, for the dashboard, analyze and export.

Read-only SQLite URI plus a busy timeout: safe while the trainer writes (WAL lets readers
see the last committed step without blocking the writer). Every call reads the current
state, so a live run grows between calls. Series come back as numpy arrays; 100k steps of
one metric load in tens of milliseconds (bench/results/store.md). This module never
writes; schema and writer are in store.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from core.errors import UserError
from monitor.store import schema
from monitor.store.damage import reading, reads
from monitor.store.histograms import QUANTILES
from monitor.store.records import (
    Action,
    Alert,
    Event,
    Histograms,
    RunMeta,
    RunStatus,
    RunSummary,
    severity_rank,
)
from monitor.store.schema import STORE_FILE, runs_below, store_path
from monitor.store.thinning import thin

_QCOLS = tuple(QUANTILES)


def _runs_inside(folder: Path) -> str:
    """The end of a "no run store" message when `folder` holds run stores one level down
    (a multi-run import, a runs folder): their names, so the user can pick one."""
    runs = [p.name for p in runs_below(folder)]
    if not runs:
        return ""
    shown = ", ".join(runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
    return f"; {folder} is a folder of runs ({shown}): name one, e.g. {folder / runs[0]}"


class RunReader:
    """Read-only view of a run store, safe while the trainer writes.

    Every method reads the current state (a live run grows between calls). Open with a
    run directory or the store file itself; a missing or foreign file raises UserError
    with a one-line reason, a damaged part `StoreDamaged` naming it (damage.py).
    """

    def __init__(self, run: str | os.PathLike[str], busy_timeout_s: float = 10.0) -> None:
        self.path = store_path(run)
        if not self.path.is_file():
            raise UserError(f"no run store at {self.path}{_runs_inside(self.path.parent)}")
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            self._conn = sqlite3.connect(
                uri, uri=True, timeout=busy_timeout_s, isolation_level=None
            )
        except sqlite3.DatabaseError as err:
            raise schema._not_a_store(self.path, str(err)) from None
        version = self._version = schema._check_identity(self._conn, self.path)
        if version not in schema.READABLE:
            self._conn.close()
            if version == 0:
                raise schema._not_a_store(self.path, "empty database")
            raise UserError(
                f"{self.path} has an old schema; open the run with `minirl` to migrate it"
            )

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one committed state, even while the trainer writes."""
        if self._conn.in_transaction:
            yield
            return
        with reading(self.path, "the store"):
            self._conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # the first error is the one to report
                self._conn.execute("ROLLBACK")
            raise
        with reading(self.path, "the store"):
            self._conn.execute("COMMIT")

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        """Rows of a query; the public method around it names the part that is damaged."""
        return self._conn.execute(sql, args).fetchall()

    # -- who and how
    @reads("meta (run id, config, controls)")
    def meta(self) -> RunMeta:
        """Run id, creation time, schema version, resolved config and current controls."""
        kv = dict(self._q("SELECT key, value FROM meta"))
        return RunMeta(
            path=str(self.path.parent),
            run_id=kv["run_id"],
            created_at=float(kv["created_at"]),
            schema_version=self._version,
            config=json.loads(kv.get("config", "{}")),
            controls=json.loads(kv.get("controls", "{}")),
            source=json.loads(kv["source"]) if "source" in kv else None,
        )

    @reads("steps")
    def last_step(self) -> int | None:
        return self._q("SELECT max(step) FROM steps")[0][0]

    @reads("steps and events")
    def last_write(self) -> float | None:
        """Unix time of the last heartbeat (step row or event)."""
        a = self._q("SELECT time FROM steps ORDER BY step DESC LIMIT 1")
        b = self._q("SELECT max(time) FROM events")[0][0]
        times = [t for t in ((a[0][0] if a else None), b) if t is not None]
        return max(times) if times else None

    @reads("events")
    def status(self, stale_after_s: float = 120.0, now: float | None = None) -> RunStatus:
        """finished (closed or stopped), crashed (crash event, or silent for
        `stale_after_s` without closing), else live."""
        row = self._q(
            "SELECT kind FROM events WHERE kind IN ('start', 'resume', 'close', 'stop', 'crash')"
            " ORDER BY id DESC LIMIT 1"
        )
        last = row[0][0] if row else None
        if last in ("close", "stop"):
            return "finished"
        if last == "crash":
            return "crashed"
        written = self.last_write()
        now = time.time() if now is None else now
        if written is not None and now - written > stale_after_s:
            return "crashed"
        return "live"

    # -- series
    @reads("metric names")
    def metric_names(self, kind: Literal["scalar", "histogram"] = "scalar") -> list[str]:
        return [
            r[0] for r in self._q("SELECT name FROM metrics WHERE kind = ? ORDER BY name", (kind,))
        ]

    @reads("steps")
    def steps(self) -> np.ndarray:
        """Every logged step, ascending (int64)."""
        return np.array(
            [r[0] for r in self._q("SELECT step FROM steps ORDER BY step")], dtype=np.int64
        )

    def _range(self, start: int | None, end: int | None) -> tuple[str, list[Any]]:
        sql, args = "", []
        if start is not None:
            sql, args = sql + " AND step >= ?", [*args, int(start)]
        if end is not None:
            sql, args = sql + " AND step <= ?", [*args, int(end)]
        return sql, args

    @reads("scalars")
    def scalars(
        self,
        names: str | Iterable[str],
        start: int | None = None,
        end: int | None = None,
        every: int | None = None,
        agg: Literal["sample", "mean", "min", "max"] = "sample",
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{name: (steps int64, values float64)} for start ≤ step ≤ end, NaN where NaN.

        `every=N` thins long series for plotting: `agg='sample'` keeps steps that are
        multiples of N; 'mean'/'min'/'max' reduce each bucket of N steps (labelled by its
        first step, NaN ignored), so a 'max' view keeps the spikes that sampling would
        skip. Unknown names give empty arrays. Complete 256-step chunks are read as
        blobs (store.py, schema v2), so 100k steps cost ~400 rows.
        """
        names = [names] if isinstance(names, str) else list(names)
        if every is not None and (isinstance(every, bool) or int(every) < 1):
            raise UserError(f"every must be an integer ≥ 1, got {every!r}")
        if agg not in ("sample", "mean", "min", "max"):
            raise UserError(f"agg must be sample, mean, min or max, got {agg!r}")
        lo = -(2**62) if start is None else int(start)
        hi = 2**62 if end is None else int(end)
        out = {}
        with self.snapshot():
            ids = dict(self._q("SELECT name, id FROM metrics WHERE kind = 'scalar'"))
            done = int(self._q("SELECT value FROM meta WHERE key = 'compacted_upto'")[0][0])
            for name in names:
                with reading(self.path, f"the series of {name!r:.80}"):
                    steps, values = self._series(ids.get(name), done, lo, hi)
                out[name] = thin(steps, values, every, agg)
        return out

    def _series(
        self, mid: int | None, done: int, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One metric's steps in [lo, hi]: complete chunks from blobs, the tail from rows."""
        if mid is None:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        steps, values = [], []
        if lo < done:
            for s, v in self._q(
                "SELECT steps, vals FROM scalar_chunks WHERE metric_id = ? AND hi > ? AND lo <= ?"
                " ORDER BY lo",
                (mid, lo, hi),
            ):
                steps.append(np.frombuffer(s, dtype="<i8"))
                values.append(np.frombuffer(v, dtype="<f8"))
        if hi >= done:
            rows = self._q(
                "SELECT step, value FROM scalars WHERE metric_id = ? AND step >= ? AND step <= ?"
                " ORDER BY step",
                (mid, max(lo, done), hi),
            )
            if rows:
                arr = np.array(rows, dtype=np.float64)  # None (NaN) -> nan
                steps.append(arr[:, 0].astype(np.int64))
                values.append(arr[:, 1])
        if not steps:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        s, v = np.concatenate(steps).astype(np.int64), np.concatenate(values).astype(np.float64)
        keep = (s >= lo) & (s <= hi)
        return s[keep], v[keep]

    def rows(
        self, start: int | None = None, end: int | None = None
    ) -> Iterator[tuple[int, str, float]]:
        """Every scalar as (step, name, value), ordered by step then name, streamed (one
        snapshot; for exports of long runs without holding them in memory)."""
        rng, args = self._range(start, end)
        sql = (
            "SELECT s.step, m.name, s.value FROM scalars s JOIN metrics m ON m.id = s.metric_id"
            f" WHERE 1 = 1{rng.replace('step', 's.step')} ORDER BY s.step, m.name"
        )
        with self.snapshot(), reading(self.path, "scalars"):
            for step, name, value in self._conn.execute(sql, args):
                yield step, name, schema._f(value)

    @reads("distributions")
    def histograms(
        self, name: str, start: int | None = None, end: int | None = None, every: int | None = None
    ) -> Histograms:
        """The per-step histograms of one distribution (see records.Histograms)."""
        row = self._q("SELECT id FROM metrics WHERE kind = 'histogram' AND name = ?", (name,))
        if not row:
            raise UserError(f"no distribution named {name!r} in {self.path}")
        rng, rargs = self._range(start, end)
        thin = f" AND step % {int(every)} = 0" if every and every > 1 else ""
        rows = self._q(
            f"SELECT step, lo, hi, counts, n, n_nonfinite, mean, std, min, max,"
            f" {', '.join(_QCOLS)} FROM histograms WHERE metric_id = ?{rng}{thin} ORDER BY step",
            [row[0][0], *rargs],
        )
        if rows:
            counts = np.stack([np.frombuffer(r[3], dtype="<i8") for r in rows])
            lo, hi = rows[-1][1], rows[-1][2]
            edges = np.linspace(lo, hi, counts.shape[1] - 1)
        else:
            counts, edges = np.zeros((0, 0), np.int64), np.zeros(0)

        def col(i: int, dtype: Any = np.float64) -> np.ndarray:
            return np.array([r[i] for r in rows], dtype=dtype)

        return Histograms(
            name=name,
            steps=col(0, np.int64),
            edges=edges,
            counts=counts,
            n=col(4, np.int64),
            n_nonfinite=col(5, np.int64),
            mean=col(6),
            std=col(7),
            min=col(8),
            max=col(9),
            quantiles={c: col(10 + i) for i, c in enumerate(_QCOLS)},
        )

    # -- records
    @reads("alerts")
    def alerts(
        self,
        start: int | None = None,
        end: int | None = None,
        min_severity: str = "info",
        open_only: bool = False,
    ) -> list[Alert]:
        """Alerts with start ≤ step ≤ end and at least `min_severity`, oldest first."""
        rng, args = self._range(start, end)
        where = rng + (" AND cleared_step IS NULL" if open_only else "")
        rank = severity_rank(min_severity)
        found = schema._alerts(self._conn, where, args, self._version)
        return [a for a in found if severity_rank(a.severity) >= rank]

    @reads("actions")
    def actions(self, status: str | None = None) -> list[Action]:
        """Remediation actions (automatic and requested), oldest first."""
        if status is None:
            return schema._actions(self._conn, "", ())
        return schema._actions(self._conn, "WHERE status = ?", (status,))

    @reads("events")
    def events(self, kind: str | None = None) -> list[Event]:
        """Run events (start, resume, checkpoint, rollback, truncate, crash, close...)."""
        where, args = ("WHERE kind = ?", (kind,)) if kind else ("", ())
        rows = self._q(f"SELECT id, step, kind, detail, time FROM events {where} ORDER BY id", args)
        return [Event(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    @reads("the run summary")
    def summary(
        self, stale_after_s: float = 120.0, collapse_detectors: Iterable[str] | None = None
    ) -> RunSummary:
        """Who the run is and how it ended (see RunSummary). `collapse_detectors`: the
        detectors whose alerts count as collapse alerts (default: the monitor's)."""
        if collapse_detectors is None:
            from monitor.config import MonitorConfig

            collapse_detectors = MonitorConfig().remediation.collapse_detectors
        with self.snapshot():
            meta = self.meta()
            return RunSummary(
                path=meta.path,
                run_id=meta.run_id,
                status=self.status(stale_after_s),
                last_step=self.last_step(),
                created_at=meta.created_at,
                last_write=self.last_write(),
                n_alerts=self._count("alerts"),
                n_pending_actions=self._count("actions WHERE status = 'pending'"),
                stopped=self._stopped(),
                first_alert=self._first_alert(()),
                first_collapse_alert=self._first_alert(tuple(collapse_detectors)),
            )

    def _count(self, where: str) -> int:
        return self._q(f"SELECT count(*) FROM {where}")[0][0]

    def _stopped(self) -> str | None:
        rows = self._q(
            "SELECT kind, step, detail FROM events WHERE kind IN ('stop', 'crash')"
            " ORDER BY id DESC LIMIT 1"
        )
        if not rows:
            return None
        kind, step, detail = rows[0][0], rows[0][1], json.loads(rows[0][2])
        if kind == "crash":
            return f"crash at step {step}: {detail.get('error', '')}"
        return str(detail.get("reason"))

    def _first_alert(self, detectors: tuple[str, ...]) -> tuple[int, str] | None:
        """(step, detector) of the first warning-or-worse alert, of `detectors` if given."""
        where = f" AND detector IN ({', '.join('?' * len(detectors))})" if detectors else ""
        rows = self._q(
            "SELECT step, detector FROM alerts WHERE severity IN ('warning', 'critical')"
            f"{where} ORDER BY step, id LIMIT 1",
            detectors,
        )
        return (int(rows[0][0]), str(rows[0][1])) if rows else None


def list_runs(runs_dir: str | os.PathLike[str], stale_after_s: float = 120.0) -> list[RunSummary]:
    """Every run under `runs_dir` (itself or its direct sub-directories), newest first.

    A store that cannot be read is listed with `error` set instead of failing the list.
    """
    root = Path(runs_dir)
    if not root.is_dir():
        raise UserError(f"runs directory {root} does not exist")
    candidates = [root / STORE_FILE, *(run / STORE_FILE for run in runs_below(root))]
    out = []
    for path in candidates:
        if not path.is_file():
            continue
        try:
            with RunReader(path) as reader:
                out.append(reader.summary(stale_after_s))
        except UserError as err:
            unread = (None, None, None, None)  # status, last step, created, last write
            out.append(RunSummary(str(path.parent), path.parent.name, *unread, error=str(err)))
    return sorted(out, key=lambda s: s.created_at or 0.0, reverse=True)
