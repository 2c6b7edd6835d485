"""The sequence-level IS gradient and the cosine that compares it with the token surrogate.

MiniRL, arXiv 2512.01374 eq. 1-2: the true objective is E_μ[π_θ(y)/μ_old(y) · R], whose
gradient estimate is Π_t w_t · Â · ∇log π_θ(y). Eq. 3-4 replace Π_t w_t by per-token
weights; `approx/grad_cosine` measures on one batch how far apart the two directions are.
The probe is periodic because it needs a second backward pass. This module does not run
the backward passes; the trainer does, and hands the gradients to `grad_cosine`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from minirl._checks import (
    as_mask,
    check_advantages,
    check_finite,
    check_same_shape,
    check_tokens,
    zero_padding,
)


def sequence_is_loss(
    logp: torch.Tensor,  # [B, T] log π_θ, carries the gradient
    logp_rollout: torch.Tensor,  # [B, T] log μ_old
    advantages: torch.Tensor,  # [B]
    mask: torch.Tensor,  # [B, T]
) -> torch.Tensor:
    """Scalar −(1/B) Σ_i Π_t w_{i,t} · Â_i, whose gradient is −(1/B) Σ_i Π_t w_t · Â_i ·
    ∇log π_θ(y_i) (eq. 2), on the same 1/B scale as `policy_loss`.

    No cap, no mask, no clipping: this is the unbiased estimator the token surrogate
    approximates, so it overflows exactly when the approximation is meaningless.
    """
    check_tokens(logp, "logp")
    check_tokens(logp_rollout, "logp_rollout")
    check_same_shape(logp, "logp", logp_rollout=logp_rollout)
    mask = as_mask(mask, logp.shape)
    check_advantages(advantages, logp.shape[0])
    check_finite(logp, mask, "logp")
    check_finite(logp_rollout, mask, "logp_rollout")
    log_w = zero_padding(logp, mask) - zero_padding(logp_rollout, mask).detach()  # [B, T]
    seq_weight = torch.exp(log_w.sum(dim=1))  # [B] π_θ(y)/μ_old(y)
    return -(seq_weight * advantages.detach().to(logp.dtype)).sum() / logp.shape[0]


def grad_cosine(
    g1: torch.Tensor | Sequence[torch.Tensor | None],
    g2: torch.Tensor | Sequence[torch.Tensor | None],
) -> float:
    """Cosine between two gradients, each a tensor or a list of per-parameter tensors (None
    = no gradient = zeros), computed in float64. NaN when either gradient is zero (e.g. all
    advantages 0): there is no direction to compare, and the caller should not log it."""
    a, b = _flatten_pair(g1, g2)
    if not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("grad_cosine got a non-finite gradient.")
    na, nb = torch.linalg.vector_norm(a), torch.linalg.vector_norm(b)
    if na == 0 or nb == 0:
        return math.nan
    return float(torch.clamp((a / na) @ (b / nb), -1.0, 1.0))


def _flatten_pair(
    g1: torch.Tensor | Sequence[torch.Tensor | None],
    g2: torch.Tensor | Sequence[torch.Tensor | None],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both gradients as flat float64 vectors, a None standing for zeros like its partner."""
    if isinstance(g1, torch.Tensor) != isinstance(g2, torch.Tensor):
        raise ValueError("g1 and g2 must both be tensors or both be lists of tensors.")
    if isinstance(g1, torch.Tensor):
        pairs = [(g1, g2)]
    else:
        g1, g2 = list(g1), list(g2)
        if len(g1) != len(g2):
            raise ValueError(f"g1 has {len(g1)} parameters but g2 has {len(g2)}.")
        pairs = [(p, q) for p, q in zip(g1, g2, strict=True) if p is not None or q is not None]
        if not pairs:
            raise ValueError("g1 and g2 hold no gradient tensor.")
    a, b = [], []
    for p, q in pairs:
        p = torch.zeros_like(q) if p is None else p
        q = torch.zeros_like(p) if q is None else q
        if p.shape != q.shape:
            raise ValueError(
                f"g1 has a gradient of shape {tuple(p.shape)} where g2 has {tuple(q.shape)}."
            )
        a.append(p.detach().reshape(-1).to(torch.float64))
        b.append(q.detach().reshape(-1).to(torch.float64))
    return torch.cat(a), torch.cat(b)
