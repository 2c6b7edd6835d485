"""`minirl watch`: live TensorBoard (tensorboardX) and JSONL logs followed while a writer
appends, detectors firing on injected precursors and the alerts reaching a loopback
webhook; truncation, rotation, a trainer re-logging old steps, restarts without
duplicates, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from app.cli import main
from monitor.importers.tensorboard import parse_tensorboard
from monitor.store.reader import RunReader
from monitor.watch.cli import open_watch

tensorboardX = pytest.importorskip("tensorboardX")
ROOT = Path(__file__).resolve().parents[1]
STEPS, RISE, NAN_STEP = 120, 80, 100


def grad_norm(step: int) -> float:
    """Flat with a little noise, then ten times higher from RISE on: a precursor."""
    return (10.0 if step >= RISE else 1.0) * (1 + 0.02 * math.sin(step))


def entropy(step: int) -> float:
    return float("nan") if step == NAN_STEP else 0.6 - step / 1000


def series(run: Path) -> dict[str, dict[int, float]]:
    with RunReader(run) as reader:
        return {
            name: dict(zip(s.tolist(), v.tolist(), strict=True))
            for name, (s, v) in reader.scalars(reader.metric_names()).items()
        }


def last_step(run: Path) -> int | None:
    try:
        with RunReader(run) as reader:
            return reader.last_step()
    except Exception:  # not created yet
        return None


class Receiver:
    """A loopback HTTP server that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def write_live(tb_dir: Path, jsonl: Path, steps: range, rate_hz: float) -> None:
    """A trainer logging to TensorBoard (flushing every step, as HF's callback does) and
    to a verl-style JSONL file."""
    writer = tensorboardX.SummaryWriter(str(tb_dir))
    with jsonl.open("a") as log:
        for step in steps:
            writer.add_scalar("actor/grad_norm", grad_norm(step), step)
            writer.add_scalar("actor/entropy", 0.6, step)
            writer.flush()
            row = {"actor/grad_norm": 1.0, "actor/entropy": entropy(step)}
            log.write(json.dumps({"step": step, "data": row}) + "\n")
            log.flush()
            time.sleep(1 / rate_hz)
    writer.close()


