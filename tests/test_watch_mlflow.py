"""`minirl watch sqlite:///...`: an MLflow tracking store written by the real mlflow
client (verl's `mlflow` backend writes one) followed while it is written; other runs in
the same store are ignored, NaN (stored by MLflow as 0 with is_nan) stays NaN."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time

import pytest

from app.cli import main
from monitor.store.reader import RunReader
from monitor.watch.cli import open_watch

pytest.importorskip("mlflow")
pytest.importorskip("sqlalchemy")

STEPS = 40
WRITER = textwrap.dedent(
    """
    import sys, time
    import mlflow
    mlflow.set_tracking_uri(sys.argv[1])
    mlflow.set_experiment("attach")
    with mlflow.start_run(run_name="other"):
        for s in range(3):
            mlflow.log_metrics({"actor/grad_norm": 99.0}, step=s)
    with mlflow.start_run(run_name="r1"):
        for s in range(int(sys.argv[2])):
            mlflow.log_metrics({"actor/grad_norm": 1.0 + s, "critic/score/mean": s / 100,
                                "actor/entropy": float("nan") if s == 5 else 0.5}, step=s)
            time.sleep(0.01)
    """
)


def test_mlflow_store_followed_while_written(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}  # no network here
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, uri, str(STEPS)], stderr=subprocess.PIPE, text=True, env=env
    )
    watcher = open_watch(uri, tmp_path / "run", run="r1")
    polls_with_data = 0
    try:
        deadline = time.monotonic() + 60
        while writer.poll() is None:
            assert time.monotonic() < deadline
            polls_with_data += watcher.poll() > 0
            time.sleep(0.05)
        assert writer.returncode == 0, writer.stderr.read()
        watcher.drain()
    finally:
        writer.kill()
        watcher.mon.close()
    with RunReader(tmp_path / "run") as reader:
        got = {
            n: dict(zip(s.tolist(), v.tolist(), strict=True))
            for n, (s, v) in reader.scalars(reader.metric_names()).items()
        }
        assert reader.meta().source == {
            "kind": "watch",
            "format": "mlflow",
            "path": uri,
            "run": "r1",
        }
    assert got["optim/grad_norm"] == {s: 1.0 + s for s in range(STEPS)}  # not run "other"
    assert got["reward/mean"][30] == pytest.approx(0.3)
    assert math.isnan(got["policy/entropy"][5]) and got["policy/entropy"][6] == 0.5
    assert polls_with_data >= 2  # followed live, not read once at the end

    # without --run: the most recently started run; a second pass adds nothing
    other = tmp_path / "run2"
    assert main(["watch", uri, "--out", str(other), "--once"]) == 0
    assert main(["watch", uri, "--out", str(other), "--once"]) == 0
    with RunReader(other) as reader:
        steps, values = reader.scalars(["optim/grad_norm"])["optim/grad_norm"]
    assert steps.tolist() == list(range(STEPS)) and values[0] == 1.0


def test_not_an_mlflow_store_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "x.db"
    bad.write_bytes(b"not sqlite at all" * 100)
    assert main(["watch", f"sqlite:///{bad}", "--out", str(tmp_path / "run"), "--once"]) != 0
    err = capsys.readouterr().err
    assert "not an MLflow tracking store" in err and "Traceback" not in err
