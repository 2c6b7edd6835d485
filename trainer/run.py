"""An RL run from config to final checkpoint: cold start, engines, monitor, the step loop.

    run = train(load_config("configs/demo.yaml"))

Around each `rl_step` (trainer/step.py) the loop applies scripted incidents and the
monitor's pending actions at the step boundary (trainer/boundary.py), syncs the new
weights into the inference engine (verified), evaluates held-out accuracy periodically,
logs one `Monitor.log` per step, and checkpoints. It holds the engines only through their
protocols (trainer/engines/base.py). `resume=True` continues from the last checkpoint
with the store truncated to it, so no step is lost or logged twice. A step whose gradient
or log-probabilities are not finite trains nothing and is recorded; NONFINITE_STOP in a
row stop the run without checkpointing the diverged state. A rollback restores an earlier
checkpoint exactly but keeps counting steps forward (the rolled-back branch stays in the
store); the run ends when its data position reaches `train.steps`
(`train.rollback_redo`), or after `train.steps` steps taken without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.errors import UserError
from core.vocabulary import WeightQuant
from monitor import Monitor
from monitor.detectors.rules import ROLLOUT_BITS
from monitor.remediation.healthy import last_healthy
from trainer.boundary import apply_actions, held_out, induce, rollback
from trainer.checkpoints import (
    controls_from_data,
    list_checkpoints,
    load_checkpoint,
    remove_partial_checkpoints,
    restore_rng,
    save_checkpoint,
)
from trainer.coldstart import ColdStart, cold_start
from trainer.config import RunConfig, config_to_dict, dump_config, load_config
from trainer.controls import Controls
from trainer.engines.base import TrainingEngine, WeightSyncError
from trainer.engines.factory import make_inference_engine, make_training_engine
from trainer.engines.quant import rollout_bits
from trainer.evaluate import policy_accuracy
from trainer.forks import experiment
from trainer.incidents import due
from trainer.outcome import collapse
from trainer.progress import NoProgress, Progress
from trainer.run_state import RunState
from trainer.step import NonFiniteBatch, StepResult, rl_step
from trainer.tasks import make_task

CONFIG_FILE = "config.yaml"
NONFINITE_STOP = 3
"""Non-finite steps in a row that stop a run: one bad batch is skipped, a policy that
keeps producing them has diverged and does not recover by itself. Steps without any
gradient (all advantages zero) neither break the row nor checkpoint inside it."""


@dataclass
class RunResult:
    """How a run ended, for the CLI, the demo and the lab."""

    run_dir: Path
    last_step: int
    stopped: str  # "completed" | "stop action" | "non-finite" | "interrupted"
    cold_start: dict[str, float]
    first_eval: float | None
    last_eval: float | None
    collapsed: str | None = None
    """A sentence if held-out accuracy collapsed (trainer/outcome.py), else None."""
    note: str | None = None
    """Why a faulted run stopped and what is intact (non-finite steps)."""


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
    if not resume and (run_dir / "store.sqlite").exists():
        raise UserError(f"{run_dir} already holds a run; pass --resume or choose another run dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    partial = remove_partial_checkpoints(run_dir)  # of a process killed mid-write
    torch.manual_seed(cfg.seed)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)

    # ---- cold start (cached), task, training engine; a resume restores its checkpoint ----
    start = cold_start(
        cfg.model,
        cfg.task,
        cfg.cold_start,
        eval_cfg=cfg.eval,
        progress=progress,
        device=cfg.engine.device,
    )
    task = make_task(cfg.task)
    policy = make_training_engine(start.path, cfg.engine, cfg.optim)
    quant = cfg.engine.weight_quant
    controls = Controls(
        cfg.loss, cfg.train.mini_batches, cfg.train.routing_replay, rollout_quant=quant
    )
    last = pos = 0
    from_start = resume and not list_checkpoints(run_dir)  # killed before its first one
    if resume and not from_start:
        last, pos, controls = _resume_from_checkpoint(run_dir, policy, quant)
    (run_dir / CONFIG_FILE).write_text(dump_config(cfg))
    mon = Monitor(
        run_dir,
        config=config_to_dict(cfg),
        controls=controls.for_monitor(cfg.optim.lr, policy.is_moe),
        monitor_config=cfg.monitor,
        remediation=cfg.train.remediation,
        prometheus_port=prometheus_port,
        exporter=exporter,
        notifier=notifier,
        resume=resume,
    )
    run = RunState(
        cfg, run_dir, mon, policy, task, controls, NoProgress(), step=last, logged=last, pos=pos
    )
    if progress:  # to the step the loop ends at (after a redone rollback, past train.steps)
        run.bar = Progress(last + 1, run.last_step)
    bar = run.bar
    if partial:
        bar.message(f"removed {len(partial)} unfinished checkpoint file(s) of a killed process")
    if from_start:  # its steps go: they are run again from the same start
        mon.truncate_after(-1)
        mon.event("resume_from_start", {"reason": "no complete checkpoint"})
        bar.message(f"{run_dir}: no complete checkpoint; resuming from the start (cold start)")

    # ---- the inference engine, step 0, the steps; a crash is recorded, then raised -------
    try:
        _start_inference(run, start, resume and not from_start)
        stopped = _steps(run)
    except KeyboardInterrupt:
        stopped = "interrupted"
        # a step cut short is not in the store and its updates may be half-applied: no
        # checkpoint of it, so --resume redoes it from the last checkpoint
        run.partial, run.step = run.step != run.logged, run.logged
        bar.message(f"interrupted after step {run.step}; resume with --resume")
    except BaseException as err:
        _record_crash(run, err)
        raise
    if (run.step > last or stopped != "completed") and not run.partial and stopped != "non-finite":
        _checkpoint(run)  # never of a diverged policy: the last good checkpoint stays last
    collapsed = collapse(run.eval_steps, run.evals, cfg.monitor.detectors.eval_collapse)
    _close(run, stopped, collapsed)
    evals = run.evals or [None]
    note = _nonfinite_note(run) if stopped == "non-finite" else None
    first, final = evals[0], evals[-1]
    return RunResult(run_dir, run.step, stopped, start.metrics, first, final, collapsed, note)


def _steps(run: RunState) -> str:
    """RL steps until the last, a stop action or an unrepaired non-finite batch; returns
    why the loop ended."""
    tc = run.cfg.train
    streak = 0  # non-finite steps in a row
    while run.done < tc.steps:
        # ---- step boundary: scripted incidents, then remediation actions ----------------
        for incident in due(tc.incidents, run.step + 1):
            induce(run, incident)
        before = run.controls
        request = apply_actions(run)  # automatic or from the dashboard
        if request is not None and request.kind == "stop":
            return "stop action"
        if request is not None and request.kind == "rollback":
            # to the healthy checkpoint: remedies tried on forks first (trainer/forks.py)
            forked = request.step is None and tc.remediation and experiment(run, before, _take)
            if not forked:
                rollback(run, request)
        run.step += 1
        run.pos += 1
        run.set_lr()

        # ---- the MiniRL step -------------------------------------------------------------
        try:
            result = _take(run)
        except NonFiniteBatch as err:
            streak += 1
            if not _record_nonfinite(run, str(err), streak):
                return "non-finite"
            continue

        # ---- weight sync μ ← θ (verified by the engine), evaluation, log, checkpoint -------
        t0 = time.perf_counter()
        run.engine.update_weights(run.policy.model)
        result.scalars["perf/sync_s"] = time.perf_counter() - t0
        # the rollout precision, a setting like the lr (the detectors see it move)
        result.scalars[ROLLOUT_BITS] = rollout_bits(
            run.cfg.engine.inference_dtype, run.controls.rollout_quant
        )
        if _eval_due(run):
            result.scalars.update(_evaluate(run))
        _log(run, result)
        norm = result.scalars.get("optim/grad_norm", 0.0)
        if not math.isfinite(norm):  # the engine skipped the update(s) of this step
            streak += 1
            if not _record_nonfinite(run, f"gradient norm {norm}: update skipped", streak):
                return "non-finite"
            continue  # no checkpoint of a step that went wrong
        if norm > 0:  # a real update: healthy again (a zero gradient proves nothing)
            streak = 0
        if run.cfg.checkpoint_every and run.step % run.cfg.checkpoint_every == 0 and not streak:
            _checkpoint(run)
    return "completed"


def _take(run: RunState) -> StepResult:
    """The MiniRL step at the run's data position (its prompts and sampling seed), with
    the run's controls; raises NonFiniteBatch. The loop's step and a fork's alike."""
    tc = run.cfg.train
    examples = run.task.sample_train(tc.prompts_per_step, seed=f"{run.cfg.seed}:{run.pos}")
    return rl_step(
        examples,
        run.policy,
        run.engine,
        run.task,
        run.controls,
        run.cfg.sampling,
        seed=run.cfg.seed * 1_000_003 + run.pos,
        advantage_baseline=tc.advantage_baseline,
        advantage_std_norm=tc.advantage_std_norm,
        diagnostics=tc.diagnostics,
        probe_grad_cosine=tc.grad_cosine_every > 0 and run.step % tc.grad_cosine_every == 0,
    )


