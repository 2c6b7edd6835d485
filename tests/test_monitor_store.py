"""The run store and Monitor: round trips, histograms against numpy, one transaction per
step, a SIGKILLed writer, a concurrent reader, resume/truncate, actions, bad files."""

from __future__ import annotations

import math
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from core.controls import RunControls
from monitor import Monitor, MonitorConfig, RunReader, UserError, list_runs, request_action
from monitor.config import HistogramSpec
from monitor.store.histograms import bin_values
from monitor.store.records import AlertDraft
from monitor.store.run_store import SCHEMA_VERSION, STORE_FILE, RunStore

ROOT = Path(__file__).resolve().parents[1]
CONTROLS = {"is_policy": "none", "clip": True, "mini_batches": 1, "lr": 3e-4, "moe": True}

# A writer that logs forever: 80 metrics per step, value = step + i/128 (exact in binary),
# and prints each step once it is committed.
WRITER = textwrap.dedent(
    """
    import sys, time
    from monitor import Monitor
    mon = Monitor(sys.argv[1], config={"seed": 1})
    step = 0
    while step < int(sys.argv[2]):
        mon.log(step, {f"m/{i:02d}": step + i / 128 for i in range(80)})
        print(step, flush=True)
        step += 1
        time.sleep(float(sys.argv[3]))
    mon.close()
    """
)


