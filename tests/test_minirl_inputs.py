"""Bad input raises ValueError with one sentence naming the bad argument; garbage under
mask = 0 (padding) is ignored; LossConfig rejects bad values naming the allowed ones."""

from __future__ import annotations

import pytest
import torch

from minirl import (
    LossConfig,
    approx_residual,
    entropy_metrics,
    group_advantages,
    log_is_decomposition,
    mismatch_metrics,
    policy_loss,
    routing_metrics,
    sequence_is_loss,
    token_entropy,
)


def good():
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    old = torch.full((2, 3), -1.1)
    roll = torch.full((2, 3), -0.9)
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    return logp, old, roll, adv, mask


def call(**override):
    args = dict(
        zip(("logp", "logp_old", "logp_rollout", "advantages", "mask"), good(), strict=True)
    )
    config = override.pop("config", LossConfig())
    args.update(override)
    return policy_loss(**args, config=config)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"logp_old": torch.zeros(2, 4)}, r"logp_old has shape \(2, 4\) but logp has \(2, 3\)"),
        ({"logp_rollout": torch.zeros(3)}, "logp_rollout must have 2 dimensions"),
        ({"mask": torch.ones(2, 2)}, r"mask has shape \(2, 2\) but expected \(2, 3\)"),
        ({"mask": torch.zeros(2, 3)}, "mask is empty"),
        ({"mask": torch.full((2, 3), 0.5)}, "mask must contain only 0 and 1"),
        ({"advantages": torch.ones(3)}, r"advantages has shape \(3,\) but expected \(2,\)"),
        ({"advantages": torch.tensor([1.0, float("nan")])}, "advantages contains a non-finite"),
        ({"logp": torch.zeros(2, 3, dtype=torch.long)}, "logp must be a floating-point"),
        ({"logp": [[0.0]]}, "logp must be a torch.Tensor"),
    ],
)
def test_policy_loss_rejects_bad_shapes_and_values(override, message):
    with pytest.raises(ValueError, match=message):
        call(**override)


@pytest.mark.parametrize("name", ["logp", "logp_old", "logp_rollout"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_under_mask_is_named_and_under_padding_is_ignored(name, bad):
    logp, old, roll, adv, mask = good()
    tensors = {"logp": logp.detach().clone(), "logp_old": old, "logp_rollout": roll}
    tensors[name] = tensors[name].clone()
    tensors[name][0, 2] = bad  # padding: fine
    loss, _ = policy_loss(
        tensors["logp"], tensors["logp_old"], tensors["logp_rollout"], adv, mask, LossConfig()
    )
    assert torch.isfinite(loss)
    tensors[name][1, 0] = bad  # a response token: an error naming the argument
    with pytest.raises(ValueError, match=rf"^{name} is not finite at \(1, 0\) where mask = 1\.$"):
        policy_loss(
            tensors["logp"], tensors["logp_old"], tensors["logp_rollout"], adv, mask, LossConfig()
        )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"variant": "ppo"}, r"LossConfig.variant='ppo' is not one of 'minirl', 'reinforce'"),
        ({"is_policy": "tis"}, r"LossConfig.is_policy='tis' is not one of 'none', 'token_tis'"),
        ({"is_cap_target": "r"}, r"LossConfig.is_cap_target='r' is not one of 'rho', 'w'"),
        ({"eps_low": 1.5}, r"LossConfig.eps_low=1.5 must be a number in \[0.0, 1.0\)"),
        ({"eps_high": -0.1}, r"LossConfig.eps_high=-0.1 must be a number in \[0.0, inf\)"),
        ({"is_cap": 0}, r"LossConfig.is_cap=0 must be a number in \(0.0, inf\)"),
        ({"is_cap": float("nan")}, "LossConfig.is_cap=nan must be a number"),
        ({"clip": "yes"}, "LossConfig.clip='yes' must be true or false"),
        ({"band": (5.0, 0.5)}, r"LossConfig.band=\(5.0, 0.5\) needs lo < hi"),
        ({"band": (0.5,)}, r"LossConfig.band=\(0.5,\) must be a pair"),
        ({"variant": "dapo", "length_norm": True}, "length_norm=True is defined for variant"),
        ({"variant": "dr_grpo"}, "dr_grpo_constant is required for variant 'dr_grpo'"),
        ({"is_policy": "seq_tis", "is_cap_target": "w"}, "is_cap_target='w' needs"),
        ({"variant": "grpo", "is_cap_target": "w"}, "is_cap_target='w' needs variant 'minirl'"),
    ],
)
def test_loss_config_rejects_bad_values(fields, message):
    with pytest.raises(ValueError, match=message):
        LossConfig(**fields)


