"""verl's real `Tracking` class (verl 0.9.1, verl/utils/tracking.py loaded by file path:
`import verl` would pull Ray) writes TensorBoard while `minirl watch` follows it, and the
same process logs through the `minirl` backend of monitor/integrations/verl.py. Both
stores hold the run under our names, and the injected gradient-norm rise is caught."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from monitor.store.reader import RunReader

ROOT = Path(__file__).resolve().parents[1]
STEPS, RISE = 45, 30

pytest.importorskip("orjson")
pytest.importorskip("tensorboard")
SPEC = importlib.util.find_spec("verl")  # finds the package without running its __init__
if SPEC is None or not SPEC.submodule_search_locations:
    pytest.skip("verl is not installed (pip install --no-deps verl)", allow_module_level=True)
TRACKING = Path(SPEC.submodule_search_locations[0]) / "utils" / "tracking.py"

WRITER = textwrap.dedent(
    """
    import importlib.util, math, sys, time
    spec = importlib.util.spec_from_file_location("verl_tracking", sys.argv[1])
    tracking = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tracking)
    from monitor.integrations.verl import register
    register(tracking.Tracking)
    steps, rise = int(sys.argv[2]), int(sys.argv[3])
    logger = tracking.Tracking("attach", "exp1", default_backend=["tensorboard", "minirl"],
                               config={"trainer": {"total_training_steps": steps}})
    print("ready", flush=True)
    for step in range(1, steps + 1):
        grad_norm = (10.0 if step >= rise else 1.0) * (1 + 0.02 * math.sin(step))
        row = {"actor/grad_norm": grad_norm, "actor/entropy": 0.7, "critic/score/mean": step / 100}
        logger.log({**row, "rollout_corr/kl": 1e-3, "timing_s/step": 0.05}, step=step)
        time.sleep(0.05)
    logger.finish()
    """
)


def _last_step(run: Path) -> int | None:
    try:
        with RunReader(run) as reader:
            return reader.last_step()
    except Exception:
        return None


def test_verl_tracking_tensorboard_followed_by_watch(tmp_path):
    tb_dir, watched, direct = tmp_path / "tb", tmp_path / "runs" / "watched", tmp_path / "direct"
    tb_dir.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TENSORBOARD_DIR": str(tb_dir),
        "MINIRL_RUN_DIR": str(direct),
    }
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "watch",
            str(tb_dir),
            "--out",
            str(watched),
            "--poll",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(TRACKING), str(STEPS), str(RISE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while writer.poll() is None:
            assert time.monotonic() < deadline, "verl writer too slow"
            seen.add(_last_step(watched) or 0)
            time.sleep(0.1)
        assert writer.returncode == 0, writer.stderr.read()
        while _last_step(watched) != STEPS:
            assert time.monotonic() < deadline, _last_step(watched)
            time.sleep(0.1)
        watch.send_signal(signal.SIGTERM)
        _, err = watch.communicate(timeout=20)
    finally:
        writer.kill()
        watch.kill()
    assert watch.returncode == 0, err
    assert any(0 < s < STEPS for s in seen)  # steps arrived while verl was still logging

    for run in (watched, direct):
        with RunReader(run) as reader:
            series = reader.scalars(["optim/grad_norm", "reward/mean", "mismatch/kl_k1"])
            alerts = [a for a in reader.alerts() if a.metric == "optim/grad_norm"]
            assert reader.status() == "finished"
        steps = series["optim/grad_norm"][0]
        assert steps.tolist() == list(range(1, STEPS + 1)), run
        assert series["reward/mean"][1][-1] == pytest.approx(STEPS / 100)
        assert series["mismatch/kl_k1"][1][0] == pytest.approx(1e-3)
        assert alerts and RISE <= alerts[0].step < RISE + 10, run
    with RunReader(direct) as reader:
        assert reader.meta().config["trainer"] == "verl"
    with RunReader(watched) as reader:
        assert reader.meta().source["format"] == "tensorboard"
