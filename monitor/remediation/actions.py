"""The remediation action kinds: names, parameters, validation, effect on the controls.

The single source of truth for what an action may say and do: the remediation policy,
the dashboard (which writes requests into the store) and the trainer (which applies them
at a step boundary) all go through `validate`, and the effect of each kind on the run's
knobs is the one table `EFFECTS`. An action is data; this module does not decide when to
act (policy.py) nor check what only the trainer knows (trainer/controls.py). The
kinds and their parameters, for users: docs/detection-and-remediation.md.

Applying (the trainer's side): at the next step boundary, for each pending action, apply
it and call `Monitor.resolve(id, "applied" | "rejected", detail)`. A rollback restores the
checkpoint at `step` (or `Monitor.last_healthy_step(checkpoint_steps)`), records a
`rollback` event, and keeps counting steps forward (the collapsed branch stays in the
store as evidence). `stop` ends the run after recording a `stop` event.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from core.controls import RunControls
from core.errors import UserError
from core.vocabulary import (
    ACTION_KINDS,
    IS_POLICIES,
    QUANT_BITS,
    REPLAY_MODES,
    WEIGHT_QUANTS,
    ActionKind,
)

MAX_LR_FACTOR = 10.0
MAX_TEXT, MAX_OVERRIDES = 4096, 64
"""Bounds of an advice's strings (a path, one override) and of its list of overrides."""


def _bool(kind: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"action {kind}: {key} must be true or false, got {value!r}")
    return value


def _float(kind: str, key: str, value: Any, ok: Callable[[float], bool], allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"action {kind}: {key} must be a number {allowed}, got {value!r:.40}")
    try:
        value = float(value)
    except OverflowError:  # an int past float64 (10**400)
        raise UserError(f"action {kind}: {key} must be {allowed}, got {value!r:.40}") from None
    if not math.isfinite(value) or not ok(value):
        raise UserError(f"action {kind}: {key} must be {allowed}, got {value!r}")
    return value


def _int(kind: str, key: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"action {kind}: {key} must be an integer ≥ {lo}, got {value!r}")
    if value < lo:
        raise UserError(f"action {kind}: {key} must be an integer ≥ {lo}, got {value!r}")
    return value


