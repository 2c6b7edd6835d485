"""The names every package shares: IS policies, routing-replay modes, rollout weight
formats, remediation action kinds, and the paper's recipe constants.

Defined once here, torch-free, so that the maths (`minirl`), the trainer, the monitor and
the dashboard's forms all use the same `Literal` types and tuples instead of copies. What
each name does lives with its code: an IS policy in `minirl/is_weights.py`, a replay mode
in `minirl/routing.py`, an action's parameters and effect in `monitor/remediation/actions.py`.
"""

from __future__ import annotations

from typing import Literal, get_args

ISPolicy = Literal["none", "token_tis", "seq_tis", "token_mis", "seq_mis", "icepop"]
"""How the training-inference factor ρ = π_old/μ_old of a token's weight is corrected."""
IS_POLICIES: tuple[ISPolicy, ...] = get_args(ISPolicy)

ReplayMode = Literal["none", "R2", "R3"]
"""Routing replay in the policy updates: none routes live; R2 replays the training
engine's routing e^π_old, R3 the inference engine's e^μ_old."""
REPLAY_MODES: tuple[ReplayMode, ...] = get_args(ReplayMode)

WeightQuant = Literal["none", "fp8_e4m3", "fp8_e5m2", "fp4"]
"""How the rollout engine rounds its weights, finest first."""
WEIGHT_QUANTS: tuple[WeightQuant, ...] = get_args(WeightQuant)
QUANT_BITS: dict[WeightQuant, int] = {"none": 16, "fp8_e4m3": 8, "fp8_e5m2": 8, "fp4": 4}
"""Bits of a rounded weight ("none": the inference dtype's, 16 for bf16/fp16)."""

ActionKind = Literal[
    "set_is_correction",
    "set_is_policy",
    "set_clip",
    "set_routing_replay",
    "set_mini_batches",
    "set_mini_batches_cap",
    "set_length_norm",
    "scale_lr",
    "set_lr_cap",
    "set_rollout_quant",
    "set_rollout_quant_floor",
    "rollback",
    "stop",
]
"""What a remediation action may do (parameters and effects: monitor/remediation/actions.py)."""
ACTION_KINDS: tuple[ActionKind, ...] = get_args(ActionKind)

# The paper's recipe constants (MiniRL, arXiv 2512.01374): the loss defaults to them and
# the remediation policy turns on the same values.
EPS_LOW = 0.2
"""MiniRL's lower clip ε_low: M_t = 0 when Â < 0 and r_t < 1 − ε_low."""
EPS_HIGH = 0.27
"""MiniRL's upper clip ε_high (clip-higher): M_t = 0 when Â > 0 and r_t > 1 + ε_high."""
TIS_CAP = 5.0
"""MiniRL's truncation cap C of token_tis and seq_tis."""
ICEPOP_BAND = (0.5, 5.0)
"""IcePop's band [α, β] of kept ratios (token_mis and seq_mis use its upper end)."""
