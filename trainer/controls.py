"""The knobs a run may change at a step boundary, and how a remediation action moves them.

The monitor decides (or an operator requests) an action; `monitor.actions.validate` is
the single definition of what an action may say. This module is the trainer's side: it
turns a validated action into new `Controls`, or rejects it with a reason the audit trail
records — never silently. It does not read the store, load checkpoints or stop the run:
`rollback` and `stop` are returned as requests for the loop (`trainer/run.py`) to carry out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from minirl.loss import LossConfig
from minirl.routing import ReplayMode
from monitor.actions import validate
from monitor.errors import UserError


class Rejected(Exception):
    """An action the run cannot apply; the message becomes the action's audit detail."""


@dataclass(frozen=True)
class Controls:
    """What remediation can change mid-run; everything else is fixed by the config."""

    loss: LossConfig
    mini_batches: int
    routing_replay: ReplayMode
    lr_scale: float = 1.0

    def for_monitor(self, base_lr: float, moe: bool) -> dict[str, Any]:
        """The `controls` dict the remediation policy reasons about (Monitor's keys)."""
        c = self.loss
        return {
            "variant": c.variant,
            "is_policy": "none" if c.variant == "reinforce" else c.is_policy,
            "is_cap": c.is_cap,
            "is_band": list(c.band),
            "clip": c.clip,
            "eps_low": c.eps_low,
            "eps_high": c.eps_high,
            "routing_replay": self.routing_replay,
            "mini_batches": self.mini_batches,
            "length_norm": c.length_norm,
            "lr": base_lr * self.lr_scale,
            "moe": moe,
        }


@dataclass(frozen=True)
class Request:
    """An action the loop carries out itself: a rollback (to `step`, None = last healthy
    checkpoint) or a stop."""

    kind: Literal["rollback", "stop"]
    step: int | None = None


def apply_action(
    controls: Controls,
    kind: str,
    params: dict[str, Any],
    *,
    prompts_per_step: int,
    moe: bool,
) -> Controls | Request:
    """New controls after `kind`, a Request for rollback/stop, or raise Rejected(reason)."""
    try:
        p = validate(kind, params)
    except UserError as err:
        raise Rejected(str(err)) from None
    loss = controls.loss
    match kind:
        case "set_is_correction":
            if loss.variant == "reinforce":
                raise Rejected("variant 'reinforce' has no IS correction to switch")
            policy = "token_tis" if p["enabled"] else "none"
            return _with_loss(controls, is_policy=policy, is_cap=p.get("cap", loss.is_cap))
        case "set_is_policy":
            if loss.variant == "reinforce":
                raise Rejected("variant 'reinforce' applies no IS policy")
            changes: dict[str, Any] = {"is_policy": p["policy"]}
            if "cap" in p:
                changes["is_cap"] = p["cap"]
            if "band" in p:
                changes["band"] = tuple(p["band"])
            return _with_loss(controls, **changes)
        case "set_clip":
            changes = {"clip": p["enabled"]}
            changes |= {k: p[k] for k in ("eps_low", "eps_high") if k in p}
            return _with_loss(controls, **changes)
        case "set_routing_replay":
            if p["mode"] != "none" and not moe:
                raise Rejected(f"routing replay {p['mode']} needs an MoE policy; this one is dense")
            return dataclasses.replace(controls, routing_replay=p["mode"])
        case "set_mini_batches":
            n = p["n"]
            if prompts_per_step % n:
                raise Rejected(
                    f"{n} mini-batches do not divide the {prompts_per_step} prompt groups of a step"
                )
            return dataclasses.replace(controls, mini_batches=n)
        case "set_length_norm":
            return _with_loss(controls, length_norm=p["enabled"])
        case "scale_lr":
            return dataclasses.replace(controls, lr_scale=controls.lr_scale * p["factor"])
        case "rollback":
            return Request("rollback", p.get("step"))
        case "stop":
            return Request("stop")
    raise Rejected(f"the trainer does not know action kind {kind!r}")


def _with_loss(controls: Controls, **changes: Any) -> Controls:
    """Controls with a changed LossConfig, re-validated (e.g. length_norm on grpo)."""
    try:
        loss = dataclasses.replace(controls.loss, **changes)
    except ValueError as err:
        raise Rejected(str(err)) from None
    return dataclasses.replace(controls, loss=loss)
