"""Remediation actions on the trainer's controls: each kind's effect, and rejections
that say why (an action the run cannot apply is never ignored silently)."""

import pytest

from minirl.loss import LossConfig
from trainer.controls import Controls, Rejected, Request, apply_action

BASE = Controls(LossConfig(), mini_batches=4, routing_replay="none")


def _apply(kind, params, controls=BASE, moe=True):
    return apply_action(controls, kind, params, prompts_per_step=8, moe=moe)


def test_each_kind_moves_exactly_its_knob():
    assert _apply("set_is_correction", {"enabled": False}).loss.is_policy == "none"
    on = _apply(
        "set_is_correction",
        {"enabled": True, "cap": 2.0},
        _apply("set_is_correction", {"enabled": False}),
    )
    assert (on.loss.is_policy, on.loss.is_cap) == ("token_tis", 2.0)
    ice = _apply("set_is_policy", {"policy": "icepop", "band": [0.4, 3.0]})
    assert (ice.loss.is_policy, ice.loss.band) == ("icepop", (0.4, 3.0))
    clip = _apply("set_clip", {"enabled": True, "eps_low": 0.1, "eps_high": 0.15})
    assert (clip.loss.clip, clip.loss.eps_low, clip.loss.eps_high) == (True, 0.1, 0.15)
    assert _apply("set_clip", {"enabled": False}).loss.clip is False
    assert _apply("set_routing_replay", {"mode": "R3"}).routing_replay == "R3"
    assert _apply("set_mini_batches", {"n": 2}).mini_batches == 2
    assert _apply("set_length_norm", {"enabled": True}).loss.length_norm is True
    half = _apply("scale_lr", {"factor": 0.5})
    assert _apply("scale_lr", {"factor": 0.5}, half).lr_scale == 0.25
    assert _apply("rollback", {}) == Request("rollback", None)
    assert _apply("rollback", {"step": 40}) == Request("rollback", 40)
    assert _apply("stop", {}) == Request("stop")
    capped = _apply("set_mini_batches_cap", {"n": 2})
    assert (capped.mini_batches, capped.mini_batches_cap) == (2, 2)
    # the cap holds: a later raise (an incident, a request) stops at it; lower goes through
    assert _apply("set_mini_batches", {"n": 8}, capped).mini_batches == 2
    fp4 = _apply("set_rollout_quant", {"weight_quant": "fp4"})
    assert fp4.rollout_quant == "fp4" and fp4.for_monitor(1e-4, True).rollout_quant == "fp4"
    floored = _apply("set_rollout_quant_floor", {"weight_quant": "none"}, fp4)
    assert (floored.rollout_quant, floored.rollout_quant_floor) == ("none", "none")
    # the floor holds: a later FP8 incident leaves the rollouts as they are
    assert (
        _apply("set_rollout_quant", {"weight_quant": "fp8_e5m2"}, floored).rollout_quant == "none"
    )
    assert _apply("set_mini_batches", {"n": 1}, capped).mini_batches == 1
    assert _apply("set_mini_batches_cap", {"n": 8}).mini_batches == 4  # a cap never raises
    # nothing else changed
    moved = _apply("set_mini_batches", {"n": 2})
    assert moved.loss == BASE.loss and moved.routing_replay == BASE.routing_replay


@pytest.mark.parametrize(
    ("kind", "params", "controls", "moe", "reason"),
    [
        ("set_mini_batches", {"n": 3}, BASE, True, "do not divide the 8 prompt groups"),
        ("set_mini_batches_cap", {"n": 3}, BASE, True, "do not divide the 8 prompt groups"),
        ("set_routing_replay", {"mode": "R2"}, BASE, False, "needs an MoE policy"),
        (
            "set_is_correction",
            {"enabled": True},
            Controls(LossConfig(variant="reinforce"), 1, "none"),
            True,
            "no IS correction",
        ),
        (
            "set_length_norm",
            {"enabled": True},
            Controls(LossConfig(variant="grpo"), 1, "none"),
            True,
            "length_norm",
        ),
        ("scale_lr", {"factor": -1.0}, BASE, True, "factor"),
        ("set_clip", {}, BASE, True, "enabled"),
        ("frobnicate", {}, BASE, True, "frobnicate"),
    ],
)
def test_impossible_actions_are_rejected_with_a_reason(kind, params, controls, moe, reason):
    with pytest.raises(Rejected, match=reason):
        _apply(kind, params, controls, moe)


def test_controls_for_the_monitor_reflect_the_loss():
    c = Controls(LossConfig(variant="reinforce"), 2, "R2", lr_scale=0.5)
    view = c.for_monitor(base_lr=1e-3, moe=True)
    assert view.is_policy == "none"  # reinforce applies no IS correction
    assert (view.mini_batches, view.routing_replay, view.lr) == (2, "R2", 5e-4)