def _start_inference(run: RunState, start: ColdStart, resume: bool) -> None:
    """The inference engine on the cold-start weights (a resume syncs the checkpoint's),
    the lr of the first step and, on a new run, the held-out accuracy at step 0."""
    mon, policy = run.mon, run.policy
    if resume:
        mon.truncate_after(run.step)
    else:
        mon.event(
            "cold_start", {"checkpoint": str(start.path), "reused": start.reused, **start.metrics}
        )
    # in the run's rollout precision: the config's, or what an incident or a fix made it
    engine_cfg = dataclasses.replace(run.cfg.engine, weight_quant=run.controls.rollout_quant)
    run.engine = make_inference_engine(start.path, engine_cfg)
    if resume:
        run.engine.update_weights(policy.model)
    run.set_lr(next_step=False)
    if not resume:  # step 0: the cold-start policy's held-out accuracy
        acc = _evaluate(run)
        mon.log(0, acc)
        run.bar.message(f"held-out accuracy after cold start: {acc['eval/acc']:.3f}")
        if run.cfg.train.remediation and run.cfg.checkpoint_every:
            _checkpoint(run)  # a run that falls from its start rolls back to its start


def _close(run: RunState, stopped: str, collapsed: str | None = None) -> None:
    """Record why the run stopped and close the store and the inference engine."""
    collapse_detail = {"collapse": collapsed} if collapsed else {}
    run.mon.event("stop", {"step": run.step, "reason": stopped, **collapse_detail})
    run.mon.close()
    if run.engine is not None:
        run.engine.close()