def watch_cmd(source: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", "watch", str(source), "--out", str(out), *extra]


def test_live_tensorboard_and_jsonl_alerts_reach_the_webhook(tmp_path):
    tb_dir, jsonl = tmp_path / "tb", tmp_path / "train.jsonl"
    tb_dir.mkdir()
    receiver = Receiver()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = {"tb": tmp_path / "runs" / "tb", "jsonl": tmp_path / "runs" / "jsonl"}
    procs = {
        name: subprocess.Popen(
            watch_cmd(src, runs[name], "--poll", "0.1", "--webhook", receiver.url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for name, src in (("tb", tb_dir), ("jsonl", jsonl))
    }
    try:
        write_live(tb_dir, jsonl, range(STEPS), rate_hz=200)
        deadline = time.monotonic() + 30
        while any(last_step(r) != STEPS - 1 for r in runs.values()):
            assert time.monotonic() < deadline, {n: last_step(r) for n, r in runs.items()}
            time.sleep(0.1)
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        outs = {name: proc.communicate(timeout=20) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
        receiver.close()
    for name, proc in procs.items():
        assert proc.returncode == 0, outs[name][1]
        assert f"stored {STEPS} steps" in outs[name][0]

    tb = series(runs["tb"])
    assert tb["optim/grad_norm"] == {s: pytest.approx(grad_norm(s)) for s in range(STEPS)}
    js = series(runs["jsonl"])
    assert math.isnan(js["policy/entropy"][NAN_STEP]) and len(js["policy/entropy"]) == STEPS
    with RunReader(runs["tb"]) as reader:
        tb_alerts = [a for a in reader.alerts() if a.metric == "optim/grad_norm"]
        assert reader.meta().source["format"] == "tensorboard"
        assert reader.status() == "finished"
    with RunReader(runs["jsonl"]) as reader:
        js_alerts = [a for a in reader.alerts() if a.detector == "nonfinite"]
    assert tb_alerts and RISE <= tb_alerts[0].step < RISE + 10
    assert [a.step for a in js_alerts] == [NAN_STEP]
    sent = {(b["run"], b["alert"]["detector"], b["alert"]["step"]) for b in receiver.bodies}
    assert ("tb", tb_alerts[0].detector, tb_alerts[0].step) in sent
    assert ("jsonl", "nonfinite", NAN_STEP) in sent


def write_jsonl(path: Path, steps: range, mode: str = "a", value: float = 1.0) -> None:
    with path.open(mode) as log:
        for step in steps:
            log.write(json.dumps({"step": step, "data": {"actor/grad_norm": value + step}}) + "\n")


def test_rotation_truncation_and_rewrites(tmp_path):
    log = tmp_path / "train.jsonl"
    write_jsonl(log, range(0, 10))
    watcher = open_watch(str(log), tmp_path / "run")
    watcher.poll()
    # logrotate: the old file renamed (and still written to by the trainer), a new one made
    with log.open("a") as old:
        log.rename(tmp_path / "train.jsonl.1")
        write_jsonl(log, range(12, 20))
        for step in (10, 11):  # the tail the trainer wrote before reopening
            old.write(json.dumps({"step": step, "data": {"actor/grad_norm": 1.0 + step}}) + "\n")
    watcher.poll()
    watcher.poll()
    # copytruncate: emptied in place, then written again
    with log.open("r+") as handle:
        handle.truncate(0)
    watcher.poll()
    write_jsonl(log, range(20, 25))
    watcher.poll()
    # a trainer resumed from an old checkpoint reopens with "w" and re-logs steps 22..29
    # (grown past the old offset before the next read: only its first bytes changed)
    write_jsonl(log, range(22, 30), mode="w", value=100.0)
    watcher.poll()
    counts = watcher.counts
    watcher.mon.close()
    got = series(tmp_path / "run")["optim/grad_norm"]
    assert sorted(got) == list(range(30))
    assert got[11] == 12.0 and got[24] == 25.0  # rotated tail kept; stored values kept
    assert got[25] == 125.0  # the re-logged run from its first new step on
    assert counts.late == 3 and counts.garbage == 0


def test_restarts_and_crashes_never_duplicate_or_lose(tmp_path):
    """A real event file arrives in pieces cut anywhere; after every piece the watcher
    stops (cleanly or not at all) and a new one continues from the stored state."""
    src = tmp_path / "written"
    writer = tensorboardX.SummaryWriter(str(src))
    for step in range(60):
        for tag in ("actor/grad_norm", "actor/entropy", "critic/score/mean"):
            writer.add_scalar(tag, grad_norm(step) + len(tag), step)
    writer.close()
    (event_file,) = src.glob("*tfevents*")
    data = event_file.read_bytes()
    live = tmp_path / "live"
    live.mkdir()
    target = live / event_file.name
    target.write_bytes(b"")
    reread = 0
    for i, start in enumerate(range(0, len(data), 777)):
        with target.open("ab") as out:
            out.write(data[start : start + 777])
        watcher = open_watch(str(live), tmp_path / "run")
        watcher.poll()
        reread += watcher.counts.late
        if i % 2:
            watcher.mon.close()  # a clean stop; otherwise dropped as if killed
    watcher = open_watch(str(live), tmp_path / "run")
    watcher.drain()
    watcher.mon.close()
    expected = parse_tensorboard(event_file).rows
    got = series(tmp_path / "run")
    assert reread == 0  # nothing already stored was read again
    for tag, name in (("actor/grad_norm", "optim/grad_norm"), ("critic/score/mean", "reward/mean")):
        assert got[name] == {s: pytest.approx(row[tag]) for s, row in expected.items()}
    # and the CLI resumes a finished watch without storing anything twice
    assert main(["watch", str(live), "--out", str(tmp_path / "run"), "--once"]) == 0


def test_resumed_trainer_in_a_new_event_file(tmp_path):
    """A trainer restarted from step 40 writes a new event file re-logging 40..59: the
    stored steps stay as first logged, the steps after them are added."""
    tb = tmp_path / "tb"
    first = tensorboardX.SummaryWriter(str(tb), filename_suffix=".a")
    for step in range(60):
        first.add_scalar("actor/grad_norm", 1.0, step)
    first.close()
    assert main(["watch", str(tb), "--out", str(tmp_path / "run"), "--once"]) == 0
    second = tensorboardX.SummaryWriter(str(tb), filename_suffix=".b")
    for step in range(40, 80):
        second.add_scalar("actor/grad_norm", 2.0, step)
    second.close()
    assert main(["watch", str(tb), "--out", str(tmp_path / "run"), "--once"]) == 0
    got = series(tmp_path / "run")["optim/grad_norm"]
    assert got == {s: 1.0 if s < 60 else 2.0 for s in range(80)}


def test_user_errors_are_one_line(tmp_path, capsys):
    log = tmp_path / "a.jsonl"
    write_jsonl(log, range(3))
    assert main(["watch", str(log), "--out", str(tmp_path / "run"), "--once"]) == 0
    cases = [
        (["watch", str(tmp_path / "b.jsonl"), "--out", str(tmp_path / "run")], "already holds"),
        (["watch", str(tmp_path / "x.bin"), "--out", str(tmp_path / "r2")], "cannot tell"),
        (
            ["watch", str(tmp_path / "nodir"), "--format", "tensorboard", "--out", "r", "--once"],
            "no such",
        ),
        (["watch", str(log), "--out", str(tmp_path / "r3"), "--poll", "0"], "--poll"),
        (["watch", str(log), "--out", str(tmp_path / "r4"), "--map", "x"], "THEIRS=OURS"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_plain_scripts_names_are_followed_with_map(tmp_path):
    """`--map` names a script's own metrics, as `minirl import --map` does; the peers'
    names (`actor/grad_norm`) are still mapped beside it."""
    log = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "token_entropy": 0.5, "actor/grad_norm": 1.0 + s} for s in range(8)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["watch", str(log), "--out", str(tmp_path / "run"), "--once"]
    assert main([*argv, "--map", "token_entropy=policy/entropy"]) == 0
    got = series(tmp_path / "run")
    assert got["policy/entropy"] == {s: 0.5 for s in range(8)}
    assert got["optim/grad_norm"][7] == 8.0 and "token_entropy" not in got
    # resumed without --map, the watch keeps its own; another map is refused
    with log.open("a") as more:
        more.write(json.dumps({"step": 8, "token_entropy": 0.4}) + "\n")
    assert main(argv) == 0
    assert series(tmp_path / "run")["policy/entropy"][8] == 0.4
    assert main([*argv, "--map", "token_entropy=other"]) == 2


def test_dashboard_marks_watched_runs_with_their_source(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard.settings import ENV_HOST, ENV_RUNS_DIR, ENV_TOKEN
    from monitor.monitor import Monitor

    runs = tmp_path / "runs"
    log = tmp_path / "train.jsonl"
    write_jsonl(log, range(5))
    assert main(["watch", str(log), "--out", str(runs / "watched"), "--once"]) == 0
    with Monitor(runs / "ours") as mon:
        mon.log(0, {"reward/mean": 0.5})
    monkeypatch.setenv(ENV_RUNS_DIR, str(runs))
    monkeypatch.setenv(ENV_HOST, "127.0.0.1")
    monkeypatch.delenv(ENV_TOKEN, raising=False)
    app = ROOT / "dashboard" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    rows = {r["run"]: r for r in at.dataframe[0].value.to_dict("records")}
    assert rows["watched"]["source"] == f"watch · jsonl · {log.resolve()}"
    assert rows["watched"]["last step"] == "4"
    assert rows["ours"]["source"] == "minirl"


def test_watch_loads_no_torch(tmp_path):
    log = tmp_path / "a.jsonl"
    write_jsonl(log, range(3))
    code = (
        "import sys; from app.cli import main; "
        f"assert main(['watch', {str(log)!r}, '--out', {str(tmp_path / 'run')!r}, '--once']) == 0; "
        "assert 'torch' not in sys.modules, 'torch loaded'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_a_json_line_nested_too_deeply_is_garbage_to_the_watch_not_a_crash(tmp_path):
    """The watch reads JSON lines with the importer's reader: a line too deep for the json
    module (RecursionError, not a ValueError) is one garbage line, and the next is read."""
    from monitor.watch.sources import JsonlSource

    log = tmp_path / "m.jsonl"
    log.write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps({"step": 1, "x": 2.0}) + "\n")
    parsed = JsonlSource(log).poll()
    assert parsed.garbage == 1 and parsed.units == 2
    assert "nested too deeply" in parsed.examples[0]