def _writer(run_dir: Path, steps: int, pause: float = 0.0) -> subprocess.Popen:
    """A Monitor logging `steps` steps of 80 metrics in another process, `pause` seconds
    apart (so that a reader gets several looks however busy the machine is)."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir), str(steps), str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _check_complete(reader: RunReader) -> int:
    """Every stored step has all 80 exact values; returns the last step."""
    names = [f"m/{i:02d}" for i in range(80)]
    with reader.snapshot():
        last = reader.last_step()
        series = reader.scalars(names)
    assert last is not None
    for i, name in enumerate(names):
        steps, values = series[name]
        np.testing.assert_array_equal(steps, np.arange(last + 1))
        np.testing.assert_array_equal(values, np.arange(last + 1) + i / 128)
    return last


def test_round_trip_keeps_values_nan_and_inf(tmp_path):
    mon = Monitor(tmp_path / "r", config={"lr": 3e-4, "name": "x"}, controls=CONTROLS)
    values = [0.1, 1e-300, -2.5, math.inf, -math.inf, math.nan, 7.0]
    for step, v in enumerate(values):
        mon.log(step, {"a/x": v, "b/y": step * 2})
    mon.log(10, {"a/x": 3.0})  # gaps are fine
    mon.close()
    with RunReader(tmp_path / "r") as r:
        meta = r.meta()
        assert meta.config == {"lr": 3e-4, "name": "x"}
        assert RunControls.stored(meta.controls) == RunControls.of(CONTROLS)
        assert meta.schema_version == SCHEMA_VERSION
        assert r.metric_names() == ["a/x", "b/y"]
        steps, got = r.scalars("a/x")["a/x"]
        np.testing.assert_array_equal(steps, [0, 1, 2, 3, 4, 5, 6, 10])
        np.testing.assert_array_equal(got, [*values, 3.0])  # assert_array_equal: nan == nan
        assert r.scalars(["nope"])["nope"][0].size == 0
        steps, got = r.scalars("b/y", start=2, end=4)["b/y"]
        np.testing.assert_array_equal(steps, [2, 3, 4])
        np.testing.assert_array_equal(got, [4.0, 6.0, 8.0])
        assert r.status() == "finished"
        assert [e.kind for e in r.events()] == ["start", "close"]


def test_thinning_sample_and_bucket_max_keep_spikes(tmp_path):
    mon = Monitor(tmp_path / "r")
    for step in range(100):
        mon.log(step, {"g": 100.0 if step == 37 else float(step % 10)})
    mon.close()
    with RunReader(tmp_path / "r") as r:
        steps, v = r.scalars("g", every=10)["g"]
        np.testing.assert_array_equal(steps, np.arange(0, 100, 10))
        np.testing.assert_array_equal(v, np.zeros(10))  # sampling misses the spike
        steps, v = r.scalars("g", every=10, agg="max")["g"]
        assert v[3] == 100.0 and v[0] == 9.0  # bucket 30..39 keeps it
        steps, v = r.scalars("g", every=25, agg="mean")["g"]
        np.testing.assert_array_equal(steps, [0, 25, 50, 75])
        ref = [np.mean([100.0 if s == 37 else s % 10 for s in range(b, b + 25)]) for b in steps]
        np.testing.assert_allclose(v, ref, rtol=1e-12)
        with pytest.raises(UserError, match="every"):
            r.scalars("g", every=0)


def test_histogram_bins_match_numpy_and_keep_tails(tmp_path):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0, 1.5, 5000), [-9.0, 12.0, 5.0, -5.0, np.nan, np.inf]])
    spec = HistogramSpec("*log*", -5.0, 5.0, 20)
    row = bin_values(x, spec)
    finite = x[np.isfinite(x)]
    edges = np.linspace(-5, 5, 21)
    inside = finite[(finite >= -5) & (finite < 5)]
    ref, _ = np.histogram(inside, bins=edges)  # numpy puts 5.0 in the last bin; we overflow it
    assert row.counts[0] == np.sum(finite < -5)
    assert row.counts[-1] == np.sum(finite >= 5)
    np.testing.assert_array_equal(row.counts[1:-1], ref)
    assert row.n == finite.size and row.n_nonfinite == 2
    assert row.min == -9.0 and row.max == 12.0
    assert row.quantiles["p50"] == np.quantile(finite, 0.5)
    assert row.mean == pytest.approx(float(np.mean(finite)), rel=1e-12)

    cfg = MonitorConfig(histograms=(spec, HistogramSpec("*", 0.0, 1.0, 4)))
    mon = Monitor(tmp_path / "r", monitor_config=cfg)
    mon.log(0, {"a": 1.0}, {"log_ratio": x, "other": [0.1, 0.3, 0.3, 2.0]})
    mon.log(1, {"a": 1.0}, {"log_ratio": [0.0]})
    mon.close()
    with RunReader(tmp_path / "r") as r:
        assert r.metric_names("histogram") == ["log_ratio", "other"]
        h = r.histograms("log_ratio")
        np.testing.assert_array_equal(h.steps, [0, 1])
        np.testing.assert_array_equal(h.counts[0], row.counts)
        np.testing.assert_array_equal(h.edges, edges)
        assert h.counts[1].sum() == 1 and h.counts[1][11] == 1  # 0.0 is in [0, 0.5)
        assert h.quantiles["p99"][0] == row.quantiles["p99"]
        o = r.histograms("other")
        np.testing.assert_array_equal(o.counts[0], [0, 1, 2, 0, 0, 1])
        with pytest.raises(UserError, match="no distribution"):
            r.histograms("missing")


def test_a_step_is_one_transaction(tmp_path, monkeypatch):
    mon = Monitor(tmp_path / "r")
    mon.log(0, {"a": 1.0}, {"log_x": [0.0]})

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(mon.store, "write_histogram", boom)
    with pytest.raises(OSError):
        mon.log(1, {"a": 2.0, "b": 3.0}, {"log_x": [0.0]})
    monkeypatch.undo()
    with RunReader(tmp_path / "r") as r:
        assert r.last_step() == 0  # neither the scalars nor the heartbeat of step 1
        assert r.metric_names() == ["a"]
    mon.log(1, {"a": 2.0})  # the writer is still usable
    mon.close()


def test_killed_writer_loses_at_most_one_step_and_resumes(tmp_path):
    run = tmp_path / "r"
    proc = _writer(run, 10**9)
    for line in proc.stdout:
        if int(line) >= 60:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    with RunReader(run) as r:
        last = _check_complete(r)
        assert last >= 60
        assert r.status(now=time.time() + 1e6) == "crashed"  # no close, silent
    mon = Monitor(run, resume=True)
    assert mon.last_step() == last
    assert mon.controls == RunControls()
    with pytest.raises(UserError, match="before the last logged step"):
        mon.log(last - 1, {"m/00": 0.0})
    mon.log(last + 1, {f"m/{i:02d}": last + 1 + i / 128 for i in range(80)})
    mon.close()
    with RunReader(run) as r:
        assert _check_complete(r) == last + 1
        assert [e.kind for e in r.events()] == ["start", "resume", "close"]
        assert r.meta().config == {"seed": 1}


def test_reader_sees_complete_steps_while_the_writer_runs(tmp_path):
    run = tmp_path / "r"
    proc = _writer(run, 400, pause=0.002)
    while not (run / STORE_FILE).exists() or not proc.stdout.readline():
        time.sleep(0.01)
    reads, lasts = 0, []
    with RunReader(run) as r:
        while proc.poll() is None:
            lasts.append(_check_complete(r))
            r.summary()
            reads += 1
        proc.wait(timeout=30)
        assert proc.returncode == 0, proc.stderr.read()
        assert _check_complete(r) == 399
        assert r.status() == "finished"
    assert reads >= 3 and lasts == sorted(lasts)  # it grew under our eyes, never shrank


def test_existing_run_needs_resume_and_truncate_drops_later_steps(tmp_path):
    run = tmp_path / "r"
    mon = Monitor(run, controls=CONTROLS)
    for step in range(10):
        mon.log(step, {"a": float(step), "mismatch/kl_k1": 1e-3 if step < 7 else 0.5})
    mon.close()
    with pytest.raises(UserError, match="already holds a run"):
        Monitor(run)
    mon = Monitor(run, resume=True)
    assert mon.controls == RunControls.of(CONTROLS)  # stored controls come back
    dropped = mon.truncate_after(5)
    assert dropped["steps"] == 4 and dropped["scalars"] == 8
    assert dropped["alerts"] == 1  # the kl_k1 level alert of step 9 (3 steps ≥ 0.01)
    assert mon.last_step() == 5
    mon.log(6, {"a": 60.0})
    mon.close()
    with RunReader(run) as r:
        steps, v = r.scalars("a")["a"]
        np.testing.assert_array_equal(steps, np.arange(7))
        assert v[-1] == 60.0
        assert r.alerts() == []
        truncate = r.events("truncate")[0]
        assert truncate.detail["after_step"] == 5 and truncate.step == 5


def test_same_step_merges_and_bad_input_is_a_user_error(tmp_path):
    mon = Monitor(tmp_path / "r")
    mon.log(3, {"a": 1.0})
    mon.log(3, {"b": 2.0, "a": 5.0})
    for bad in (-1, 2.0, True):
        with pytest.raises(UserError, match="step"):
            mon.log(bad, {"a": 1.0})
    with pytest.raises(UserError, match="not a number"):
        mon.log(4, {"a": "high"})
    with pytest.raises(UserError, match="non-empty"):
        mon.log(4, {"": 1.0})
    with pytest.raises(UserError, match="numbers"):
        mon.log(4, {"a": 1.0}, {"log_x": ["x"]})
    mon.close()
    with pytest.raises(UserError, match="closed"):
        mon.log(5, {"a": 1.0})
    with RunReader(tmp_path / "r") as r:
        got = r.scalars(["a", "b"])
        assert [(s.tolist(), v.tolist()) for s, v in got.values()] == [([3], [5.0]), ([3], [2.0])]
        assert r.last_step() == 3


def test_actions_requested_from_outside_are_validated_deduplicated_and_resolved(tmp_path):
    run = tmp_path / "r"
    mon = Monitor(run, controls=CONTROLS)
    mon.log(0, {"a": 1.0})
    a = request_action(run, "set_mini_batches", {"n": 2}, "too stale", source="dashboard")
    assert a.status == "pending" and a.step == 0 and a.params == {"n": 2}
    again = request_action(run, "set_mini_batches", {"n": 4}, "again")
    assert again.id == a.id  # no duplicate of a pending kind
    with pytest.raises(UserError, match="must be an integer ≥ 1"):
        request_action(run, "set_mini_batches", {"n": 0}, "x")
    with pytest.raises(UserError, match="unknown action kind"):
        mon.request_action("reboot", {}, "x")
    with pytest.raises(UserError, match="needs a reason"):
        mon.request_action("stop", {}, " ")
    lr = mon.request_action("scale_lr", {"factor": 0.5}, "collapse", source="user")
    assert [p.id for p in mon.pending_actions()] == [a.id, lr.id]
    mon.resolve(a.id, "applied", "4 -> 2")
    mon.resolve(lr.id, "rejected", "not now")
    with pytest.raises(UserError, match="already applied"):
        mon.resolve(a.id, "rejected", "")
    with pytest.raises(UserError, match="no action"):
        mon.resolve(999, "applied", "")
    assert mon.controls.mini_batches == 2 and mon.controls.lr == 3e-4
    assert mon.pending_actions() == []
    mon.close()
    with RunReader(run) as r:
        assert r.meta().controls["mini_batches"] == 2
        done = {x.id: x for x in r.actions()}
        assert done[a.id].status == "applied" and done[a.id].detail == "4 -> 2"
        assert done[lr.id].status == "rejected" and done[lr.id].source == "user"
        assert [x.id for x in r.actions("applied")] == [a.id]


def test_hooks_receive_each_step_and_cannot_break_it(tmp_path, caplog):
    seen, notified = [], []

    class Exporter:
        def observe(self, step, scalars, alerts):
            seen.append((step, dict(scalars), [x.detector for x in alerts]))
            if step == 1:
                raise RuntimeError("scrape broke")

    class Notifier:
        def notify(self, alert):
            notified.append(alert.id)

    mon = Monitor(tmp_path / "r", exporter=Exporter(), notifier=Notifier())
    mon.log(0, {"a": 1.0})
    mon.log(1, {"optim/loss": math.nan})
    mon.log(2, {"optim/loss": 1.0})
    mon.close()
    assert seen[0] == (0, {"a": 1.0}, [])
    assert seen[1][2] == ["nonfinite"] and seen[2][2] == ["nonfinite"]  # opened, then cleared
    assert len(notified) == 1
    assert "scrape broke" in caplog.text
    with RunReader(tmp_path / "r") as r:
        (alert,) = r.alerts()
        assert alert.cleared_step == 2 and alert.severity == "critical" and math.isnan(alert.value)


def test_status_live_crashed_finished(tmp_path):
    mon = Monitor(tmp_path / "a")
    mon.log(0, {"a": 1.0})
    with RunReader(tmp_path / "a") as r:
        assert r.status() == "live"
        assert r.status(stale_after_s=60, now=time.time() + 61) == "crashed"
    with pytest.raises(ZeroDivisionError), Monitor(tmp_path / "b") as m:
        m.log(0, {"a": 1.0})
        _ = 1 / 0
    with RunReader(tmp_path / "b") as r:
        assert r.status() == "crashed"
        assert "ZeroDivisionError" in r.events("crash")[0].detail["error"]
    mon.close()
    runs = {Path(s.path).name: s for s in list_runs(tmp_path)}
    assert runs["a"].status == "finished" and runs["a"].last_step == 0
    assert runs["b"].status == "crashed"
    assert runs["a"].stopped is None
    assert runs["b"].stopped.startswith("crash at step 0: ZeroDivisionError")


def test_summary_says_how_the_run_ended_and_its_first_alerts(tmp_path):
    def alert(detector: str, severity: str) -> AlertDraft:
        return AlertDraft(detector, severity, "m", 1.0, 0.0, 0, "outcome", "msg", "remedy")

    store = RunStore.open(tmp_path)
    with store.transaction():
        store.insert_alert(1, alert("length_blowup", "info"), 0.0)  # info does not count
        store.insert_alert(2, alert("truncation", "warning"), 0.0)  # not a collapse detector
        store.insert_alert(3, alert("nonfinite", "critical"), 0.0)
        store.insert_event(3, "crash", {"error": "boom"}, 0.0)
        store.insert_event(3, "stop", {"reason": "stop action"}, 0.0)  # the later one tells
    store.close()
    with RunReader(tmp_path) as reader:
        s = reader.summary()
        assert s.stopped == "stop action" and s.n_alerts == 3
        assert s.first_alert == (2, "truncation")
        assert s.first_collapse_alert == (3, "nonfinite")
        only = reader.summary(collapse_detectors=["truncation"])
        assert only.first_collapse_alert == (2, "truncation")


def test_foreign_corrupt_and_newer_files_are_clear_errors(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / STORE_FILE).write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(UserError, match="not a readable minirl run store"):
        RunReader(tmp_path / "junk")
    with pytest.raises(UserError, match="not a readable minirl run store"):
        Monitor(tmp_path / "junk")
    other = tmp_path / "other"
    other.mkdir()
    conn = sqlite3.connect(other / STORE_FILE)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with pytest.raises(UserError, match="no minirl metadata"):
        RunReader(other)
    conn = sqlite3.connect(other / STORE_FILE)
    conn.execute("PRAGMA user_version = 0")  # someone else's database: never migrated over
    conn.commit()
    conn.close()
    with pytest.raises(UserError, match="no minirl metadata"):
        Monitor(other)
    with pytest.raises(UserError, match="no run store"):
        RunReader(tmp_path / "missing")
    Monitor(tmp_path / "new").close()
    conn = sqlite3.connect(tmp_path / "new" / STORE_FILE)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(UserError, match="newer than this minirl"):
        RunReader(tmp_path / "new")
    listed = {Path(s.path).name: s for s in list_runs(tmp_path)}
    assert listed["junk"].error and listed["other"].error and listed["new"].error


def test_migrations_run_in_order_and_config_is_json(tmp_path):
    store = RunStore.open(tmp_path / "r")
    version = store._conn.execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA_VERSION
    store.close()
    raw = sqlite3.connect(tmp_path / "r" / STORE_FILE)
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        "meta",
        "metrics",
        "steps",
        "scalars",
        "histograms",
        "alerts",
        "actions",
        "events",
    } <= tables
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()
    mon = Monitor(tmp_path / "r", config={"nested": {"x": [1, 2]}, "inf": math.inf})
    mon.close()
    with RunReader(tmp_path / "r") as r:
        assert r.meta().config == {"nested": {"x": [1, 2]}, "inf": math.inf}


def _truth(reader, name, start=None, end=None):
    """The row-by-row path (export's), an independent read of the same series."""
    rows = [(s, v) for s, n, v in reader.rows(start, end) if n == name]
    return np.array([s for s, _ in rows], np.int64), np.array([v for _, v in rows])


def test_chunked_series_equal_the_rows_across_boundaries_truncation_and_migration(
    tmp_path, monkeypatch
):
    monkeypatch.setattr("monitor.store.schema.CHUNK_STEPS", 8)
    run = tmp_path / "r"
    mon = Monitor(run)
    for step in range(0, 60):
        scalars = {"a": math.nan if step % 7 == 0 else step / 3}
        if step % 3 == 0:
            scalars["b"] = float(step)
        mon.log(step, scalars)
    mon.truncate_after(37)  # inside the compacted chunk [32, 40)
    for step in range(38, 45):
        mon.log(step, {"a": -float(step)})
    mon.close()
    raw = sqlite3.connect(run / STORE_FILE)
    assert raw.execute("SELECT value FROM meta WHERE key = 'compacted_upto'").fetchone()[0] == "40"
    chunks = raw.execute("SELECT metric_id, lo FROM scalar_chunks ORDER BY metric_id, lo")
    assert [lo for _, lo in chunks] == [0, 8, 16, 24, 32] * 2  # a and b, rebuilt after 32
    raw.close()
    with RunReader(run) as r:
        for start, end in [(None, None), (5, 33), (30, 41), (40, None), (None, 7), (100, 200)]:
            for name in ("a", "b"):
                steps, values = r.scalars(name, start, end)[name]
                ref_s, ref_v = _truth(r, name, start, end)
                np.testing.assert_array_equal(steps, ref_s)
                np.testing.assert_array_equal(values, ref_v)
        steps, values = r.scalars("a", every=5, agg="max")["a"]
        ref_s, ref_v = _truth(r, "a")
        buckets = ref_s // 5 * 5
        np.testing.assert_array_equal(steps, np.unique(buckets))
        np.testing.assert_array_equal(values, [np.nanmax(ref_v[buckets == b]) for b in steps])
        steps, values = r.scalars("a", every=5, agg="mean")["a"]
        np.testing.assert_allclose(values, [np.nanmean(ref_v[buckets == b]) for b in steps])
        assert r.scalars("a")["a"][1][-1] == -44.0  # the rewritten branch, not the old one


def test_a_v1_store_is_migrated_to_chunks_by_the_writer(tmp_path, monkeypatch):
    from monitor.store import schema as store_mod

    monkeypatch.setattr("monitor.store.schema.CHUNK_STEPS", 4)
    path = tmp_path / "old"
    path.mkdir()
    conn = sqlite3.connect(path / STORE_FILE, isolation_level=None)
    conn.execute("BEGIN")
    store_mod.MIGRATIONS[0](conn)  # the schema as version 1 wrote it
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [
            ("app", "minirl"),
            ("run_id", "old1"),
            ("created_at", "0"),
            ("config", "{}"),
            ("controls", "{}"),
        ],
    )
    conn.execute("INSERT INTO metrics (id, name) VALUES (1, 'x')")
    conn.executemany("INSERT INTO steps VALUES (?, 0)", [(s,) for s in range(10)])
    conn.executemany("INSERT INTO scalars VALUES (1, ?, ?)", [(s, s * 1.5) for s in range(10)])
    conn.execute("PRAGMA user_version = 1")
    conn.execute("COMMIT")
    conn.close()
    with pytest.raises(UserError, match="old schema"):
        RunReader(path)  # a reader never writes, so it cannot migrate
    RunStore.open(path).close()
    with RunReader(path) as r:
        steps, values = r.scalars("x")["x"]
        np.testing.assert_array_equal(steps, np.arange(10))
        np.testing.assert_array_equal(values, np.arange(10) * 1.5)
        assert r.meta().run_id == "old1"
    raw = sqlite3.connect(path / STORE_FILE)
    assert raw.execute("SELECT lo FROM scalar_chunks ORDER BY lo").fetchall() == [(0,), (4,)]
    raw.close()


