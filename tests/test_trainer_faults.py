"""The trainer under faults (issue 19, holes 1, 4 and 6): a run killed before its first
checkpoint resumes from its start; non-finite steps are skipped, recorded and, when they
keep coming, stop the run with a clear message, an intact last good checkpoint and a
non-zero exit; a collapse of held-out accuracy is said at the end (exit 3 with
--fail-on-collapse); a full disk is one clear error; files of killed processes go."""

from __future__ import annotations

import dataclasses
import errno
import os
import sqlite3

import pytest
import torch

from app import cli
from monitor import RunReader
from trainer.checkpoints import list_checkpoints, load_checkpoint
from trainer.config import dump_config
from trainer.outcome import collapse
from trainer.run import train


class Killed(BaseException):
    """Stands for SIGKILL in-process: nothing after it runs but the crash record."""


def _series(run_dir, name):
    with RunReader(run_dir) as reader:
        steps, values = reader.scalars(name)[name]
    return steps.tolist(), values.tolist()


def test_a_run_killed_before_its_first_checkpoint_resumes_from_its_start(
    tiny_config, tmp_path, monkeypatch, capsys
):
    cfg = tiny_config(checkpoint_every=100)
    base = train(dataclasses.replace(cfg, run_dir=str(tmp_path / "base")), progress=False)
    import trainer.run as run_module

    original = run_module._log

    def killed_after_step_2(run, result):
        original(run, result)
        if run.step == 2:
            raise Killed

    monkeypatch.setattr(run_module, "_log", killed_after_step_2)
    with pytest.raises(Killed):
        train(cfg)
    assert not list_checkpoints(cfg.resolved_run_dir)
    monkeypatch.setattr(run_module, "_log", original)
    # was: "no checkpoint to resume from", and without --resume "already holds a run"
    result = train(cfg, resume=True)
    assert "no complete checkpoint; resuming from the start" in capsys.readouterr().err
    assert result.stopped == "completed" and result.last_step == 3
    for name in ("reward/mean", "optim/loss", "eval/acc"):
        assert _series(cfg.resolved_run_dir, name) == _series(base.run_dir, name), name
    with RunReader(cfg.resolved_run_dir) as reader:
        assert [e.kind for e in reader.events()].count("resume_from_start") == 1


