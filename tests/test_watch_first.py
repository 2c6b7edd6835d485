"""`minirl watch` started before its source exists: it says once what it waits for, then
follows a TensorBoard run (tensorboardX's real writer) or a JSONL file created after it;
Ctrl-C while waiting stops it cleanly; a path whose format cannot be told is refused."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_watch import last_step

from app.cli import main
from monitor.store.reader import RunReader
from monitor.store.schema import store_path

tensorboardX = pytest.importorskip("tensorboardX")
ROOT = Path(__file__).resolve().parents[1]
STEPS = 60


def start_watch(source: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "app.cli", "watch", str(source), "--out", str(out)]
    return subprocess.Popen(
        [*cmd, "--poll", "0.1", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )


def first_line(proc: subprocess.Popen, timeout: float = 60) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "watch said nothing"
    return proc.stdout.readline()


def wait_last(run: Path, step: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while last_step(run) != step:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, last_step(run)
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        return proc.communicate(timeout=30)
    finally:
        proc.kill()


def test_tensorboard_run_written_after_the_watch_started(tmp_path):
    tb_dir, out = tmp_path / "tb", tmp_path / "runs" / "x"
    proc = start_watch(tb_dir, out)
    line = first_line(proc)
    assert f"waiting for {tb_dir} (a TensorBoard log directory)" in line
    assert not store_path(out).exists()  # nothing is made before the source exists
    writer = tensorboardX.SummaryWriter(str(tb_dir))
    for step in range(STEPS):
        writer.add_scalar("actor/grad_norm", 1.0 + step, step)
        writer.add_scalar("actor/entropy", 0.5, step)
        writer.flush()
        time.sleep(0.01)
    writer.close()
    wait_last(out, STEPS - 1, proc)
    rest, err = stop(proc)
    assert proc.returncode == 0, err
    assert "waiting" not in rest  # said once
    assert f"stored {STEPS} steps" in rest
    with RunReader(out) as reader:
        steps, values = reader.scalars(["optim/grad_norm"])["optim/grad_norm"]
        assert reader.meta().source["format"] == "tensorboard"
    assert steps.tolist() == list(range(STEPS))
    assert values.tolist() == [1.0 + s for s in range(STEPS)]


def test_jsonl_file_that_appears_later(tmp_path):
    log, out = tmp_path / "logs" / "train.jsonl", tmp_path / "run"
    proc = start_watch(log, out)
    assert "(a JSONL log file)" in first_line(proc)
    time.sleep(0.3)
    log.parent.mkdir()
    with log.open("w") as f:
        for step in range(1, 21):
            f.write(json.dumps({"step": step, "data": {"actor/grad_norm": step / 10}}) + "\n")
            f.flush()
    wait_last(out, 20, proc)
    rest, err = stop(proc)
    assert proc.returncode == 0, err
    assert "stored 20 steps" in rest
    with RunReader(out) as reader:
        assert reader.scalars(["optim/grad_norm"])["optim/grad_norm"][0].tolist() == list(
            range(1, 21)
        )


def test_ctrl_c_while_waiting_stops_cleanly(tmp_path):
    out = tmp_path / "run"
    proc = start_watch(tmp_path / "later", out, "--format", "jsonl")
    assert "waiting for" in first_line(proc)
    rest, err = stop(proc)
    assert proc.returncode == 0, err
    assert rest.strip().splitlines() == [
        f"minirl watch: stopped before {tmp_path / 'later'} appeared; nothing stored"
    ]
    assert "Traceback" not in err
    assert not out.exists()


def test_a_path_whose_format_cannot_be_told_is_refused(tmp_path, capsys):
    for name in ("metrics.bin", "exp.v2"):
        assert main(["watch", str(tmp_path / name), "--out", str(tmp_path / "r")]) != 0
        out, err = capsys.readouterr()
        assert err.strip().count("\n") == 0 and "Traceback" not in err
        assert f"cannot tell the format of {tmp_path / name} (it does not exist yet)" in err
        assert "--format" in err and "waiting" not in out
    assert not (tmp_path / "r").exists()
