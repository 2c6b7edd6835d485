"""policy_loss and its variants against values derived by hand on a 2-response batch.

The batch (probabilities chosen so every ratio is a round number):

    response 0, Â = −1, 3 tokens         response 1, Â = +2, 2 tokens (+1 padding)
    t   μ_old  π_old  π_θ    ρ   r        t   μ_old  π_old  π_θ    ρ     r
    0   0.5    0.5    0.55   1   1.1      0   0.5    0.4    0.6    0.8   1.5
    1   0.125  0.5    0.75   4   1.5      1   0.2    0.05   0.05   0.25  1
    2   0.1    0.8    0.4    8   0.5

With ε_low = 0.2, ε_high = 0.27 MiniRL masks (0, 2) (Â < 0, r = 0.5 < 0.8) and (1, 0)
(Â > 0, r = 1.5 > 1.27). Expected losses and gradients below are written out from these
numbers, never computed by the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from minirl import LossConfig, is_weight, minirl_mask, policy_loss

L = math.log
NAN, INF = float("nan"), float("inf")
MU = [[0.5, 0.125, 0.1], [0.5, 0.2, NAN]]
OLD = [[0.5, 0.5, 0.8], [0.4, 0.05, INF]]
NEW = [[0.55, 0.75, 0.4], [0.6, 0.05, NAN]]
ADV = [-1.0, 2.0]
MASK = [[1, 1, 1], [1, 1, 0]]


def batch():
    """(logp with grad, logp_old, logp_rollout, adv, mask) in float64; padding is garbage."""
    logp = torch.log(torch.tensor(NEW, dtype=torch.float64)).requires_grad_()
    old = torch.log(torch.tensor(OLD, dtype=torch.float64))
    mu = torch.log(torch.tensor(MU, dtype=torch.float64))
    return logp, old, mu, torch.tensor(ADV, dtype=torch.float64), torch.tensor(MASK)


def run(**config):
    logp, old, mu, adv, mask = batch()
    loss, stats = policy_loss(logp, old, mu, adv, mask, LossConfig(**config))
    (grad,) = torch.autograd.grad(loss, logp)
    return float(loss.detach()), grad.tolist(), stats


def close(a, b, tol=1e-12):
    if isinstance(a, list):
        return all(close(x, y, tol) for x, y in zip(a, b, strict=True))
    return abs(a - b) <= tol * max(1.0, abs(b))


# --- MiniRL, eq. 7 ----------------------------------------------------------------------


def test_minirl_default_matches_hand_derivation():
    # weights sg[min(ρ,5)·r]: (0,0) 1·1.1, (0,1) 4·1.5 = 6, (1,1) 0.25·1; masked: (0,2), (1,0)
    loss, grad, stats = run()
    j = (-1 * (1.1 * L(0.55) + 6 * L(0.75)) + 2 * (0.25 * L(0.05))) / 2
    assert close(loss, -j)
    # −B·∇loss = M·sg[w]·Â  →  ∇loss = −M·w·Â / B
    assert close(grad, [[1.1 / 2, 6 / 2, 0.0], [0.0, -0.25, 0.0]])
    assert stats["staleness/mask_frac"] == pytest.approx(2 / 5)
    assert stats["is/trunc_frac"] == pytest.approx(1 / 5)  # ρ = 8 > 5 at (0, 2)
    assert stats["staleness/ratio_mean"] == pytest.approx((1.1 + 1.5 + 0.5 + 1.5 + 1) / 5)
    assert stats["staleness/ratio_min"] == pytest.approx(0.5)
    assert stats["staleness/ratio_max"] == pytest.approx(1.5)
    k3 = sum(r - 1 - L(r) for r in (1.1, 1.5, 0.5, 1.5, 1.0)) / 5
    assert stats["staleness/kl_k3"] == pytest.approx(k3)
    w = (1.1, 6.0, 4.0, 1.2, 0.25)  # raw π_θ/μ_old
    assert stats["is/weight_mean"] == pytest.approx(sum(w) / 5)
    assert stats["is/weight_max"] == pytest.approx(6.0)
    assert stats["optim/loss"] == pytest.approx(loss)


def test_minirl_cap_on_w_truncates_the_full_weight():
    # is_cap_target="w": min(ρ·r, 5): (0,1) has ρ = 4 < 5 but w = 6 > 5 → 5
    _loss, grad, stats = run(is_cap_target="w")
    assert close(grad, [[1.1 / 2, 5 / 2, 0.0], [0.0, -0.25, 0.0]])
    assert stats["is/trunc_frac"] == pytest.approx(1 / 5)  # (0, 1) only: w(0,2) = 4


def test_minirl_without_clipping_keeps_every_token():
    _loss, grad, stats = run(clip=False)
    # (0,2): min(8,5)·0.5 = 2.5, Â = −1; (1,0): 0.8·1.5 = 1.2, Â = 2
    assert close(grad, [[1.1 / 2, 6 / 2, 2.5 / 2], [-2 * 1.2 / 2, -0.25, 0.0]])
    assert stats["staleness/mask_frac"] == 0.0


def test_minirl_without_is_is_the_wo_train_infer_is_ablation():
    # weight = r alone
    _loss, grad, _ = run(is_policy="none")
    assert close(grad, [[1.1 / 2, 1.5 / 2, 0.0], [0.0, -2 * 1 / 2, 0.0]])


def test_minirl_length_norm_divides_by_each_length():
    loss, grad, _ = run(length_norm=True)
    assert close(grad, [[1.1 / 2 / 3, 6 / 2 / 3, 0.0], [0.0, -0.25 / 2, 0.0]])
    j = ((-1 * (1.1 * L(0.55) + 6 * L(0.75))) / 3 + (2 * 0.25 * L(0.05)) / 2) / 2
    assert close(loss, -j)


def test_reinforce_is_the_bare_estimator():
    loss, grad, stats = run(variant="reinforce")
    j = (-1 * (L(0.55) + L(0.75) + L(0.4)) + 2 * (L(0.6) + L(0.05))) / 2
    assert close(loss, -j)
    assert close(grad, [[0.5, 0.5, 0.5], [-1.0, -1.0, 0.0]])
    assert stats["staleness/mask_frac"] == 0 and stats["is/trunc_frac"] == 0


# --- the PPO-clip family, decoupled: sg[f(ρ)] · min(r Â, clip(r) Â) ---------------------


def test_grpo_symmetric_clip_seq_mean_token_mean():
    # ε = 0.2 both sides. Row 0 (Â=−1): r 1.1 → −1.1; r 1.5 → min(−1.5, −1.2) = −1.5;
    # r 0.5 → min(−0.5, −0.8) = −0.8 (clipped). Row 1 (Â=2): r 1.5 → min(3, 2.4) = 2.4
    # (clipped); r 1 → 2. ∂/∂log π = r·Â where unclipped.
    loss, grad, stats = run(variant="grpo", is_policy="none")
    assert close(loss, -((-1.1 - 1.5 - 0.8) / 3 + (2.4 + 2) / 2) / 2)
    assert close(grad, [[1.1 / 3 / 2, 1.5 / 3 / 2, 0.0], [0.0, -2 / 2 / 2, 0.0]])
    assert stats["staleness/mask_frac"] == pytest.approx(2 / 5)


def test_dapo_clip_higher_token_mean():
    # ε_high = 0.27: (1,0) → min(3, 2.54) = 2.54
    loss, grad, _ = run(variant="dapo", is_policy="none")
    assert close(loss, -(-1.1 - 1.5 - 0.8 + 2.54 + 2) / 5)
    assert close(grad, [[1.1 / 5, 1.5 / 5, 0.0], [0.0, -2 / 5, 0.0]])


def test_dapo_with_token_tis_multiplies_each_term_by_the_capped_rho():
    # factors min(ρ, 5): [[1, 4, 5], [0.8, 0.25]]
    loss, grad, _ = run(variant="dapo")
    assert close(loss, -(-1.1 * 1 - 1.5 * 4 - 0.8 * 5 + 2.54 * 0.8 + 2 * 0.25) / 5)
    assert close(grad, [[1.1 / 5, 1.5 * 4 / 5, 0.0], [0.0, -2 * 0.25 / 5, 0.0]])


def test_dr_grpo_divides_by_batch_times_constant():
    loss, grad, _ = run(variant="dr_grpo", is_policy="none", dr_grpo_constant=4)
    assert close(loss, -(-1.1 - 1.5 - 0.8 + 2.54 + 2) / (2 * 4))
    assert close(grad, [[1.1 / 8, 1.5 / 8, 0.0], [0.0, -2 / 8, 0.0]])


def test_gspo_sequence_ratio():
    # s_0 = (1.1·1.5·0.5)^(1/3), s_1 = (1.5·1)^(1/2) = 1.2247 < 1.27: both unclipped.
    # J = (1/B) Σ_i s_i Â_i; ∂s_i/∂log π_t = s_i/|y_i|.
    s0, s1 = (1.1 * 1.5 * 0.5) ** (1 / 3), 1.5**0.5
    loss, grad, stats = run(variant="gspo", is_policy="none")
    assert close(loss, -(-s0 + 2 * s1) / 2)
    assert close(grad, [[s0 / 3 / 2] * 3, [-2 * s1 / 2 / 2] * 2 + [0.0]])
    assert stats["staleness/mask_frac"] == 0.0
    # with ε_high = 0.2 the second response is clipped (s_1 > 1.2): no gradient there
    loss, grad, stats = run(variant="gspo", is_policy="none", eps_high=0.2)
    assert close(loss, -(-s0 + 2 * 1.2) / 2)
    assert close(grad, [[s0 / 3 / 2] * 3, [0.0, 0.0, 0.0]])
    assert stats["staleness/mask_frac"] == pytest.approx(2 / 5)


def test_cispo_clips_the_weight_and_keeps_every_token():
    # sg[clip(r, 0.8, 1.27)]: [[1.1, 1.27, 0.8], [1.27, 1]]; token-mean
    loss, grad, stats = run(variant="cispo", is_policy="none")
    j = (-(1.1 * L(0.55) + 1.27 * L(0.75) + 0.8 * L(0.4)) + 2 * (1.27 * L(0.6) + L(0.05))) / 5
    assert close(loss, -j)
    assert close(grad, [[1.1 / 5, 1.27 / 5, 0.8 / 5], [-2.54 / 5, -2 / 5, 0.0]])
    assert stats["staleness/mask_frac"] == pytest.approx(3 / 5)  # weights clipped


# --- IS policies on ρ = [[1, 4, 8], [0.8, 0.25]] ---------------------------------------


@pytest.mark.parametrize(
    ("policy", "factor", "changed"),
    [
        ("none", [[1, 1, 1], [1, 1, 0]], [[0, 0, 0], [0, 0, 0]]),
        ("token_tis", [[1, 4, 5], [0.8, 0.25, 0]], [[0, 0, 1], [0, 0, 0]]),
        ("seq_tis", [[5, 5, 5], [0.2, 0.2, 0]], [[1, 1, 1], [0, 0, 0]]),  # Πρ = 32, 0.2
        ("token_mis", [[1, 4, 0], [0.8, 0.25, 0]], [[0, 0, 1], [0, 0, 0]]),
        ("seq_mis", [[0, 0, 0], [0.2, 0.2, 0]], [[1, 1, 1], [0, 0, 0]]),
        ("icepop", [[1, 4, 0], [0.8, 0, 0]], [[0, 0, 1], [0, 1, 0]]),  # 0.25 < 0.5
    ],
)
def test_is_policies(policy, factor, changed):
    _, old, mu, _, mask = batch()
    log_rho = torch.where(mask.bool(), old - mu, 0.0)
    f, c = is_weight(log_rho, mask.bool(), policy, cap=5.0, band=(0.5, 5.0))
    assert close(f.tolist(), factor)
    assert c.int().tolist() == changed
    _loss, grad, stats = run(is_policy=policy, clip=False)
    # MiniRL without the mask: ∇loss = −f·r·Â / B on every token
    r = [[1.1, 1.5, 0.5], [1.5, 1.0, 0.0]]
    want = [[-factor[i][t] * r[i][t] * ADV[i] / 2 for t in range(3)] for i in range(2)]
    assert close(grad, want)
    assert stats["is/trunc_frac"] == pytest.approx(sum(map(sum, changed)) / 5)


# --- gradients: float64 gradcheck where the loss has no stop-gradient of logp -----------


GRADCHECK = [
    (v, p)
    for v in ("reinforce", "grpo", "dapo", "dr_grpo")
    for p in ("none", "token_tis", "seq_mis")
] + [("gspo", p) for p in ("none", "seq_tis", "seq_mis")]
# gspo with a token-level IS factor is excluded by design: in the GSPO-token form each
# token's factor multiplies only its own gradient, which no scalar value reproduces.


@pytest.mark.parametrize(("variant", "is_policy"), GRADCHECK)
def test_gradcheck(variant, is_policy):
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(4, 5, generator=g, dtype=torch.float64) - 0.1
    mu = old + 0.3 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    logp = old + 0.4 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(4, 5)
    mask[1, 3:] = 0
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64)
    extra = {"dr_grpo_constant": 7.0} if variant == "dr_grpo" else {}
    cfg = LossConfig(variant=variant, is_policy=is_policy, **extra)
    # keep away from the clip kinks, where finite differences are meaningless
    r = torch.exp(logp - old)
    assert bool(((r - 0.8).abs() > 1e-3).all() and ((r - 1.27).abs() > 1e-3).all())
    logp.requires_grad_()
    assert torch.autograd.gradcheck(lambda lp: policy_loss(lp, old, mu, adv, mask, cfg)[0], logp)


# --- the MiniRL mask is the zero-gradient set of decoupled PPO-clip --------------------


@pytest.mark.parametrize("seed", range(3))
def test_minirl_mask_is_the_zero_gradient_set_of_ppo_clip(seed):
    g = torch.Generator().manual_seed(seed)
    shape = (16, 32)
    old = -torch.rand(shape, generator=g, dtype=torch.float64) * 3
    logp = (old + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(16, generator=g, dtype=torch.float64)
    # PPO-clip with π_old in the denominator, written out here from its definition
    r = torch.exp(logp - old)
    a = adv[:, None]
    ppo = torch.minimum(r * a, torch.clamp(r, 0.8, 1.27) * a).sum()
    (g_ppo,) = torch.autograd.grad(ppo, logp)
    zero_grad = g_ppo == 0
    m = minirl_mask(logp - old, adv)
    assert set(m.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(m == 0, zero_grad), "mask differs from PPO-clip's zero-gradient set"
    assert 0 < int(zero_grad.sum()) < zero_grad.numel()  # both kinds of tokens occur
    # and policy_loss(minirl) silences exactly those tokens
    ones = torch.ones(shape, dtype=torch.float64)
    loss, stats = policy_loss(logp, old, old, adv, ones, LossConfig(is_policy="none"))
    (g_mini,) = torch.autograd.grad(loss, logp)
    assert torch.equal(g_mini == 0, zero_grad)
    assert stats["staleness/mask_frac"] == pytest.approx(float(zero_grad.double().mean()))


# --- invariances --------------------------------------------------------------------------

ALL = [
    {"variant": "minirl"},
    {"variant": "minirl", "length_norm": True},
    {"variant": "minirl", "is_cap_target": "w"},
    {"variant": "reinforce"},
    {"variant": "grpo"},
    {"variant": "dapo", "is_policy": "icepop"},
    {"variant": "dr_grpo", "dr_grpo_constant": 16.0},
    {"variant": "gspo", "is_policy": "seq_tis"},
    {"variant": "cispo", "is_policy": "token_mis"},
]


@pytest.mark.parametrize("cfg", ALL, ids=lambda c: "-".join(map(str, c.values())))
def test_padding_does_not_change_loss_gradient_or_stats(cfg):
    logp, old, mu, adv, mask = batch()
    config = LossConfig(**cfg)
    loss, stats = policy_loss(logp, old, mu, adv, mask, config)
    (grad,) = torch.autograd.grad(loss, logp)

    def pad(x, value):
        return torch.cat([x, torch.full((2, 4), value, dtype=x.dtype)], dim=1)

    logp2 = pad(logp.detach(), NAN).requires_grad_()
    loss2, stats2 = policy_loss(logp2, pad(old, -INF), pad(mu, INF), adv, pad(mask, 0), config)
    (grad2,) = torch.autograd.grad(loss2, logp2)
    assert float(loss2.detach()) == pytest.approx(float(loss.detach()), rel=1e-14, abs=1e-15)
    assert torch.allclose(grad2[:, :3], grad, rtol=1e-14, atol=1e-15)
    assert bool((grad2[:, 3:] == 0).all()) and bool((grad2[1, 2] == 0).all())
    assert stats2 == pytest.approx(stats, rel=1e-14, abs=1e-15)


def _per_token_grad(config, lengths=(2, 6)):
    """∂loss/∂log π_θ of the first token of a short and a long response, same Â, on-policy."""
    t = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (t - n) for n in lengths])
    logp = torch.full((len(lengths), t), -1.0, dtype=torch.float64, requires_grad=True)
    adv = torch.ones(len(lengths), dtype=torch.float64)
    loss, _ = policy_loss(logp, logp.detach(), logp.detach(), adv, mask, config)
    (grad,) = torch.autograd.grad(loss, logp)
    return float(grad[0, 0]), float(grad[1, 0])


def test_minirl_token_weight_does_not_depend_on_length_but_length_norm_does():
    short, long = _per_token_grad(LossConfig())
    assert short == long == -0.5  # −Â/B for every token
    short, long = _per_token_grad(LossConfig(length_norm=True))
    assert short / long == pytest.approx(3.0)  # |y_long| / |y_short| = 6 / 2
    short, long = _per_token_grad(LossConfig(variant="grpo"))
    assert short / long == pytest.approx(3.0)
    short, long = _per_token_grad(LossConfig(variant="dr_grpo", dr_grpo_constant=8.0))
    assert short == long