def test_a_v2_store_reads_without_since_and_migrates_on_write(tmp_path):
    """Alerts gained `since_step` in v3; a run written by the previous minirl stays
    readable (since None) and a writer adds the column."""
    with Monitor(tmp_path / "r") as mon:
        mon.store.insert_alert(
            3, AlertDraft("d", "warning", "m", 1.0, 0.5, 5, "outcome", "msg", "fix", since=1), 0.0
        )
    raw = sqlite3.connect(tmp_path / "r" / STORE_FILE)
    raw.execute("ALTER TABLE alerts DROP COLUMN since_step")
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()
    with RunReader(tmp_path / "r") as reader:
        [alert] = reader.alerts()
        assert (alert.step, alert.since, reader.meta().schema_version) == (3, None, 2)
    RunStore.open(tmp_path / "r").close()
    with RunReader(tmp_path / "r") as reader:
        assert reader.meta().schema_version == SCHEMA_VERSION == 3
        assert reader.alerts()[0].since is None


def test_prometheus_port_starts_the_exporter_on_loopback(tmp_path):
    import urllib.request

    mon = Monitor(tmp_path / "run7", prometheus_port=0)
    port = mon._exporter.port
    mon.log(0, {"reward/mean": 0.25})
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    mon.close()
    assert 'minirl_metric{name="reward/mean",run="run7"} 0.25' in body
