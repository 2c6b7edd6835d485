"""An RL run from config to final checkpoint: cold start, engines, monitor, the step loop.

    run = train(load_config("configs/demo.yaml"))

Around each `rl_step` (trainer/step.py) the loop applies the monitor's pending actions at
the step boundary, syncs the new weights into the inference engine (verified by the
engine), evaluates held-out accuracy periodically, logs one `Monitor.log` per step, and
checkpoints. `resume=True` continues from the last checkpoint with the store truncated to
it, so no step is lost or logged twice. A rollback loads an earlier checkpoint but keeps
counting steps forward: the rolled-back branch stays in the store as evidence.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from monitor import Monitor
from monitor.errors import UserError
from trainer.checkpoints import (
    controls_from_data,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from trainer.coldstart import cold_start
from trainer.config import RunConfig, config_to_dict, dump_config, load_config
from trainer.controls import Controls, Rejected, Request, apply_action
from trainer.engines.base import InferenceEngine, WeightSyncError
from trainer.engines.factory import make_inference_engine
from trainer.engines.training import TrainingEngine
from trainer.evaluate import evaluate, policy_accuracy
from trainer.incidents import SET_ROLLOUT_QUANT, Incident, apply_rollout_quant, due
from trainer.progress import NoProgress, Progress
from trainer.step import NonFiniteBatch, rl_step
from trainer.tasks import Task, make_task

CONFIG_FILE = "config.yaml"


@dataclass
class RunResult:
    """How a run ended, for the CLI, the demo and the lab."""

    run_dir: Path
    last_step: int
    stopped: str  # "completed" | "stop action" | "non-finite" | "interrupted"
    cold_start: dict[str, float]
    first_eval: float | None
    last_eval: float | None


def resume_config(run_dir: Path, overrides: list[str]) -> RunConfig:
    """The config a run was started with (its resolved copy), plus `overrides`."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise UserError(f"{run_dir}: no {CONFIG_FILE}; is this a minirl run directory?")
    return load_config(path, overrides)