def test_non_finite_steps_are_skipped_then_stop_the_run_keeping_the_good_checkpoint(
    tiny_config, monkeypatch, capsys
):
    cfg = tiny_config(checkpoint_every=2, train={"steps": 8})
    config = cfg.resolved_run_dir.parent / "run.yaml"
    config.write_text(dump_config(cfg))
    import trainer.engines.torch.training as training

    clip = torch.nn.utils.clip_grad_norm_
    calls = {"n": 0}

    def nan_from_step_3(params, max_norm):  # 2 mini-batches per step: calls 5.. are step 3..
        calls["n"] += 1
        if calls["n"] > 4:
            for p in params:
                p.grad.fill_(float("nan"))
        return clip(params, max_norm)

    monkeypatch.setattr(training.torch.nn.utils, "clip_grad_norm_", nan_from_step_3)
    assert cli.main(["train", str(config), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "non-finite at step 5" in out and "3 non-finite steps in a row" in out
    assert "last good checkpoint:" in out and "step_000002.pt (step 2)" in out
    ckpts = list_checkpoints(cfg.resolved_run_dir)
    assert list(ckpts) == [2]  # nothing of the diverged steps was checkpointed
    with RunReader(cfg.resolved_run_dir) as reader:
        assert [e.step for e in reader.events("nonfinite")] == [3, 4, 5]
        assert reader.events("stop")[-1].detail["reason"] == "non-finite"
    steps, norms = _series(cfg.resolved_run_dir, "optim/grad_norm")
    assert steps == [1, 2, 3, 4, 5] and all(n != n for n in norms[2:])  # recorded
    weights = load_checkpoint(ckpts[2])["policy"]["model"]
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_the_issues_lr_1e8_run_stops_cleanly(tiny_config, capsys):
    cfg = tiny_config(optim={"lr": 1e8}, train={"steps": 10})
    config = cfg.resolved_run_dir.parent / "run.yaml"
    config.write_text(dump_config(cfg))
    # was: 8 steps at reward 0, then ValueError: grad_cosine got a non-finite gradient
    assert cli.main(["train", str(config), "--quiet"]) == 1
    captured = capsys.readouterr()
    assert "non-finite at step" in captured.out and "Traceback" not in captured.err


def test_a_collapse_is_said_at_the_end_and_fails_when_asked(tiny_config, monkeypatch, capsys):
    cfg = tiny_config(train={"steps": 4})
    config = cfg.resolved_run_dir.parent / "run.yaml"
    config.write_text(dump_config(cfg))
    import trainer.boundary as boundary_module  # held_out: the loop's held-out evaluation

    accs = iter([0.31, 0.30, 0.0])  # steps 0, 2 and 4

    def falling(*args, **kwargs):
        return {"eval/acc": next(accs)}

    monkeypatch.setattr(boundary_module, "evaluate", falling)
    # was: "completed" and exit 0
    assert cli.main(["train", str(config), "--quiet", "--fail-on-collapse"]) == 3
    out = capsys.readouterr().out
    assert "completed at step 4" in out
    assert "held-out accuracy collapsed: 0.310 at step 0 -> 0.000 at step 4, 100%" in out
    with RunReader(cfg.resolved_run_dir) as reader:
        assert "collapsed" in reader.events("stop")[-1].detail["collapse"]


def test_collapse_rule():
    from monitor.detectors.config import DetectorsConfig

    rule = DetectorsConfig().eval_collapse
    assert collapse([0, 10, 20], [0.31, 0.25, 0.0], rule).startswith("held-out accuracy")
    assert collapse([0, 10, 20], [0.31, 0.25, 0.2], rule) is None  # kept half of its gain
    assert collapse([0, 10, 20], [0.02, 0.01, 0.0], rule) is None  # nothing learned to lose


def test_a_full_disk_at_a_checkpoint_is_one_error_and_leaves_no_partial_file(
    tiny_config, monkeypatch, capsys
):
    cfg = tiny_config(checkpoint_every=2)
    config = cfg.resolved_run_dir.parent / "run.yaml"
    config.write_text(dump_config(cfg))
    import trainer.checkpoints as checkpoints

    def full(payload, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoints.torch, "save", full)
    assert cli.main(["train", str(config), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "step_000002.pt: cannot be written (No space left on device; " in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list((cfg.resolved_run_dir / "checkpoints").iterdir())
    with RunReader(cfg.resolved_run_dir) as reader:
        assert reader.last_step() == 2 and reader.events("crash")


def test_a_full_disk_in_the_store_is_one_error_and_keeps_every_earlier_step(tmp_path):
    from core.errors import UserError
    from monitor import Monitor

    with Monitor(tmp_path / "run") as mon:
        for step in range(1, 6):
            mon.log(step, {"a": float(step)})
        conn = mon.store._conn
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
        with pytest.raises(UserError, match="database or disk is full"):
            for step in range(6, 10_000):
                mon.log(step, {f"m{i}": float(step) for i in range(50)})
    conn = sqlite3.connect(tmp_path / "run" / "store.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    steps = [r[0] for r in conn.execute("SELECT step FROM steps ORDER BY step")]
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] >= 5


def test_files_of_killed_processes_are_removed_on_start(tiny_config, coldstart_cache):
    from trainer.checkpoints import remove_partial_checkpoints
    from trainer.coldstart import cold_start

    cfg = tiny_config()
    folder = cfg.resolved_run_dir / "checkpoints"
    folder.mkdir(parents=True)
    dead, alive = 2**22 + 12345, os.getpid()  # beyond pid_max: never running
    (folder / f"step_000004.tmp{dead}").write_bytes(b"half")
    (folder / f"step_000006.tmp{os.getppid()}").write_bytes(b"being written")
    stale = coldstart_cache / f".tmp-abc-{dead}"
    stale.mkdir()
    assert [p.name for p in remove_partial_checkpoints(cfg.resolved_run_dir)] == [
        f"step_000004.tmp{dead}"
    ]
    assert (folder / f"step_000006.tmp{os.getppid()}").exists() and alive
    cold_start(cfg.model, cfg.task, cfg.cold_start, progress=False)
    assert not stale.exists()
