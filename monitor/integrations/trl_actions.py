"""The monitor's remediation actions applied to a running Hugging Face / TRL `Trainer`.

Applied at a step boundary: after the step's log, evaluation and checkpoint, before the
next step draws its batch (the callback wraps the trainer's `get_batch_samples`):
- `set_lr_cap`, `scale_lr`: into the scheduler's own schedule (each `LambdaLR` factor
  wrapped; any other scheduler capped after each step), so they hold for the rest of run;
- `set_is_correction`, `set_is_policy`: GRPOTrainer's vLLM IS correction attributes,
  read at every generation; `set_clip` with ε: `epsilon_low/high`, read per step;
- `set_length_norm` off: `loss_type` "grpo" -> "dr_grpo", read at every loss;
- `rollback`: the requested or last healthy `checkpoint-N` (`healthy.last_healthy`),
  restored as `train(resume_from_checkpoint=...)` would (weights, optimizer, scheduler,
  RNG, data position); steps count forward and (`redo`) `max_steps` grows by the steps
  undone, so every data position is still trained, past the last epoch if need be;
- `stop`: the Trainer stops after the step, the last healthy checkpoint named.
Anything else is refused with the reason (a setting TRL reads once at start-up). Every
action is resolved in the store.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.controls import RunControls
from monitor.remediation.healthy import Verdict, last_healthy
from monitor.store.records import Action

log = logging.getLogger("minirl.monitor")

IS_MODES = {
    "token_tis": "token_truncate",
    "seq_tis": "sequence_truncate",
    "token_mis": "token_mask",
    "seq_mis": "sequence_mask",
    "icepop": "token_mask",
}
"""Our IS policies as TRL's `vllm_importance_sampling_mode` (IcePop: a token mask with
both bounds)."""
_POLICY_OF_MODE = {v: k for k, v in IS_MODES.items() if k != "icepop"}
REFUSED = {
    "set_mini_batches": "TRL fixes steps_per_generation and num_iterations at start-up (its "
    "sampler repeats each generation batch by them); change them in GRPOConfig and resume",
    "set_mini_batches_cap": "TRL fixes steps_per_generation and num_iterations at start-up (its "
    "sampler repeats each generation batch by them); change them in GRPOConfig and resume",
    "set_routing_replay": "TRL has no routing replay",
    "set_rollout_quant": "TRL's rollouts have no weight-rounding setting",
    "set_rollout_quant_floor": "TRL's rollouts have no weight-rounding setting",
}
LENGTH_NORMALISED = ("grpo", "sapo")
"""TRL's loss types that divide each completion's token sum by its own length; the others
(dapo, bnpo, dr_grpo, cispo, ...) divide by a token count or a constant the batch shares."""
_CKPT = re.compile(r"^checkpoint-(\d+)$")


class Refused(Exception):
    """An action the running Trainer cannot take; the message is the reason."""


def controls_of(args: Any, trainer: Any) -> RunControls:
    """The knobs the remediation policy reasons about, read from a TRL run's config."""
    use_vllm = bool(getattr(args, "use_vllm", False))
    on = use_vllm and bool(getattr(args, "vllm_importance_sampling_correction", False))
    mode = getattr(args, "vllm_importance_sampling_mode", None)
    eps = getattr(args, "epsilon", None)
    per_gen = int(getattr(args, "steps_per_generation", None) or 1)
    iters = int(getattr(args, "num_iterations", 1) or 1)
    accum = int(getattr(args, "gradient_accumulation_steps", 1) or 1)
    out: dict[str, Any] = {
        "lr": float(args.learning_rate),
        "is_policy": _POLICY_OF_MODE.get(mode, "token_tis") if on else "none",
        "clip": True,
        "mini_batches": max(1, per_gen * iters // accum),
        "routing_replay": "none",
        "length_norm": getattr(args, "loss_type", None) in LENGTH_NORMALISED,
        "moe": hasattr(getattr(getattr(trainer, "model", None), "config", None), "num_experts"),
    }
    if on and getattr(args, "vllm_importance_sampling_clip_max", None) is not None:
        out["is_cap"] = float(args.vllm_importance_sampling_clip_max)
    if eps is not None:
        out["eps_low"] = float(eps)
        out["eps_high"] = float(getattr(args, "epsilon_high", None) or eps)
    return RunControls.of(out)


def checkpoints(output_dir: str | os.PathLike[str]) -> dict[int, Path]:
    """The Trainer's `checkpoint-N` folders that hold a trainer state, by step."""
    root = Path(output_dir)
    found = {}
    if root.is_dir():
        for p in root.iterdir():
            m = _CKPT.match(p.name)
            if m and (p / "trainer_state.json").is_file():
                found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def healthy_checkpoint(mon: Any, output_dir: str | os.PathLike[str]) -> tuple[Path, Verdict] | None:
    """The last healthy checkpoint before the episode under way, and why, or None (judged
    as the monitor judges minirl's own checkpoints: `Monitor.judge_checkpoints`)."""
    ckpts = checkpoints(output_dir)
    if not ckpts:
        return None
    verdict = last_healthy(mon.judge_checkpoints(list(ckpts)))  # none inside the episode
    return (ckpts[verdict.step], verdict) if verdict is not None else None


class TrainerActions:
    """Applies actions to one running Trainer (see the module docstring)."""

    def __init__(self, trainer: Any, mon: Any, redo: bool = True) -> None:
        self.trainer, self.mon, self.redo = trainer, mon, redo
        self.lr_scale, self.lr_cap = 1.0, None
        self._wrapped_sched: Any = None
        self._iterator: Any = None
        self._epoch = 0
        self._shifts: list[tuple[int, int]] = []
        """(rollback step, global step − data position for the steps after it)."""
        self._trainer_epoch = getattr(trainer, "_run_epoch", None)
        trainer.get_batch_samples = self._get_batch_samples
        if redo and self._trainer_epoch is not None:
            trainer._run_epoch = self._run_epochs

    def close(self) -> None:
        for name in ("get_batch_samples", "_run_epoch"):
            self.trainer.__dict__.pop(name, None)

    def position(self, step: int) -> int:
        """The data position (steps of data consumed) at the end of global step `step`."""
        shift = next((d for after, d in reversed(self._shifts) if step > after), 0)
        return step - shift

    def _run_epochs(self, *args: Any, **kw: Any) -> Any:
        """The Trainer's epoch; after its last one, more passes over the restored data
        stream until `max_steps` (grown by the steps a rollback undid) is reached."""
        out = self._trainer_epoch(*args, **kw)
        t, epoch = self.trainer, kw.get("epoch")
        while (
            not args
            and epoch is not None
            and self._iterator is not None
            and epoch + 1 >= t.state.num_train_epochs
            and t.state.global_step < t.state.max_steps
            and not t.control.should_training_stop
        ):
            epoch += 1
            t.control = t.callback_handler.on_epoch_begin(t.args, t.state, t.control)
            # the batches come from the restored stream: an empty loader draws no RNG
            out = self._trainer_epoch(**{**kw, "epoch": epoch, "train_dataloader": ()})
        return out

    # ------------------------------------------------------------------ boundary
    def _get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
        """The first thing of every step: apply pending actions, then draw the batch (from
        the restored data position after a rollback, the RNG restored where the Trainer
        restores it on resuming: after the first batch when it skipped batches)."""
        rollback = self.apply_pending()
        restored = self._rollback(rollback) if rollback is not None else None
        source = epoch_iterator if self._iterator is None else self._restored_stream()
        batch = type(self.trainer).get_batch_samples(self.trainer, source, num_batches, device)
        if restored is not None:
            self.trainer._load_rng_state(str(restored))
        return batch

    def apply_pending(self) -> Action | None:
        """Resolve every pending action; a rollback is returned to be carried out with
        the next batch (the latest one wins)."""
        rollback = None
        for action in self.mon.pending_actions():
            if action.kind == "stop":
                continue  # the callback stops at on_step_end / on_log
            try:
                if action.kind == "rollback":
                    if rollback is not None:
                        self.mon.resolve(rollback.id, "rejected", "superseded by a later rollback")
                    rollback = action
                    continue
                detail = self._apply(action)
            except Refused as why:
                self.mon.resolve(action.id, "rejected", str(why))
                log.warning("minirl: action %s refused: %s", action.kind, why)
                continue
            self.mon.resolve(action.id, "applied", detail)
            log.warning("minirl: action %s %s applied: %s", action.kind, action.params, detail)
        return rollback

    def _apply(self, action: Action) -> str:
        kind, p, t = action.kind, action.params, self.trainer
        if kind in REFUSED:
            raise Refused(REFUSED[kind])
        if kind == "set_lr_cap":
            self.lr_cap = float(p["lr"])
            return f"lr capped at {self.lr_cap:.3g} from now on: lr {self._hold_lr()}"
        if kind == "scale_lr":
            if not hasattr(self._scheduler(), "lr_lambdas"):
                raise Refused(
                    f"the scheduler {type(self._scheduler()).__name__} is not a LambdaLR: a "
                    "scale cannot hold against it (a cap can: set_lr_cap)"
                )
            self.lr_scale *= float(p["factor"])
            return f"lr scaled ×{p['factor']:g} from now on: lr {self._hold_lr()}"
        if kind in ("set_is_correction", "set_is_policy"):
            return self._set_is(kind, p)
        if kind == "set_clip":
            if not p["enabled"]:
                raise Refused("TRL's GRPO loss always clips the ratio")
            old = (t.epsilon_low, t.epsilon_high)
            t.epsilon_low = p.get("eps_low", t.epsilon_low)
            t.epsilon_high = p.get("eps_high", t.epsilon_high)
            return f"epsilon low/high {old[0]:g}/{old[1]:g} -> {t.epsilon_low:g}/{t.epsilon_high:g}"
        if kind == "set_length_norm":
            return self._set_length_norm(bool(p["enabled"]))
        raise Refused(f"the TRL callback cannot apply {kind}")

    def _set_length_norm(self, enabled: bool) -> str:
        """GRPOTrainer reads `loss_type` at every loss: "grpo" (a mean per completion)
        becomes "dr_grpo" (the same token terms summed over a constant, the batch times
        max_completion_length): the paper's sum, with the same per-token loss. The
        gradient shrinks by mean length / max_completion_length, which Adam's
        normalisation mostly absorbs."""
        t = self.trainer
        if enabled or t.loss_type != "grpo":
            raise Refused(
                f"loss_type {t.loss_type!r}: only 'grpo' has a length-free twin TRL computes "
                "the same token terms for ('dr_grpo'); change it in GRPOConfig and resume"
            )
        t.loss_type = "dr_grpo"
        return "loss_type grpo -> dr_grpo: each completion's token sum over a constant"

    def _set_is(self, kind: str, p: dict[str, Any]) -> str:
        t = self.trainer
        if not getattr(t, "use_vllm", False):
            raise Refused(
                "TRL corrects importance sampling only for vLLM rollouts (use_vllm=False): "
                "there is no train-inference mismatch to correct"
            )
        policy = (
            ("token_tis" if p["enabled"] else "none")
            if kind == "set_is_correction"
            else p["policy"]
        )
        mode = IS_MODES.get(policy, t.vllm_importance_sampling_mode)
        if (
            t.loss_type == "vespo"
            and policy != "none"
            and mode not in ("token_truncate", "token_mask")
        ):
            raise Refused(f"TRL's VESPO loss allows token-level IS modes only, not {mode}")
        t.vllm_importance_sampling_correction = policy != "none"
        if policy != "none":
            t.vllm_importance_sampling_mode = mode
            if "cap" in p:
                t.vllm_importance_sampling_clip_max = p["cap"]
            if "band" in p:
                t.vllm_importance_sampling_clip_min, t.vllm_importance_sampling_clip_max = p["band"]
        return (
            f"vllm_importance_sampling_correction={t.vllm_importance_sampling_correction}, "
            f"mode={t.vllm_importance_sampling_mode}, "
            f"clip=[{t.vllm_importance_sampling_clip_min}, {t.vllm_importance_sampling_clip_max}]"
        )

    # ------------------------------------------------------------------ the learning rate
    def _scheduler(self) -> Any:
        sched = self.trainer.lr_scheduler
        return getattr(sched, "scheduler", sched)  # accelerate's AcceleratedScheduler

    def _hold_lr(self) -> str:
        """Put the scale and cap into the schedule (once) and the param groups (now)."""
        sched, groups = self._scheduler(), self.trainer.optimizer.param_groups
        if sched is not self._wrapped_sched:
            if hasattr(sched, "lr_lambdas"):
                sched.lr_lambdas = [self._held(sched, i, f) for i, f in enumerate(sched.lr_lambdas)]
            else:
                step = sched.step

                def capped_step(*a: Any, **kw: Any) -> Any:
                    out = step(*a, **kw)
                    self._cap_groups(sched, groups)
                    return out

                sched.step = capped_step
            self._wrapped_sched = sched
        if hasattr(sched, "lr_lambdas"):
            for group, base, fn in zip(groups, sched.base_lrs, sched.lr_lambdas, strict=True):
                group["lr"] = base * fn(sched.last_epoch)
            sched._last_lr = [g["lr"] for g in groups]
        else:
            self._cap_groups(sched, groups)
        return ", ".join(f"{g['lr']:.3g}" for g in groups)

    def _held(self, sched: Any, i: int, factor: Any) -> Any:
        """A LambdaLR factor with the scale and cap applied. A plain function, so the
        scheduler's state_dict stores nothing of it (checkpoints stay loadable)."""

        def held(step: int) -> float:
            f = factor(step) * self.lr_scale
            base = sched.base_lrs[i]
            return min(f, self.lr_cap / base) if self.lr_cap is not None and base > 0 else f

        return held

    def _cap_groups(self, sched: Any, groups: Any) -> None:
        if self.lr_cap is not None:
            for g in groups:
                g["lr"] = min(g["lr"], self.lr_cap)
            sched._last_lr = [g["lr"] for g in groups]

    # ------------------------------------------------------------------ rollback
    def _rollback(self, action: Action) -> Path | None:
        """Restore a checkpoint as `train(resume_from_checkpoint=...)` would and move the
        data stream to its position. Returns the checkpoint when its RNG is still to be
        restored (after the first batch), else None."""
        from accelerate import skip_first_batches
        from transformers import TrainerState

        t, args = self.trainer, self.trainer.args
        ckpts = checkpoints(args.output_dir)
        step = int(t.state.global_step)
        if "step" in action.params:
            target, why = ckpts.get(int(action.params["step"])), "requested"
        else:
            found = healthy_checkpoint(self.mon, args.output_dir)
            target, why = (None, "") if found is None else (found[0], found[1].reason)
            why = f"the last healthy checkpoint: {why}"
        if target is None:
            wanted = action.params.get("step", "a healthy one")
            detail = f"no checkpoint {wanted} in {args.output_dir} (have {list(ckpts)})"
            self.mon.resolve(action.id, "rejected", detail)
            self.mon.event("rollback_failed", {"step": step, "have": list(ckpts)})
            log.warning("minirl: rollback refused: %s", detail)
            return None
        t._load_from_checkpoint(str(target))
        t._load_optimizer_and_scheduler(str(target))
        if hasattr(t, "_load_scaler"):
            t._load_scaler(str(target))
        to_step = TrainerState.load_from_json(str(target / "trainer_state.json")).global_step
        to_pos = self.position(to_step)
        undone = self.position(step) - to_pos
        self._shifts.append((step, step - to_pos))
        redo = ""
        if self.redo and undone > 0:
            t.state.max_steps += undone
            redo = f"; its {undone} undone steps trained again (max_steps {t.state.max_steps})"
        if hasattr(t, "_buffered_inputs"):  # GRPO: generate afresh, as a resumed trainer does
            t._buffered_inputs, t._step = None, 0
        if self.lr_cap is not None or self.lr_scale != 1.0:
            self._hold_lr()  # the loaded param groups carry the schedule's uncapped lr
        loader = t.get_train_dataloader()
        accum = args.gradient_accumulation_steps
        per_epoch = max(len(loader) // accum + int(len(loader) % accum > 0), 1)
        self._epoch = to_pos // per_epoch
        skip = 0 if args.ignore_data_skip else (to_pos % per_epoch) * accum
        if skip > 0:
            loader = skip_first_batches(loader, skip)
        else:
            t._load_rng_state(str(target))
        self._iterator = _epoch_iter(loader, self._epoch)
        self.mon.resolve(action.id, "applied", f"restored {target} (step {to_step}); {why}{redo}")
        self.mon.event(
            "rollback",
            {
                "step": step,
                "to_step": to_step,
                "checkpoint": str(target),
                "why": why,
                "redo": undone if redo else 0,
            },
        )
        log.warning("minirl: rolled back to %s at step %d (%s)", target, step, why)
        return target if skip > 0 else None

    def _restored_stream(self) -> Iterator[Any]:
        """The data stream after a rollback, endless across epochs."""
        while True:
            yield self.next_batch()

    def next_batch(self) -> Any:
        """The next batch of the restored data stream, into the next epoch at its end."""
        try:
            return next(self._iterator)
        except StopIteration:
            self._epoch += 1
            self._iterator = _epoch_iter(self.trainer.get_train_dataloader(), self._epoch)
            return next(self._iterator)


def _epoch_iter(loader: Any, epoch: int) -> Any:
    """`iter(loader)` for `epoch`, with the epoch set where the Trainer sets it."""
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    inner = getattr(getattr(loader, "batch_sampler", None), "batch_sampler", None)
    if hasattr(inner, "set_epoch"):
        inner.set_epoch(epoch)
    return iter(loader)