def _resume_from_checkpoint(
    run_dir: Path, policy: TrainingEngine, quant: WeightQuant
) -> tuple[int, int, Controls]:
    """Load the last checkpoint into `policy` and the torch RNG; (its step, its data
    position, its controls; `quant`: the rollout precision of an older checkpoint)."""
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise UserError(f"{run_dir}: no checkpoint to resume from")
    last = max(ckpts)
    payload = load_checkpoint(ckpts[last])
    policy.load_state_dict(payload["policy"])
    restore_rng(payload)
    return last, int(payload.get("pos", last)), controls_from_data(payload["controls"], quant)


def _log(run: RunState, result: StepResult) -> None:
    """One Monitor.log of the step; its warnings and criticals on the progress bar."""
    alerts = run.mon.log(run.step, result.scalars, result.distributions)
    run.logged = run.step
    for alert in alerts:
        if alert.severity != "info":
            run.bar.message(f"step {run.step}: {alert.severity}: {alert.message}")
    run.bar.update(run.step, result.scalars)


def _record_nonfinite(run: RunState, error: str, streak: int) -> bool:
    """Nothing was trained on the step: record it as non-finite (a step cut short by a
    non-finite batch gets a NaN loss row). True to go on: a rollback is pending (the
    monitor's remediation repairs it) or fewer than NONFINITE_STOP in a row."""
    run.mon.event("nonfinite", {"step": run.step, "error": error, "in_a_row": streak})
    if run.logged != run.step:
        run.mon.log(run.step, {"optim/loss": math.nan})
        run.logged = run.step
    if any(a.kind == "rollback" for a in run.mon.pending_actions()) or streak < NONFINITE_STOP:
        run.bar.message(f"step {run.step}: {error}; step skipped ({streak} in a row)")
        return True
    run.bar.message(f"step {run.step}: {error}; {_nonfinite_note(run)}")
    return False


