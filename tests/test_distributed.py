"""Data-parallel training on 2 processes (torchrun, gloo, FSDP2) against the same run on one:
the same losses, gradient norms and diagnostics; checkpoints that resume on the other
world size; a killed rank stops the job with one error, and --resume loses no committed
step. Kept short (3 steps of the tiny model); every child process has a timeout."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor import RunReader
from monitor.store.run_store import request_action
from trainer.checkpoints import list_checkpoints, load_checkpoint
from trainer.config import dump_config
from trainer.launch import root_cause
from trainer.run import train

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",  # the tiny config's verifier
    "MINIRL_DIST_TIMEOUT": "120",
    "OMP_NUM_THREADS": "1",
}
# read from the θ_old pass of the same rollout: equal up to float32 summation order
BEFORE_UPDATE = [
    *(
        f"mismatch/{k}"
        for k in (
            "kl_k1",
            "kl_k3",
            "ratio_min",
            "ratio_max",
            "ratio_p01",
            "ratio_p99",
            "chi2_seq",
            "ess",
            "prob_corr",
            "max_abs_prob_diff",
        )
    ),
    "policy/entropy",
    "routing/mismatch_train_infer",
    "routing/overlap",
    "routing/load_cv",
    "reward/mean",
    "response/len_mean",
]
# the first update is the same; AdamW's first steps (m/√v ≈ ±1) turn rounding noise in
# near-zero gradient entries into lr-sized moves, so later updates agree more loosely
AFTER_UPDATE = [
    "optim/loss",
    "optim/grad_norm",
    "staleness/kl_k3",
    "staleness/ratio_max",
    "is/weight_max",
    "approx/seq_residual",
    "routing/mismatch_stale",
    "approx/grad_cosine",
]


def _launch(config: Path, run_dir: Path, nproc: int = 2) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "app.cli", "train", str(config), "--run-dir", str(run_dir)]
    return subprocess.Popen(
        [*cmd, "--nproc", str(nproc), "--quiet"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in _ranks_of(proc.pid).values():  # in sessions of their own
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        raise
    return proc.returncode, err


def _values(run_dir: Path, name: str) -> dict[int, float]:
    steps, values = RunReader(run_dir).scalars([name])[name]
    return dict(zip(steps.tolist(), values.tolist(), strict=True))


def _close(a: float, b: float, rtol: float) -> bool:
    return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-12)


def _write_config(cfg, path: Path) -> Path:
    path.write_text(dump_config(cfg))
    return path


def test_two_ranks_train_like_one_and_resume_in_one(tiny_config, tmp_path):
    cfg = tiny_config()
    one = train(cfg, progress=False).run_dir
    two = tmp_path / "two"
    code, err = _finish(_launch(_write_config(cfg, tmp_path / "tiny.yaml"), two))
    assert code == 0, err

    for name in BEFORE_UPDATE:  # the same batch at step 1: the diagnostics of one process
        a, b = _values(one, name)[1], _values(two, name)[1]
        assert _close(a, b, 1e-6), (name, a, b)
    for name in AFTER_UPDATE:
        a, b = _values(one, name), _values(two, name)
        assert list(a) == list(b) == [1, 2, 3], name
        for step in a:
            rtol = 1e-5 if (step == 1 and name in ("optim/loss", "optim/grad_norm")) else 1e-3
            assert _close(a[step], b[step], rtol), (name, step, a[step], b[step])

    # sharded checkpoints: one file of shards per rank, committed by the .pt naming them
    ckpts = two / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("*.pt")) == ["step_000002.pt", "step_000003.pt"]
    shards = sorted(ckpts.glob("*.dcp"))
    assert [p.name.split(".")[0] for p in shards] == ["step_000002", "step_000003"]
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= {p.name for p in shards[1].iterdir()}

    # resume 2 -> 1: without the step-3 checkpoint, one process redoes step 3 from the
    # 2-rank checkpoint of step 2 (weights, AdamW, RNG) and gets what the 2 ranks got
    logged = {name: _values(two, name)[3] for name in ("optim/loss", "optim/grad_norm")}
    logged.update({name: _values(two, name)[3] for name in BEFORE_UPDATE})
    (ckpts / "step_000003.pt").unlink()
    shutil.rmtree(shards[1])
    resumed = train(dataclasses.replace(cfg, run_dir=str(two)), resume=True, progress=False)
    assert resumed.last_step == 3 and resumed.stopped == "completed"
    for name, before in logged.items():
        after = _values(two, name)
        assert list(after) == [1, 2, 3], name  # no step lost, none logged twice
        assert _close(after[3], before, 1e-5), (name, after[3], before)


def _ranks_of(launcher: int) -> dict[int, int]:
    """{rank: pid} of the launcher's rank processes (torchrun sets RANK in their env)."""
    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines())
            if int(fields.get("PPid", "0")) != launcher:
                continue
            env = (status.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        for item in env:
            if item.startswith(b"RANK="):
                found[int(item[5:])] = int(status.parent.name)
    return found


def _wait(proc: subprocess.Popen, done, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"{what}: not after {seconds} s"
        time.sleep(0.2)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_rollback_on_every_rank_then_a_killed_rank_stops_the_job_with_one_error(
    tiny_config, tmp_path
):
    """A rollback decided on rank 0 restores every rank's shard: the step after it
    replays data position 3 exactly as step 3 did. Then rank 1 is SIGKILLed: one error
    line, no hang, and --resume (in one process) loses no committed step."""
    cfg = tiny_config(train={"steps": 40}, eval={"every": 0}, keep_checkpoints=10)
    run_dir = tmp_path / "killed"
    proc = _launch(_write_config(cfg, tmp_path / "tiny.yaml"), run_dir)
    _wait(proc, (run_dir / "checkpoints" / "step_000002.pt").exists, "checkpoint 2")
    request_action(run_dir, "rollback", {"step": 2}, "test", source="user")
    _wait(proc, lambda: RunReader(run_dir).events(kind="rollback"), "rollback")
    at = RunReader(run_dir).events(kind="rollback")[0].detail["step"]
    _wait(proc, lambda: at + 1 in _values(run_dir, "policy/entropy"), "the step after")
    os.kill(_ranks_of(proc.pid)[1], signal.SIGKILL)
    started = time.monotonic()
    code, err = _finish(proc, timeout=90)
    assert time.monotonic() - started < 60  # stopped, not hanging in a collective
    assert code == 2, err
    # one error line, last; no traceback from our code (a dying interpreter may still
    # print an "Exception ignored in ... __del__" of a library)
    lines = [line for line in err.splitlines() if line.strip()]
    assert [line for line in lines if "error:" in line] == lines[-1:], err
    assert lines[-1].startswith("minirl train: error: rank 1 was killed by SIGKILL"), err
    assert "trainer/" not in err and "app/" not in err, err

    for name in ("reward/mean", "mismatch/kl_k1", "policy/entropy", "optim/grad_norm"):
        series = _values(run_dir, name)  # position 3: at step 3, and right after rollback
        assert _close(series[at + 1], series[3], 1e-9), (name, series[at + 1], series[3])

    committed = max(int(p.stem[5:]) for p in (run_dir / "checkpoints").glob("step_*.pt"))
    before = _values(run_dir, "reward/mean")
    cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=committed + 1))
    resumed = train(cfg, resume=True, progress=False)
    # train.steps counts data positions (`train.rollback_redo`): from the checkpoint's
    # position, committed + 1 - pos steps are left
    pos = load_checkpoint(list_checkpoints(run_dir)[committed])["pos"]
    assert resumed.last_step == committed + (committed + 1 - pos)
    after = _values(run_dir, "reward/mean")
    assert list(after) == list(range(1, resumed.last_step + 1))  # none lost, none twice
    assert all(after[s] == before[s] for s in range(1, committed + 1))


