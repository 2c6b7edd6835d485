"""The residual of the first-order approximation, per response.

MiniRL, arXiv 2512.01374 eq. 3-4: the token surrogate keeps only the first-order part of
the sequence weight, Π_t w_t ≈ 1 + Σ_t (w_t − 1). What it drops is

    residual(y) = Π_t w_t − 1 − Σ_t (w_t − 1) = Σ_t x_t · (Π_{s<t} (1 + x_s) − 1),  x_t = w_t − 1,

which is O(δ²) when every |x_t| ≤ δ. Subtracting the two sides directly cancels
catastrophically for small δ; the right-hand sum has no cancellation, since every term is
an expm1 computed to full relative precision. `approx/seq_residual` is the mean of |residual|
over responses. This module does not know where the weights came from.
"""

from __future__ import annotations

import torch

from minirl._checks import as_mask, check_finite, check_tokens


@torch.no_grad()
def approx_residual(
    log_w: torch.Tensor,  # [B, T] log w_t = log π_θ − log μ_old
    mask: torch.Tensor,  # [B, T] 1 on response tokens
) -> dict[str, float]:
    """{"approx/seq_residual": mean over responses of |Π_t w_t − (1 + Σ_t (w_t − 1))|}."""
    check_tokens(log_w, "log_w")
    mask = as_mask(mask, log_w.shape)
    check_finite(log_w, mask, "log_w")
    lw = torch.where(mask, log_w.to(torch.float64), 0.0)  # [B, T], w = 1 on padding
    x = torch.expm1(lw)  # [B, T] w_t − 1
    before = torch.cumsum(lw, dim=1) - lw  # [B, T] Σ_{s<t} log w_s
    residual = (x * torch.expm1(before)).sum(dim=1)  # [B]
    # Overflow (Π w beyond float64) can turn the sum into inf − inf; the direct form is
    # then inf, which is the honest answer.
    direct = torch.expm1(lw.sum(dim=1)) - x.sum(dim=1)
    residual = torch.where(torch.isnan(residual), direct, residual)
    rows = mask.any(dim=1)
    return {"approx/seq_residual": float(residual.abs()[rows].mean())}
