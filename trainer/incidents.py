"""Scripted incidents: a change induced at a known step, with a known cause.

Real runs break for reasons nobody scheduled. To measure whether the monitor sees a
breakdown coming, blames the right factor, and whether remediation rescues the run, the
lab and the demo need runs that break for a *known* reason at a *known* step: the rollout
engine switching to FP4 weights, the mini-batches per rollout jumping to 8, routing
replay or IS correction switched off, the learning rate multiplied. An incident is one of
those changes, listed in the run config (`train.incidents`), applied at the boundary
before its step, and recorded in the store as an `incident` event (the dashboard and
`minirl analyze` label it as induced; nothing pretends it happened by itself).

An incident is applied once and never undone by itself; remediation may undo it (turning
IS correction back on is a rescue). Rollbacks do not replay incidents: they happened at a
step of the run, not at a position of the data. This module does not decide when to act
(the loop calls `due`) nor how actions change the controls (`trainer.controls`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError
from monitor.remediation.actions import KINDS, validate

INCIDENT_KINDS = tuple(k for k in KINDS if k not in ("rollback", "stop", "advice"))
"""Every action kind but rollback, stop and advice (which changes nothing);
`set_rollout_quant` is the degraded rollout engine (its weights rounded through another
format from now on, `engine.weight_quant`), an action kind like the others so that a
precision floor set by remediation holds against it."""


@dataclass(frozen=True)
class Incident:
    """One induced change: `kind` with `params` before RL step `step`."""

    step: int
    """Applied at the step boundary before this RL step (>= 1)."""
    kind: str
    """An action kind but rollback and stop (set_is_correction, set_clip, set_mini_batches,
    scale_lr, set_rollout_quant...)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The action's parameters (as for remediation actions; monitor/remediation/actions.py)."""
    note: str = ""
    """What the incident stands for, in words (shown on the dashboard)."""

    def __post_init__(self) -> None:
        if self.step < 1:
            raise ValueError(f"incident step={self.step}: must be >= 1")
        if self.kind not in INCIDENT_KINDS:
            raise ValueError(f"incident kind={self.kind!r}: allowed: {', '.join(INCIDENT_KINDS)}")
        try:
            validate(self.kind, self.params)
        except UserError as err:
            raise ValueError(f"incident {err}") from None

    def describe(self) -> str:
        what = self.note or f"{self.kind} {self.params}"
        return f"induced incident at step {self.step}: {what}"


def due(incidents: tuple[Incident, ...], step: int) -> list[Incident]:
    """The incidents to apply at the boundary before `step`, in config order."""
    return [i for i in incidents if i.step == step]


def apply_rollout_quant(engine: Any, policy_model: Any, weight_quant: str) -> None:
    """Make the inference engine round its weights through `weight_quant` from now on,
    and sync the current policy into it (verified as every sync is)."""
    engine.weight_quant = weight_quant
    engine.update_weights(policy_model)