def _choice(kind: str, key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UserError(f"action {kind}: {key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _text(kind: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
        raise UserError(f"action {kind}: {key} must be a non-empty string, got {value!r:.60}")
    return value


def _texts(kind: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list | tuple) or len(value) > MAX_OVERRIDES:
        raise UserError(f"action {kind}: {key} must be a list of strings, got {value!r:.60}")
    return [_text(kind, key, v) for v in value]


def _cap(kind: str, value: Any) -> float:
    return _float(kind, "cap", value, lambda v: v > 1.0, "> 1")


def _band(kind: str, value: Any) -> list[float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise UserError(f"action {kind}: band must be [lo, hi], got {value!r}")
    lo = _float(kind, "band[0]", value[0], lambda v: 0.0 < v < 1.0, "in (0, 1)")
    hi = _float(kind, "band[1]", value[1], lambda v: v > 1.0, "> 1")
    return [lo, hi]


# kind -> (required keys, optional keys); each key's check is in _check
_SPECS: dict[ActionKind, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "set_is_correction": (("enabled",), ("cap",)),
    "set_is_policy": (("policy",), ("cap", "band")),
    "set_clip": (("enabled",), ("eps_low", "eps_high")),
    "set_routing_replay": (("mode",), ()),
    "set_mini_batches": (("n",), ()),
    "set_mini_batches_cap": (("n",), ()),
    "set_length_norm": (("enabled",), ()),
    "scale_lr": (("factor",), ()),
    "set_lr_cap": (("lr",), ()),
    "set_rollout_quant": (("weight_quant",), ()),
    "set_rollout_quant_floor": (("weight_quant",), ()),
    "rollback": ((), ("step",)),
    "stop": ((), ()),
    "advice": (("trainer", "overrides"), ("step", "checkpoint")),
}
KINDS: tuple[ActionKind, ...] = ACTION_KINDS
if set(_SPECS) != set(ACTION_KINDS):  # a kind named in the vocabulary has its parameters here
    raise ImportError(f"action kinds without parameters: {set(ACTION_KINDS) ^ set(_SPECS)}")


def _check(kind: str, key: str, value: Any) -> Any:
    if key == "enabled":
        return _bool(kind, key, value)
    if key == "cap":
        return _cap(kind, value)
    if key == "band":
        return _band(kind, value)
    if key == "policy":
        return _choice(kind, key, value, IS_POLICIES)
    if key == "mode":
        return _choice(kind, key, value, REPLAY_MODES)
    if key == "weight_quant":
        return _choice(kind, key, value, WEIGHT_QUANTS)
    if key == "eps_low":
        return _float(kind, key, value, lambda v: 0.0 < v < 1.0, "in (0, 1)")
    if key == "eps_high":
        return _float(kind, key, value, lambda v: v > 0.0, "> 0")
    if key == "n":
        return _int(kind, key, value, 1)
    if key == "step":
        return _int(kind, key, value, 0)
    if key == "lr":
        return _float(kind, key, value, lambda v: v > 0.0, "> 0")
    if key == "factor":
        return _float(kind, key, value, lambda v: 0.0 < v <= MAX_LR_FACTOR, "in (0, 10]")
    if key in ("trainer", "checkpoint"):
        return _text(kind, key, value)
    if key == "overrides":
        return _texts(kind, key, value)
    raise AssertionError(key)  # unreachable: keys come from _SPECS


def validate(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return the normalised params of a `kind` action, or raise UserError saying why not.

    Unknown kinds, unknown or missing keys and out-of-range values are errors; nothing is
    clamped. Numbers come back as float (int for `n` and `step`), bands as [lo, hi].
    """
    if kind not in _SPECS:
        raise UserError(f"unknown action kind {kind!r:.60}; allowed: {', '.join(KINDS)}")
    if params is not None and not isinstance(params, Mapping):
        raise UserError(f"action {kind}: params must be a mapping, got {type(params).__name__}")
    params = dict(params or {})
    required, optional = _SPECS[kind]
    unknown = sorted(f"{key!r:.40}" for key in set(params) - set(required) - set(optional))
    if unknown:
        allowed = ", ".join(required + optional) or "none"
        raise UserError(f"action {kind}: unknown param(s) {', '.join(unknown)}; allowed: {allowed}")
    missing = [key for key in required if key not in params]
    if missing:
        raise UserError(f"action {kind}: missing param(s) {', '.join(missing)}")
    out = {key: _check(kind, key, value) for key, value in params.items()}
    if kind == "set_is_policy" and out["policy"] == "none" and ({"cap", "band"} & set(out)):
        raise UserError("action set_is_policy: policy none takes no cap or band")
    return out


# What each kind does to the run's controls (Monitor's keys: is_policy, is_cap, is_band,
# clip, eps_low, eps_high, routing_replay, mini_batches, mini_batches_cap, length_norm,
# lr, lr_cap, rollout_quant, rollout_quant_floor): one (knob, param, how) per knob it
# moves. how: "set" the knob to the param's value, "scale" the knob by it, or a mapping
# from the param's value to the knob's. An optional param that is absent moves nothing.
# The one interpreter of actions: the monitor's view (`apply_to_controls`) and the
# trainer (trainer/controls.py) both read `moves`, and both hold a mini-batch cap and a
# rollout precision floor with `hold_caps`.
EFFECTS: dict[str, tuple[tuple[str, str, Any], ...]] = {
    "set_is_correction": (
        ("is_policy", "enabled", {True: "token_tis", False: "none"}),
        ("is_cap", "cap", "set"),
    ),
    "set_is_policy": (
        ("is_policy", "policy", "set"),
        ("is_cap", "cap", "set"),
        ("is_band", "band", "set"),
    ),
    "set_clip": (
        ("clip", "enabled", "set"),
        ("eps_low", "eps_low", "set"),
        ("eps_high", "eps_high", "set"),
    ),
    "set_routing_replay": (("routing_replay", "mode", "set"),),
    "set_mini_batches": (("mini_batches", "n", "set"),),
    "set_mini_batches_cap": (("mini_batches_cap", "n", "set"),),
    "set_length_norm": (("length_norm", "enabled", "set"),),
    "scale_lr": (("lr", "factor", "scale"),),
    "set_lr_cap": (("lr_cap", "lr", "set"),),
    "set_rollout_quant": (("rollout_quant", "weight_quant", "set"),),
    "set_rollout_quant_floor": (("rollout_quant_floor", "weight_quant", "set"),),
    "rollback": (),  # carried out by the trainer itself, like stop: no knob moves
    "stop": (),
    "advice": (),  # said, not done: the user restarts the trainer with it
}
assert set(EFFECTS) == set(KINDS)


def moves(kind: str, params: Mapping[str, Any] | None) -> list[tuple[str, str, Any]]:
    """The validated action as (knob, "set" | "scale", value) moves; raises UserError
    like `validate` for an action that may not be said."""
    p = validate(kind, params)
    out = []
    for knob, param, how in EFFECTS[kind]:
        if param in p:
            value = p[param]
            out.append((knob, "set", how[value]) if isinstance(how, dict) else (knob, how, value))
    return out


def apply_to_controls(
    controls: RunControls | Mapping[str, Any], kind: str, params: Mapping[str, Any]
) -> RunControls:
    """The run's controls after an applied action (a new record). A knob the run did not
    report is simply set; an unknown lr is not scaled."""
    out = RunControls.of(controls).to_data()
    for knob, how, value in moves(kind, params):
        if how == "set":
            out[knob] = value
        elif out.get(knob) is not None:
            out[knob] = float(out[knob]) * value
    return RunControls.of(hold_caps(out))


def hold_caps(controls: dict) -> dict:
    """A cap holds whatever sets the knob later (a schedule, an incident, a request): the
    mini-batches per rollout never exceed `mini_batches_cap`, and the rollout weights are
    never rounded coarser than `rollout_quant_floor` (the lr's cap is applied by the
    trainer's schedule, which owns the lr). Changes `controls` in place, returns it."""
    cap = controls.get("mini_batches_cap")
    if cap is not None and controls.get("mini_batches") is not None:
        controls["mini_batches"] = min(int(controls["mini_batches"]), int(cap))
    floor, quant = controls.get("rollout_quant_floor"), controls.get("rollout_quant")
    if floor is not None and quant is not None and QUANT_BITS[quant] < QUANT_BITS[floor]:
        controls["rollout_quant"] = floor
    return controls
