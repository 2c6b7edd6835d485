"""A rollback of the real loop goes to the latest checkpoint measured healthy, keeps it,
and says in its event which checkpoint was judged healthy and why."""

from __future__ import annotations

from monitor import RunReader
from monitor.remediation.healthy import judge
from monitor.store.run_store import request_action
from trainer import run as run_module
from trainer.checkpoints import list_checkpoints
from trainer.run import train


def test_a_rollback_goes_to_the_latest_healthy_checkpoint_and_says_why(tiny_config, monkeypatch):
    cfg = tiny_config(
        train={"steps": 5, "remediation": True},
        eval={"every": 1},
        checkpoint_every=1,
        keep_checkpoints=1,
    )
    original, calls = run_module.rl_step, {"n": 0}

    def step_then_request(*args, **kwargs):
        out = original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 4:  # a rollback to "the last healthy checkpoint" after step 4
            request_action(cfg.resolved_run_dir, "rollback", {}, "test", source="user")
        return out

    monkeypatch.setattr(run_module, "rl_step", step_then_request)
    train(cfg, progress=False)
    with RunReader(cfg.resolved_run_dir) as reader:
        [rb] = reader.events("rollback")
        ckpt_events = reader.events("checkpoint")
        steps, accs = reader.scalars("eval/acc")["eval/acc"]
    assert ckpt_events[0].detail["step"] == 0  # with remediation on, the start is kept too
    assert all("why" in e.detail for e in ckpt_events)
    scores = [(int(s), float(v)) for s, v in zip(steps, accs, strict=True) if s <= rb.step]
    target, verdict = rb.detail["to_step"], rb.detail["healthy"]
    assert verdict["step"] == target and verdict["healthy"] and verdict["reason"]
    # the latest healthy one among the checkpoints taken up to the rollback, by the rule
    expected = [v.step for v in judge(range(rb.step + 1), scores) if v.healthy][-1]
    assert target == expected
    best = max(v for s, v in scores if s <= target)
    assert verdict["score"] >= best - verdict["noise"]
    assert list_checkpoints(cfg.resolved_run_dir)  # and it was kept, though keep=1
