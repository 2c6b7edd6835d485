"""The run's controls as the remediation policy sees them: typed, one record.

A trainer reports its knobs (`RunControls`); the monitor's policy reasons about them and
its actions move them (monitor/remediation/actions.py), and minirl's trainer maps them
onto its own `Controls` (trainer/controls.py). A knob a trainer does not report keeps
the default the policy assumes for an unknown value (one mini-batch, clipping on, no IS
correction, bf16 rollouts); None means unknown where no default is safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.typed_config import from_data, to_data
from core.vocabulary import ISPolicy, ReplayMode, WeightQuant


@dataclass(frozen=True)
class RunControls:
    """What remediation can see and move of a run."""

    variant: str | None = None
    """The loss (`reinforce` has no IS correction to switch); None: not reported."""
    is_policy: ISPolicy = "none"
    """The IS correction of the training-inference factor ("none": off)."""
    is_cap: float | None = None
    """The TIS/MIS cap C, when a policy with one is on."""
    is_band: tuple[float, float] | None = None
    """IcePop's band [α, β], when it is on."""
    clip: bool = True
    """The clip mask of the staleness factor."""
    eps_low: float | None = None
    """Clipping's ε_low."""
    eps_high: float | None = None
    """Clipping's ε_high."""
    routing_replay: ReplayMode | None = None
    """Routing replay (MoE); None: not reported."""
    mini_batches: int = 1
    """Policy updates per rollout (1: on-policy)."""
    mini_batches_cap: int | None = None
    """The mini-batches per rollout never exceed this (held by a fix)."""
    length_norm: bool = False
    """Length normalisation of the loss."""
    lr: float | None = None
    """The learning rate the run trains with."""
    lr_cap: float | None = None
    """The lr never exceeds this, whatever the schedule (held by a fix)."""
    lr_healthy: float | None = None
    """The lr the run was last measurably healthy at (the monitor fills it at a breakdown)."""
    rollout_quant: WeightQuant = "none"
    """How the rollout engine rounds its weights."""
    rollout_quant_floor: WeightQuant | None = None
    """The rollout weights are never rounded coarser than this (held by a fix)."""
    moe: bool = False
    """An MoE policy (routing replay applies)."""

    @classmethod
    def of(cls, controls: RunControls | Mapping[str, Any] | None) -> RunControls:
        """`controls` as RunControls: a mapping's keys and values are checked (an unknown
        knob or a wrong type is a UserError naming it)."""
        if isinstance(controls, RunControls):
            return controls
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        # None is "not reported": the knob keeps the default the policy assumes
        data = {
            k: v for k, v in (controls or {}).items() if v is not None or defaults.get(k, 0) is None
        }
        return from_data(cls, data, "controls")

    @classmethod
    def stored(cls, data: Mapping[str, Any] | None) -> RunControls:
        """Controls read back from a store: knobs this version does not know are dropped."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls.of({k: v for k, v in (data or {}).items() if k in known})

    def to_data(self) -> dict[str, Any]:
        return to_data(self)
