"""Training-inference mismatch: how far π_old (training engine) is from μ_old (inference).

Both engines hold the same weights θ_old; their difference is numerics, kernels, sampler
settings and, for MoE, routing. With ℓ_t = log π_old − log μ_old = log ρ_t on tokens that
μ_old sampled (MiniRL, arXiv 2512.01374 eq. 5, the first factor):

    mismatch/kl_k1, kl_k2, kl_k3   mean(−ℓ), ½ mean(ℓ²), mean(ρ − 1 − ℓ): KL(μ_old ‖ π_old)
                                   estimators (k1 the paper's; Schulman 2020)
    mismatch/ratio_{mean,min,max,p01,p99}   of ρ_t (quantiles: linear interpolation)
    mismatch/frac_outside_band  share of tokens with ρ_t outside band (default [0.5, 2])
    mismatch/chi2_token, chi2_seq  mean((ρ_t − 1)²), mean_i((ρ(y_i) − 1)²), ρ(y) = Π_t ρ_t
    mismatch/ess         (Σ_i ρ(y_i))² / (N Σ_i ρ(y_i)²) ∈ (0, 1]: normalised ESS
    mismatch/prob_corr   Pearson correlation of token probabilities π_old vs μ_old
    mismatch/max_abs_prob_diff  per response max_t |π_old − μ_old|, then mean over responses

Responses without tokens are left out. No histograms (the monitor bins) nor routing
(`routing.py`) here.
"""

from __future__ import annotations

import math

import torch

from minirl._checks import as_mask, check_finite, check_same_shape, check_tokens

NAMES = (
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "ratio_mean",
    "ratio_min",
    "ratio_max",
    "ratio_p01",
    "ratio_p99",
    "frac_outside_band",
    "chi2_token",
    "chi2_seq",
    "ess",
    "prob_corr",
    "max_abs_prob_diff",
)
"""The metrics `mismatch_metrics` returns, each as `mismatch/<name>`, in this order."""


@torch.no_grad()
def mismatch_metrics(
    logp_old: torch.Tensor,  # [B, T] log π_old of the sampled tokens
    logp_rollout: torch.Tensor,  # [B, T] log μ_old of the same tokens
    mask: torch.Tensor,  # [B, T] 1 on response tokens
    band: tuple[float, float] = (0.5, 2.0),
) -> dict[str, float]:
    """The `mismatch/*` metrics above, as python floats, computed in float64."""
    check_tokens(logp_old, "logp_old")
    check_tokens(logp_rollout, "logp_rollout")
    check_same_shape(logp_old, "logp_old", logp_rollout=logp_rollout)
    mask = as_mask(mask, logp_old.shape)
    check_finite(logp_old, mask, "logp_old")
    check_finite(logp_rollout, mask, "logp_rollout")
    lo, hi = band
    if not 0 <= lo < hi:
        raise ValueError(f"band={band!r} must be (lo, hi) with 0 <= lo < hi.")

    a = torch.where(mask, logp_old.to(torch.float64), 0.0)  # [B, T]
    b = torch.where(mask, logp_rollout.to(torch.float64), 0.0)
    ell_bt = a - b  # [B, T] log ρ, 0 on padding
    ell = ell_bt[mask]  # [N]
    rho = torch.exp(ell)
    q01, q99 = _quantiles(rho, (0.01, 0.99))

    rows = mask.any(dim=1)  # [B] responses with at least one token
    log_seq = ell_bt.sum(dim=1)[rows]  # [N_seq] log ρ(y)
    n_seq = log_seq.numel()
    # ESS in log space: (Σ e^s)² / (N Σ e^{2s}) = exp(2·LSE(s) − log N − LSE(2s))
    ess = torch.exp(
        2 * torch.logsumexp(log_seq, 0) - math.log(n_seq) - torch.logsumexp(2 * log_seq, 0)
    )

    p_old, p_roll = torch.exp(a[mask]), torch.exp(b[mask])
    diff = torch.where(mask, (torch.exp(a) - torch.exp(b)).abs(), 0.0)  # [B, T]
    values = torch.stack(
        [
            (-ell).mean(),
            0.5 * (ell**2).mean(),
            (torch.expm1(ell) - ell).mean(),  # ρ − 1 − ℓ, accurate for small ℓ
            rho.mean(),
            rho.min(),
            rho.max(),
            q01,
            q99,
            ((rho < lo) | (rho > hi)).to(torch.float64).mean(),
            (torch.expm1(ell) ** 2).mean(),
            (torch.expm1(log_seq) ** 2).mean(),
            ess,
            _pearson(p_old, p_roll),
            diff.amax(dim=1)[rows].mean(),
        ]
    ).tolist()
    return {f"mismatch/{k}": v for k, v in zip(NAMES, values, strict=True)}


def _quantiles(x: torch.Tensor, qs: tuple[float, ...]) -> list[torch.Tensor]:
    """Linear-interpolation quantiles (numpy's default) by sorting: torch.quantile refuses
    inputs above 2^24 elements, which a long-response batch can exceed."""
    s = torch.sort(x).values
    n = s.numel()
    out = []
    for q in qs:
        pos = q * (n - 1)
        i = min(math.floor(pos), n - 1)
        j = min(i + 1, n - 1)
        out.append(s[i] + (s[j] - s[i]) * (pos - i))
    return out


def _pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson correlation; NaN when either side is constant (no correlation defined)."""
    xc, yc = x - x.mean(), y - y.mean()
    den = torch.sqrt((xc**2).sum() * (yc**2).sum())
    if den == 0:
        return torch.tensor(math.nan, dtype=x.dtype, device=x.device)
    return torch.clamp((xc * yc).sum() / den, -1.0, 1.0)
