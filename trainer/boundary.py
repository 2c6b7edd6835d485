"""The step boundary of an RL run: scripted incidents, remediation actions, rollback.

Between two steps the loop (trainer/run.py) applies the incidents due (trainer/
incidents.py), then every pending remediation action (automatic or from the dashboard)
through trainer/controls.py, each resolved applied or rejected with a reason, and
carries out a rollback request: it restores a checkpoint exactly (weights, optimiser,
torch RNG, data/lr position) and verifies it by the restored policy's held-out accuracy.
A stop request is returned to the loop. It does not run steps or write checkpoints.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from core.errors import UserError
from monitor.remediation.healthy import Verdict
from trainer.checkpoints import list_checkpoints, load_checkpoint, restore_rng
from trainer.controls import Controls, Rejected, Request, apply_action
from trainer.evaluate import evaluate
from trainer.incidents import Incident, apply_rollout_quant
from trainer.run_state import RunState


def induce(run: RunState, incident: Incident) -> None:
    """Apply one scripted incident, record it as an `incident` event (labelled induced)."""
    try:
        out = _apply(run, incident.kind, incident.params)
    except Rejected as why:
        raise UserError(f"{incident.describe()}: cannot be applied ({why})") from None
    assert isinstance(out, Controls)  # rollback/stop are not incident kinds
    changed = controls_diff(run.controls, out)
    set_controls(run, out)
    run.mon.update_controls(out.for_monitor(run.cfg.optim.lr, run.policy.is_moe))
    run.mon.event(
        "incident",
        {
            "kind": incident.kind,
            "params": incident.params,
            "note": incident.describe(),
            "induced": True,
            "effect": changed or "none: held by a cap or floor that remediation set",
        },
    )
    run.bar.message(incident.describe())


def set_controls(run: RunState, controls: Controls) -> None:
    """The run's new controls; a rollout precision that moved is synced into the engine."""
    run.controls = controls
    if run.engine is not None and run.engine.weight_quant != controls.rollout_quant:
        apply_rollout_quant(run.engine, run.policy.model, controls.rollout_quant)


def _apply(run: RunState, kind: str, params: dict[str, Any]) -> Controls | Request:
    """An action on the run's controls (trainer/controls.py); raises Rejected."""
    return apply_action(
        run.controls,
        kind,
        params,
        prompts_per_step=run.cfg.train.prompts_per_step,
        moe=run.policy.is_moe,
    )


def apply_actions(run: RunState) -> Request | None:
    """Apply every pending action in order; a stop or rollback request is returned to the
    loop (a stop wins over a rollback). Each action is resolved applied or rejected."""
    request: Request | None = None
    for action in run.mon.pending_actions():
        try:
            out = _apply(run, action.kind, action.params)
        except Rejected as why:
            run.mon.resolve(action.id, "rejected", str(why))
            run.bar.message(f"action {action.kind} rejected: {why}")
            continue
        if isinstance(out, Request):
            if request is None or out.kind == "stop":
                request = out
            run.mon.resolve(action.id, "applied", f"{out.kind} at the step boundary")
        else:
            changed = controls_diff(run.controls, out)
            set_controls(run, out)
            run.mon.resolve(action.id, "applied", changed or "no change")
        run.bar.message(f"action {action.kind} {action.params} applied ({action.source})")
    return request


def rollback(run: RunState, request: Request) -> None:
    """Restore the requested (or the latest healthy) checkpoint exactly: weights,
    optimiser, torch RNG and the data/lr position; the controls stay as remediation set
    them, and the step counter keeps going forward. The event records which checkpoint was
    judged healthy and why (its held-out score against the run's best, no precursor open:
    monitor/remediation/healthy.py), and the held-out accuracy of the restored policy."""
    ckpts = list_checkpoints(run.run_dir)
    mon, step = run.mon, run.step
    if request.step is not None:  # asked for by step: judged all the same, for the record
        verdicts = [v for v in mon.judge_checkpoints([request.step]) if v.step in ckpts]
        verdict = verdicts[0] if verdicts else None
        target = request.step
    else:
        verdict = mon.healthy_checkpoint(list(ckpts))
        target = None if verdict is None else verdict.step
    if target is None or target not in ckpts:
        why = [v.reason for v in mon.judge_checkpoints(list(ckpts))]
        mon.event(
            "rollback_failed",
            {"step": step, "wanted": target, "have": list(ckpts), "verdicts": why},
        )
        run.bar.message(f"rollback: no healthy checkpoint (have {list(ckpts)}); continuing")
        return
    record_rollback(run, step, target, restore(run, ckpts[target]), verdict)


def record_rollback(
    run: RunState, step: int, target: int, after: float | None, verdict: Verdict | None
) -> None:
    """The `rollback` event and line of a restored checkpoint: where from and to, the
    restored policy's held-out accuracy against the last evaluation at or before it, and
    the healthy verdict that chose it."""
    before = [a for s, a in zip(run.eval_steps, run.evals, strict=True) if s <= target]
    run.mon.event(
        "rollback",
        {
            "step": step,
            "to_step": target,
            "pos": run.pos,
            "eval_acc_after": after,
            "eval_acc_before": before[-1] if before else None,
            "healthy": None if verdict is None else verdict_detail(verdict),
        },
    )
    run.bar.message(
        f"rolled back to the checkpoint of step {target} (at step {step}); held-out accuracy "
        f"{after:.3f}" + (f" (was {before[-1]:.3f} there)" if before else "")
    )


def restore(run: RunState, path: Path, evaluate_after: bool = True) -> float | None:
    """Load a checkpoint into the run exactly (weights, optimiser, torch RNG, data/lr
    position; the controls stay) and sync μ; the restored policy's held-out accuracy."""
    payload = load_checkpoint(path)
    run.policy.load_state_dict(payload["policy"])
    restore_rng(payload)
    end = run.last_step
    run.pos = int(payload.get("pos", payload["step"]))
    run.bar.extend(run.last_step - end)  # redone steps (`rollback_redo`) end the run later
    run.set_lr(next_step=False)
    run.engine.update_weights(run.policy.model)
    return held_out(run)["eval/acc"] if evaluate_after else None


def held_out(run: RunState) -> dict[str, float]:
    """eval/* of the inference engine (μ) on the held-out prompts."""
    max_new = run.cfg.sampling.max_new_tokens
    return evaluate(
        run.engine, run.policy.tokenizer, run.task, run.cfg.eval, max_new_tokens=max_new
    )


def verdict_detail(verdict: Verdict) -> dict[str, Any]:
    """A healthy verdict as an event's detail."""
    return {
        "step": verdict.step,
        "healthy": verdict.healthy,
        "score": verdict.score,
        "best": verdict.best,
        "noise": verdict.noise,
        "reason": verdict.reason,
    }


def controls_diff(old: Controls, new: Controls) -> str:
    """'field: old -> new' for every control an action changed (the audit detail)."""
    before = {**dataclasses.asdict(old.loss), **dataclasses.asdict(old)}
    after = {**dataclasses.asdict(new.loss), **dataclasses.asdict(new)}
    before.pop("loss"), after.pop("loss")
    return ", ".join(f"{k}: {before[k]} -> {after[k]}" for k in after if before[k] != after[k])