def train(
    cfg: RunConfig,
    *,
    resume: bool = False,
    progress: bool = True,
    exporter: Any = None,
    notifier: Any = None,
    prometheus_port: int | None = None,
) -> RunResult:
    """Run (or resume) the RL run of `cfg`; returns how it ended."""
    run_dir = cfg.resolved_run_dir
    tc = cfg.train
    if not resume and (run_dir / "store.sqlite").exists():
        raise UserError(f"{run_dir} already holds a run; pass --resume or choose another run dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)

    # ---- cold start (cached), task, engines ----------------------------------------------
    start = cold_start(cfg.model, cfg.task, cfg.cold_start, eval_cfg=cfg.eval, progress=progress)
    task = make_task(cfg.task)
    policy = TrainingEngine(start.path, cfg.engine, cfg.optim)
    controls = Controls(cfg.loss, tc.mini_batches, tc.routing_replay)
    first_step = 1
    if resume:
        ckpts = list_checkpoints(run_dir)
        if not ckpts:
            raise UserError(f"{run_dir}: no checkpoint to resume from")
        last_ckpt = max(ckpts)
        payload = load_checkpoint(ckpts[last_ckpt])
        policy.load_state_dict(payload["policy"])
        controls = controls_from_data(payload["controls"])
        torch.set_rng_state(payload["torch_rng"])
        first_step = last_ckpt + 1
    (run_dir / CONFIG_FILE).write_text(dump_config(cfg))

    mon = Monitor(
        run_dir,
        config=config_to_dict(cfg),
        controls=controls.for_monitor(cfg.optim.lr, policy.is_moe),
        monitor_config=cfg.monitor,
        remediation=tc.remediation,
        prometheus_port=prometheus_port,
        exporter=exporter,
        notifier=notifier,
        resume=resume,
    )
    engine: InferenceEngine | None = None
    bar = Progress(first_step, tc.steps) if progress else NoProgress()
    step = first_step - 1
    logged = step  # the last step whose record is in the store
    stopped = "completed"
    partial = False
    evals: list[float] = []
    try:
        if resume:
            mon.truncate_after(step)
        else:
            mon.event("cold_start", {"checkpoint": str(start.path), "reused": start.reused,
                                     **start.metrics})  # fmt: skip
        engine = make_inference_engine(start.path, cfg.engine)
        if resume or first_step > 1:
            engine.update_weights(policy.model)
        policy.set_lr_scale(controls.lr_scale * tc.lr_scale(step))
        if not resume:  # step 0: the cold-start policy's held-out accuracy
            acc = _evaluate(engine, policy, task, cfg)
            evals.append(acc["eval/acc"])
            mon.log(0, acc)
            bar.message(f"held-out accuracy after cold start: {acc['eval/acc']:.3f}")

        while step < tc.steps:
            # ---- step boundary: scripted incidents, then remediation actions ----------
            for incident in due(tc.incidents, step + 1):
                controls = _induce(mon, incident, controls, cfg, policy, engine, bar)
            # remediation actions (automatic or from the dashboard)
            controls, request = _apply_actions(mon, controls, cfg, policy.is_moe, bar)
            if request is not None and request.kind == "stop":
                stopped = "stop action"
                break
            if request is not None and request.kind == "rollback":
                _rollback(mon, run_dir, policy, engine, controls, request, step, bar)
            step += 1
            policy.set_lr_scale(controls.lr_scale * tc.lr_scale(step - 1))

            # ---- the MiniRL step ---------------------------------------------------------
            examples = task.sample_train(tc.prompts_per_step, seed=f"{cfg.seed}:{step}")
            try:
                result = rl_step(
                    examples, policy, engine, task, controls, cfg.sampling,
                    seed=cfg.seed * 1_000_003 + step,
                    advantage_baseline=tc.advantage_baseline,
                    advantage_std_norm=tc.advantage_std_norm,
                    diagnostics=tc.diagnostics,
                    probe_grad_cosine=tc.grad_cosine_every > 0 and step % tc.grad_cosine_every == 0,
                )  # fmt: skip
            except NonFiniteBatch as err:
                # nothing was trained on it: record the step as non-finite and let the
                # monitor's remediation roll back, or stop with the reason
                mon.event("nonfinite", {"step": step, "error": str(err)})
                mon.log(step, {"optim/loss": math.nan})
                logged = step
                if not any(a.kind == "rollback" for a in mon.pending_actions()):
                    stopped = "non-finite"
                    bar.message(f"step {step}: {err}; stopping (no rollback requested)")
                    break
                continue

            # ---- weight sync μ ← θ (verified by the engine), evaluation, log -------------
            t0 = time.perf_counter()
            engine.update_weights(policy.model)
            scalars = result.scalars
            scalars["perf/sync_s"] = time.perf_counter() - t0
            if _eval_due(step, cfg):
                acc = _evaluate(engine, policy, task, cfg)
                evals.append(acc["eval/acc"])
                scalars.update(acc)
            alerts = mon.log(step, scalars, result.distributions)
            logged = step
            for alert in alerts:
                if alert.severity != "info":
                    bar.message(f"step {step}: {alert.severity}: {alert.message}")
            bar.update(step, scalars)

            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                _checkpoint(mon, run_dir, step, policy, controls, cfg.keep_checkpoints)
    except KeyboardInterrupt:
        stopped = "interrupted"
        # a step cut short is not in the store and its updates may be half-applied: no
        # checkpoint of it, so --resume redoes it from the last checkpoint
        partial, step = step != logged, logged
        bar.message(f"interrupted after step {step}; resume with --resume")
    except BaseException as err:
        # a failed weight sync: the engine no longer computes what the policy computes, so
        # every later IS weight would be wrong; the run stops (record and checkpoint stay)
        sync = isinstance(err, WeightSyncError)
        error = f"weight sync failed: {err}" if sync else f"{type(err).__name__}: {err}"
        mon.event("crash", {"step": step, "error": error})
        mon.close()
        if engine is not None:
            engine.close()
        if sync:
            raise UserError(
                f"step {step}: weight sync into the inference engine failed verification "
                f"({err}); the run stopped, its store is intact; `minirl train --resume` "
                "continues from the last checkpoint"
            ) from None
        raise
    if (step >= first_step or stopped != "completed") and not partial:
        _checkpoint(mon, run_dir, step, policy, controls, cfg.keep_checkpoints)
    mon.event("stop", {"step": step, "reason": stopped})
    mon.close()
    if engine is not None:
        engine.close()
    return RunResult(
        run_dir=run_dir,
        last_step=step,
        stopped=stopped,
        cold_start=start.metrics,
        first_eval=evals[0] if evals else None,
        last_eval=evals[-1] if evals else None,
    )


# ------------------------------------------------------------------------------ helpers


def _evaluate(
    engine: InferenceEngine, policy: TrainingEngine, task: Task, cfg: RunConfig
) -> dict[str, float]:
    """eval/* of the inference engine (μ), plus eval/acc_policy of π if asked for."""
    max_new = cfg.sampling.max_new_tokens
    acc = evaluate(engine, policy.tokenizer, task, cfg.eval, max_new_tokens=max_new)
    if cfg.eval.policy:
        acc["eval/acc_policy"] = policy_accuracy(
            policy.model, policy.tokenizer, task, cfg.eval, max_new_tokens=max_new
        )
    return acc


def _eval_due(step: int, cfg: RunConfig) -> bool:
    every = cfg.eval.every
    return step == cfg.train.steps or (every > 0 and step % every == 0)


def _checkpoint(
    mon: Monitor, run_dir: Path, step: int, policy: TrainingEngine, controls: Controls, keep: int
) -> None:
    path = save_checkpoint(run_dir, step, policy.state_dict(), controls, keep)
    mon.event("checkpoint", {"step": step, "path": str(path)})


def _induce(
    mon: Monitor,
    incident: Incident,
    controls: Controls,
    cfg: RunConfig,
    policy: TrainingEngine,
    engine: InferenceEngine,
    bar: Progress,
) -> Controls:
    """Apply one scripted incident, record it as an `incident` event (labelled induced)."""
    if incident.kind == SET_ROLLOUT_QUANT:
        apply_rollout_quant(engine, policy.model, incident.params["weight_quant"])
    else:
        try:
            out = apply_action(
                controls, incident.kind, incident.params,
                prompts_per_step=cfg.train.prompts_per_step, moe=policy.is_moe,
            )  # fmt: skip
        except Rejected as why:
            raise UserError(f"{incident.describe()}: cannot be applied ({why})") from None
        assert isinstance(out, Controls)  # rollback/stop are not incident kinds
        controls = out
        mon.update_controls(controls.for_monitor(cfg.optim.lr, policy.is_moe))
    mon.event("incident", {"kind": incident.kind, "params": incident.params,
                           "note": incident.describe(), "induced": True})  # fmt: skip
    bar.message(incident.describe())
    return controls


def _apply_actions(
    mon: Monitor, controls: Controls, cfg: RunConfig, moe: bool, bar: Progress
) -> tuple[Controls, Request | None]:
    """Apply every pending action in order; a stop or rollback request is returned to the
    loop (a stop wins over a rollback). Each action is resolved applied or rejected."""
    request: Request | None = None
    for action in mon.pending_actions():
        try:
            out = apply_action(
                controls, action.kind, action.params,
                prompts_per_step=cfg.train.prompts_per_step, moe=moe,
            )  # fmt: skip
        except Rejected as why:
            mon.resolve(action.id, "rejected", str(why))
            bar.message(f"action {action.kind} rejected: {why}")
            continue
        if isinstance(out, Request):
            if request is None or out.kind == "stop":
                request = out
            mon.resolve(action.id, "applied", f"{out.kind} at the step boundary")
        else:
            changed = _diff(controls, out)
            controls = out
            mon.resolve(action.id, "applied", changed or "no change")
        bar.message(f"action {action.kind} {action.params} applied ({action.source})")
    return controls, request


def _rollback(
    mon: Monitor,
    run_dir: Path,
    policy: TrainingEngine,
    engine: InferenceEngine,
    controls: Controls,
    request: Request,
    step: int,
    bar: Progress,
) -> None:
    """Load the requested (or last healthy) checkpoint's weights and optimiser; the
    controls stay as remediation set them, and the step counter keeps going forward."""
    ckpts = list_checkpoints(run_dir)
    target = request.step if request.step is not None else mon.last_healthy_step(list(ckpts))
    if target is None or target not in ckpts:
        mon.event("rollback_failed", {"step": step, "wanted": target, "have": list(ckpts)})
        bar.message(f"rollback: no healthy checkpoint (have {list(ckpts)}); continuing")
        return
    payload = load_checkpoint(ckpts[target])
    policy.load_state_dict(payload["policy"])
    policy.set_lr_scale(controls.lr_scale)
    engine.update_weights(policy.model)
    mon.event("rollback", {"step": step, "to_step": target})
    bar.message(f"rolled back to the checkpoint of step {target} (at step {step})")


def _diff(old: Controls, new: Controls) -> str:
    """'field: old -> new' for every control an action changed (the audit detail)."""
    before = {**dataclasses.asdict(old.loss), **dataclasses.asdict(old)}
    after = {**dataclasses.asdict(new.loss), **dataclasses.asdict(new)}
    before.pop("loss"), after.pop("loss")
    return ", ".join(f"{k}: {before[k]} -> {after[k]}" for k in after if before[k] != after[k])