def test_loss_config_accepts_yaml_shapes():
    cfg = LossConfig(eps_low=0, is_cap=3, band=[0.25, 4])  # ints and a YAML list
    assert cfg.band == (0.25, 4.0) and isinstance(cfg.is_cap, float)


def test_other_functions_reject_bad_input():
    logp, old, roll, adv, mask = good()
    with pytest.raises(ValueError, match=r"logp_rollout has shape \(2, 2\) but logp_old"):
        mismatch_metrics(old, roll[:, :2], mask)
    with pytest.raises(ValueError, match="mask is empty"):
        mismatch_metrics(old, roll, torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"band=\(2.0, 0.5\) must be"):
        mismatch_metrics(old, roll, mask, band=(2.0, 0.5))
    with pytest.raises(ValueError, match=r"log_w is not finite at \(0, 0\)"):
        approx_residual(torch.tensor([[float("nan"), 0.0]]), torch.tensor([[1, 0]]))
    with pytest.raises(ValueError, match="logits must have 3 dimensions"):
        token_entropy(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        token_entropy(torch.zeros(1, 1, 2), chunk_size=0)
    with pytest.raises(ValueError, match="entropy is not finite"):
        entropy_metrics(torch.tensor([[float("inf")]]), torch.ones(1, 1))
    with pytest.raises(ValueError, match=r"advantages has shape \(1,\)"):
        sequence_is_loss(logp, roll, adv[:1], mask)
    with pytest.raises(ValueError, match=r"logp_old has shape \(2, 2\)"):
        log_is_decomposition(logp, old[:, :2], roll)


def test_group_advantages_rejects_bad_input():
    r = torch.ones(6)
    with pytest.raises(ValueError, match="group_size=4 does not divide the 6 rewards"):
        group_advantages(r, 4)
    with pytest.raises(ValueError, match="group_size must be a positive int"):
        group_advantages(r, 0)
    with pytest.raises(ValueError, match="rewards must be a 1-D tensor"):
        group_advantages(r.view(2, 3), 3)
    with pytest.raises(ValueError, match="rewards contains a non-finite value"):
        group_advantages(torch.tensor([1.0, float("nan")]), 2)
    with pytest.raises(ValueError, match="baseline='loo' needs group_size >= 2"):
        group_advantages(r, 1, baseline="loo")
    with pytest.raises(ValueError, match="baseline='median' is not one of"):
        group_advantages(r, 2, baseline="median")


def test_routing_metrics_rejects_bad_input():
    a = torch.tensor([[[[0, 1]], [[1, 2]]]])  # [1, 2, 1, 2]
    mask = torch.ones(1, 2)
    with pytest.raises(ValueError, match=r"experts_a must be a \[B, T, L, k\] tensor"):
        routing_metrics(a[0], a[0], mask, 4, "x")
    with pytest.raises(ValueError, match=r"experts_b has shape \(1, 1, 1, 2\)"):
        routing_metrics(a, a[:, :1], mask, 4, "x")
    with pytest.raises(ValueError, match=r"experts_a holds an id outside \[-1, 1\]"):
        routing_metrics(a, a, mask, 2, "x")
    with pytest.raises(ValueError, match="experts_b repeats an expert"):
        routing_metrics(a, torch.tensor([[[[0, 0]], [[1, 2]]]]), mask, 4, "x")
    with pytest.raises(ValueError, match="no \\(token, layer\\) has known experts"):
        routing_metrics(a, torch.full_like(a, -1), mask, 4, "x")
    with pytest.raises(ValueError, match="name must be a non-empty string without '/'"):
        routing_metrics(a, a, mask, 4, "a/b")
    with pytest.raises(ValueError, match="must hold integer expert ids"):
        routing_metrics(a.float(), a.float(), mask, 4, "x")
