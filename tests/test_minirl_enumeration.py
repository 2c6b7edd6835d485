"""The first-order approximation, checked exactly on a policy whose sequences can all be
enumerated (MiniRL, arXiv 2512.01374 eq. 1-4).

Tabular autoregressive policy in float64: vocabulary {EOS, a, b}, at most 3 tokens, a
response ends at EOS or at length 3, so lengths are 1, 2 or 3 (15 sequences). Its logits
are a table indexed by the prefix (7 prefixes × 3 tokens). Three tables: θ (π_θ),
θ_old = θ + δ·D_old (π_old) and θ_μ = θ + δ·D_μ (μ_old), so δ scales the mismatch.

The μ-expectation of `policy_loss`'s gradient is exact: every sequence is one row and its
advantage is B·μ(y)·R(y), so −∇loss = Σ_y μ(y) R(y) Σ_t (weight) ∇log π_θ(y_t).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from minirl import LossConfig, policy_loss, sequence_is_loss

EOS, VOCAB, MAX_LEN = 0, 3, 3
DELTAS = (0.1, 0.05, 0.025, 0.0125, 0.00625)


def _prefixes() -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in range(1, MAX_LEN):
        out += list(itertools.product((1, 2), repeat=n))
    return out


PREFIXES = _prefixes()
STATE = {p: i for i, p in enumerate(PREFIXES)}  # 7 states


def _sequences() -> list[tuple[int, ...]]:
    seqs = []
    for n in range(1, MAX_LEN + 1):
        for body in itertools.product((1, 2), repeat=n - 1):
            last = (EOS, 1, 2) if n == MAX_LEN else (EOS,)
            seqs += [(*body, t) for t in last]
    return seqs


SEQS = _sequences()  # 1 + 2 + 12 = 15
LENGTHS = torch.tensor([len(y) for y in SEQS])


def _token_logp(table: torch.Tensor) -> torch.Tensor:
    """[B, T] log π(y_t | y_<t) of every enumerated sequence, 0 on padding."""
    logp_table = torch.log_softmax(table, dim=-1)  # [7, 3]
    rows = []
    for y in SEQS:
        row = [logp_table[STATE[y[:t]], y[t]] for t in range(len(y))]
        row += [torch.zeros((), dtype=table.dtype)] * (MAX_LEN - len(y))
        rows.append(torch.stack(row))
    return torch.stack(rows)


MASK = (torch.arange(MAX_LEN)[None, :] < LENGTHS[:, None]).double()  # [15, 3]


def _setup(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(len(PREFIXES), VOCAB, generator=g, dtype=torch.float64)
    d_old = torch.randn(theta.shape, generator=g, dtype=torch.float64)
    d_mu = torch.randn(theta.shape, generator=g, dtype=torch.float64)
    reward = torch.rand(len(SEQS), generator=g, dtype=torch.float64) + 0.5  # R > 0
    return theta, d_old, d_mu, reward


def _seq_gradient(theta: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
    """∇_θ J_seq with J_seq = Σ_y π_θ(y) R(y) (eq. 1), by autograd of the exact sum."""
    th = theta.clone().requires_grad_()
    j_seq = (torch.exp(_token_logp(th).sum(dim=1)) * reward).sum()
    (grad,) = torch.autograd.grad(j_seq, th)
    return grad


def _token_surrogate_gradient(theta, theta_old, theta_mu, reward, config):
    """E_μ[−B ∇loss per row] via policy_loss: the exact μ-expectation of its gradient."""
    th = theta.clone().requires_grad_()
    logp = _token_logp(th)
    logp_old = _token_logp(theta_old)
    logp_mu = _token_logp(theta_mu)
    mu_seq = torch.exp(logp_mu.sum(dim=1))  # [B] μ(y)
    assert abs(float(mu_seq.sum()) - 1.0) < 1e-14  # the enumeration is complete
    batch = len(SEQS)
    adv = batch * mu_seq * reward
    loss, stats = policy_loss(logp, logp_old, logp_mu, adv, MASK, config)
    (grad,) = torch.autograd.grad(-loss, th)
    return grad, stats


def _token_objective_gradient(theta, theta_mu, reward, length_norm=False):
    """∇_θ of eq. 3, J_token = E_μ[Σ_t π_θ(y_t)/μ(y_t) · R], by autograd of the exact sum."""
    th = theta.clone().requires_grad_()
    w = torch.exp(_token_logp(th) - _token_logp(theta_mu)) * MASK  # [B, T]
    per_seq = w.sum(dim=1) / (LENGTHS if length_norm else 1)
    mu_seq = torch.exp(_token_logp(theta_mu).sum(dim=1))
    (grad,) = torch.autograd.grad((mu_seq * per_seq * reward).sum(), th)
    return grad


def test_surrogate_gradient_is_exactly_the_gradient_of_eq3_for_every_delta():
    """policy_loss's weight is the full w = π_θ/μ_old = ρ·r (eq. 5): its μ-expectation
    equals ∇J_token of eq. 3 exactly, at every mismatch, not just to first order. Using
    r or ρ alone would miss this by O(δ)."""
    theta, d_old, d_mu, reward = _setup()
    for delta in DELTAS:
        old, mu = theta + delta * d_old, theta + delta * d_mu
        got, stats = _token_surrogate_gradient(theta, old, mu, reward, LossConfig())
        assert stats["staleness/mask_frac"] == 0 and stats["is/trunc_frac"] == 0
        want = _token_objective_gradient(theta, mu, reward)
        err = float((got - want).abs().max())
        assert err < 1e-13, f"δ={delta}: max |E_μ[∇surrogate] − ∇J_token| = {err:.3e}"


def test_first_order_gap_vanishes_at_pi_equals_mu_and_shrinks_linearly():
    """‖E_μ[∇surrogate] − ∇J_seq‖ is 0 at π_θ = μ (to float64) and O(δ) away from it."""
    theta, d_old, d_mu, reward = _setup()
    true0 = _seq_gradient(theta, reward)
    at_mu, _ = _token_surrogate_gradient(theta, theta, theta, reward, LossConfig())
    gap0 = float(torch.linalg.vector_norm(at_mu - true0))
    assert gap0 < 1e-14 * float(torch.linalg.vector_norm(true0)) * 10, f"gap at δ=0: {gap0:.3e}"

    gaps = []
    for delta in DELTAS:
        old, mu = theta + delta * d_old, theta + delta * d_mu
        got, stats = _token_surrogate_gradient(theta, old, mu, reward, LossConfig())
        assert stats["staleness/mask_frac"] == 0  # the mask must not hide the comparison
        gaps.append(float(torch.linalg.vector_norm(got - true0)))
    ratios = [g / d for g, d in zip(gaps, DELTAS, strict=True)]
    table = ", ".join(
        f"δ={d}: gap={g:.3e} gap/δ={q:.4f}" for d, g, q in zip(DELTAS, gaps, ratios, strict=True)
    )
    assert all(a > b for a, b in itertools.pairwise(gaps)), f"gap not decreasing: {table}"
    assert max(ratios) / min(ratios) < 1.05, f"gap/δ not bounded: {table}"
    # first order, not faster: halving δ halves the gap (an O(δ²) gap would quarter it)
    halvings = [a / b for a, b in itertools.pairwise(gaps)]
    assert all(1.9 < h < 2.1 for h in halvings), f"gap not linear in δ: {table}"
    assert gaps[-1] < 0.01 * float(torch.linalg.vector_norm(true0)), table


def test_length_normalised_variant_does_not_converge_to_the_true_gradient():
    """seq-mean-token-mean (the paper's w_length-norm ablation) is the gradient of
    E[R/|y|], not of E[R]: with lengths 1-3 its gap to ∇J_seq stays finite as δ → 0, and it
    points elsewhere (a mere rescaling would keep the cosine at 1)."""
    theta, d_old, d_mu, reward = _setup()
    true0 = _seq_gradient(theta, reward)
    norm0 = float(torch.linalg.vector_norm(true0))
    config = LossConfig(length_norm=True)
    rel_gaps = []
    for delta in (*DELTAS, 0.0):
        old, mu = theta + delta * d_old, theta + delta * d_mu
        got, _ = _token_surrogate_gradient(theta, old, mu, reward, config)
        rel_gaps.append(float(torch.linalg.vector_norm(got - true0)) / norm0)
        cos = float(torch.nn.functional.cosine_similarity(got.flatten(), true0.flatten(), dim=0))
    table = ", ".join(
        f"δ={d}: rel gap={g:.3f}" for d, g in zip((*DELTAS, 0.0), rel_gaps, strict=True)
    )
    assert min(rel_gaps) > 0.2, f"length-norm converged: {table}"
    assert rel_gaps[-1] > 0.9 * rel_gaps[-2], f"length-norm gap shrinks with δ: {table}"
    assert cos < 0.999, f"length-norm is only a rescaling (cos={cos:.6f}): {table}"
    # and at δ = 0 it is exactly the gradient of E_π[R/|y|]
    want = _seq_gradient(theta, reward / LENGTHS)
    at_mu, _ = _token_surrogate_gradient(theta, theta, theta, reward, config)
    assert float((at_mu - want).abs().max()) < 1e-13


@pytest.mark.parametrize("variant", ["reinforce", "minirl"])
def test_without_is_the_gap_does_not_vanish_under_pure_train_inference_mismatch(variant):
    """The wo_train-infer-is ablation: π_θ = π_old ≠ μ_old. MiniRL with TIS recovers
    ∇J_token of eq. 3 exactly; without IS the expectation is off by O(δ) — the bias the
    paper's IS correction removes."""
    theta, _, d_mu, reward = _setup(seed=1)
    delta = 0.05
    mu = theta + delta * d_mu
    want = _token_objective_gradient(theta, mu, reward)
    with_is, _ = _token_surrogate_gradient(theta, theta, mu, reward, LossConfig())
    no_is_cfg = LossConfig(variant=variant, is_policy="none")
    no_is, _ = _token_surrogate_gradient(theta, theta, mu, reward, no_is_cfg)
    assert float((with_is - want).abs().max()) < 1e-13
    assert float(torch.linalg.vector_norm(no_is - want)) > 1e-3 * delta


def test_sequence_is_loss_is_the_unbiased_sequence_gradient():
    """eq. 2: E_μ[Π_t w_t · R · ∇log π_θ(y)] = ∇J_seq exactly, at any mismatch; this is
    what `approx/grad_cosine` compares the token surrogate with."""
    theta, _, d_mu, reward = _setup()
    batch = len(SEQS)
    for delta in (0.0, *DELTAS):
        mu = theta + delta * d_mu
        th = theta.clone().requires_grad_()
        logp_mu = _token_logp(mu)
        adv = batch * torch.exp(logp_mu.sum(dim=1)) * reward
        loss = sequence_is_loss(_token_logp(th), logp_mu, adv, MASK)
        (got,) = torch.autograd.grad(-loss, th)
        err = float((got - _seq_gradient(theta, reward)).abs().max())
        assert err < 1e-13, f"δ={delta}: max |E_μ[seq IS grad] − ∇J_seq| = {err:.3e}"
