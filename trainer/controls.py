"""The knobs a run may change at a step boundary, and how a remediation action moves them.

The monitor decides (or an operator requests) an action; `monitor.remediation.actions` is the single
definition of what an action may say and which knobs it moves. This module is the
trainer's side: it maps those knobs onto `Controls` and rejects, with a reason the audit
trail records (never silently), what this run cannot apply. It does not read the store,
load checkpoints or stop the run: `rollback` and `stop` are returned as requests for the
loop (`trainer/run.py`) to carry out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from core.controls import RunControls
from core.errors import UserError
from core.vocabulary import WeightQuant
from minirl.loss import LossConfig
from minirl.routing import ReplayMode
from monitor.remediation.actions import hold_caps, moves, validate


class Rejected(Exception):
    """An action the run cannot apply; the message becomes the action's audit detail."""


@dataclass(frozen=True)
class Controls:
    """What remediation can change mid-run; everything else is fixed by the config."""

    loss: LossConfig
    mini_batches: int
    routing_replay: ReplayMode
    lr_scale: float = 1.0
    lr_cap: float | None = None
    """The learning rate never exceeds this, whatever the schedule (set by remediation)."""
    mini_batches_cap: int | None = None
    """The mini-batches per rollout never exceed this, whatever sets them later (an
    incident, a request): a staleness fix that holds (set by remediation)."""
    rollout_quant: WeightQuant = "none"
    """How the rollout engine rounds its weights (`engine.weight_quant` at the start; an
    incident or an action moves it, and the loop syncs the engine)."""
    rollout_quant_floor: WeightQuant | None = None
    """The rollout weights are never rounded coarser than this, whatever sets them later:
    a precision fix that holds (set by remediation)."""

    def for_monitor(self, base_lr: float, moe: bool) -> RunControls:
        """The controls the remediation policy reasons about: the loss's knobs, then the
        run's own."""
        c = self.loss
        loss = {k: getattr(c, k) for k in ("variant", "is_cap", "clip", "eps_low", "eps_high")}
        knobs = ("routing_replay", "mini_batches", "rollout_quant")
        held = ("mini_batches_cap", "lr_cap", "rollout_quant_floor")
        run = {k: getattr(self, k) for k in (*knobs, *held)}
        return RunControls(
            **loss,
            **run,
            is_policy="none" if c.variant == "reinforce" else c.is_policy,
            is_band=tuple(c.band),
            length_norm=c.length_norm,
            lr=base_lr * self.lr_scale,
            moe=moe,
        )


@dataclass(frozen=True)
class Request:
    """An action the loop carries out itself: a rollback (to `step`, None = last healthy
    checkpoint) or a stop."""

    kind: Literal["rollback", "stop"]
    step: int | None = None


# Monitor's knob names -> LossConfig fields; the other knobs are fields of Controls.
_LOSS_FIELDS = {
    "is_policy": "is_policy",
    "is_cap": "is_cap",
    "is_band": "band",
    "clip": "clip",
    "eps_low": "eps_low",
    "eps_high": "eps_high",
    "length_norm": "length_norm",
}


def apply_action(
    controls: Controls,
    kind: str,
    params: dict[str, Any],
    *,
    prompts_per_step: int,
    moe: bool,
) -> Controls | Request:
    """New controls after `kind`, a Request for rollback/stop, or raise Rejected(reason).

    What each kind moves is `monitor.remediation.actions.EFFECTS`; this adds only the checks that
    need the run's facts (the loss variant, dense or MoE, the prompt groups of a step)."""
    try:
        p = validate(kind, params)
        knobs = moves(kind, p)
    except UserError as err:
        raise Rejected(str(err)) from None
    if kind in ("rollback", "stop"):
        return Request(kind, p.get("step"))
    _check_applicable(controls.loss, kind, p, prompts_per_step=prompts_per_step, moe=moe)
    loss: dict[str, Any] = {}
    run: dict[str, Any] = {}
    for knob, how, value in knobs:
        if knob in _LOSS_FIELDS:
            loss[_LOSS_FIELDS[knob]] = tuple(value) if knob == "is_band" else value
        elif how == "scale":  # lr, the one scaled knob: Controls keeps its scale
            run["lr_scale"] = controls.lr_scale * value
        else:  # mini_batches(_cap), routing_replay, rollout_quant(_floor)
            run[knob] = value
    held = hold_caps(
        {
            knob: run.get(knob, getattr(controls, knob))
            for knob in ("mini_batches", "mini_batches_cap", "rollout_quant", "rollout_quant_floor")
        }
    )
    run["mini_batches"], run["rollout_quant"] = held["mini_batches"], held["rollout_quant"]
    if loss:
        try:
            run["loss"] = dataclasses.replace(controls.loss, **loss)  # re-validated
        except ValueError as err:  # e.g. length_norm on grpo
            raise Rejected(str(err)) from None
    return dataclasses.replace(controls, **run)


def _check_applicable(
    loss: LossConfig, kind: str, p: dict[str, Any], *, prompts_per_step: int, moe: bool
) -> None:
    """Raise Rejected for an action this run cannot apply, saying why."""
    if loss.variant == "reinforce" and kind == "set_is_correction":
        raise Rejected("variant 'reinforce' has no IS correction to switch")
    if loss.variant == "reinforce" and kind == "set_is_policy":
        raise Rejected("variant 'reinforce' applies no IS policy")
    if kind == "set_routing_replay" and p["mode"] != "none" and not moe:
        raise Rejected(f"routing replay {p['mode']} needs an MoE policy; this one is dense")
    if kind in ("set_mini_batches", "set_mini_batches_cap") and prompts_per_step % p["n"]:
        raise Rejected(
            f"{p['n']} mini-batches do not divide the {prompts_per_step} prompt groups of a step"
        )