def test_a_user_error_on_rank_0_mid_run_is_one_line(tiny_config, tmp_path):
    """Rank 0 stops with a UserError after the ranks worked together (the θ_old pass on 4
    rows; an update's 2 rows cannot be split over 3 ranks): one line, no traceback."""
    cfg = tiny_config(train={"prompts_per_step": 2, "steps": 2}, sampling={"n": 2})
    config = _write_config(cfg, tmp_path / "tiny.yaml")
    code, err = _finish(_launch(config, tmp_path / "r", nproc=3))
    assert code == 2, err
    assert [line for line in err.splitlines() if line.strip()] == [
        "minirl train: error: 2 rows for 3 ranks: every rank needs a row (raise "
        "train.prompts_per_step or lower train.mini_batches)"
    ], err
    assert RunReader(tmp_path / "r").status() == "crashed"


class _Failure:
    def __init__(self, exitcode: int) -> None:
        self.exitcode = exitcode


def test_root_cause_is_the_killed_rank_or_the_first_error(tmp_path):
    (tmp_path / "rank0.json").write_text(
        '{"rank": 0, "time": 2.0, "message": "RuntimeError: Connection closed by peer"}'
    )
    (tmp_path / "rank1.json").write_text(
        '{"rank": 1, "time": 1.0, "message": "ValueError: bad rows", "trace": "Traceback"}'
    )
    assert root_cause({0: _Failure(1), 1: _Failure(1)}, tmp_path) == (
        "rank 1: ValueError: bad rows",
        "Traceback",
        False,
    )
    # torchrun SIGTERMs the survivors: that is not the cause; a SIGKILL is
    killed = {0: _Failure(-signal.SIGTERM), 1: _Failure(-signal.SIGKILL)}
    assert root_cause(killed, tmp_path)[0] == "rank 1 was killed by SIGKILL"
    assert root_cause({0: _Failure(1)}, tmp_path / "none") == (None, "", False)


@pytest.mark.vllm
def test_two_ranks_with_vllm_on_rank_0(tiny_config, tmp_path):
    """vLLM starts (and closes) its own 1-process torch.distributed group on rank 0 while
    the job's group of 2 lives on: both ranks train, every weight sync is verified."""
    cfg = tiny_config(engine={"inference": "vllm"}, train={"steps": 2}, eval={"every": 0})
    run_dir = tmp_path / "vllm"
    code, err = _finish(_launch(_write_config(cfg, tmp_path / "tiny.yaml"), run_dir))
    assert code == 0, err
    assert list(_values(run_dir, "perf/sync_s")) == [1, 2]
    assert list(_values(run_dir, "optim/grad_norm")) == [1, 2]
    assert RunReader(run_dir).status() == "finished"