def _nonfinite_note(run: RunState) -> str:
    ckpts = list_checkpoints(run.run_dir)
    last = f"{ckpts[max(ckpts)]} (step {max(ckpts)})" if ckpts else "none (the cold start)"
    return (
        f"stopped: {NONFINITE_STOP} non-finite steps in a row, the policy has diverged; "
        f"last good checkpoint: {last}; lower optim.lr and resume with --resume"
    )


def _record_crash(run: RunState, err: BaseException) -> None:
    """Record the crash and close the store and the engine; a failed weight sync becomes
    one clear UserError (the engine no longer computes what the policy computes, so every
    later IS weight would be wrong: the run stops, its record and checkpoints stay)."""
    sync = isinstance(err, WeightSyncError)
    error = f"weight sync failed: {err}" if sync else f"{type(err).__name__}: {err}"
    with contextlib.suppress(UserError):  # a full disk must not hide the first error
        run.mon.event("crash", {"step": run.step, "error": error})
    with contextlib.suppress(UserError):
        run.mon.close()
    if run.engine is not None:
        run.engine.close()
    if sync:
        raise UserError(
            f"step {run.step}: weight sync into the inference engine failed verification "
            f"({err}); the run stopped, its store is intact; `minirl train --resume` "
            "continues from the last checkpoint"
        ) from None


def _evaluate(run: RunState) -> dict[str, float]:
    """eval/* of the inference engine (μ), plus eval/acc_policy of π if asked for."""
    cfg, policy = run.cfg, run.policy
    max_new = cfg.sampling.max_new_tokens
    acc = held_out(run)
    if cfg.eval.policy:
        acc["eval/acc_policy"] = policy_accuracy(
            policy.model, policy.tokenizer, run.task, cfg.eval, max_new_tokens=max_new
        )
    run.evals.append(acc["eval/acc"])
    run.eval_steps.append(run.step)
    return acc


def _eval_due(run: RunState) -> bool:
    every = run.cfg.eval.every
    return run.done == run.cfg.train.steps or (every > 0 and run.step % every == 0)


def _checkpoint(run: RunState) -> None:
    """Save the policy, its optimiser, the controls and the data position at run.step;
    keep the newest few and the latest healthy one, where a rollback goes. The checkpoint
    event says whether it was measured healthy and why (monitor/remediation/healthy.py)."""
    mon = run.mon
    ckpts = list_checkpoints(run.run_dir)
    verdicts = mon.judge_checkpoints([*ckpts, run.step])  # one read of the store for both
    healthy = last_healthy([v for v in verdicts if v.step in ckpts])
    verdict = next(v for v in verdicts if v.step == run.step)
    path = save_checkpoint(
        run.run_dir,
        run.step,
        run.policy.state_dict(),
        run.controls,
        run.cfg.keep_checkpoints,
        pos=run.pos,
        protect=frozenset() if healthy is None else frozenset({healthy.step}),
    )
    mon.event(
        "checkpoint",
        {
            "step": run.step,
            "pos": run.pos,
            "path": str(path),
            "healthy": verdict.healthy,
            "why": verdict.reason,
        },
    )
