"""Clipping: MiniRL's token mask M_t and the PPO-clip surrogate it is derived from.

MiniRL, arXiv 2512.01374 eq. 7 masks a token (M_t = 0) when

    (Â > 0 and r_t > 1 + ε_high)  or  (Â < 0 and r_t < 1 − ε_low),

which is exactly the set of tokens where the decoupled PPO-clip objective
min(r Â, clip(r, 1 − ε_low, 1 + ε_high) Â) has zero gradient. Ratios are compared in ratio
space, the way the PPO clamp sees them, so that the two sets agree to the last bit. This
module knows nothing about importance-sampling factors or batch constants.
"""

from __future__ import annotations

import torch

from core.vocabulary import EPS_HIGH, EPS_LOW


def clipped_region(
    ratio: torch.Tensor,  # [B, T] (or [B, 1] for a sequence ratio)
    adv: torch.Tensor,  # broadcastable to ratio, e.g. [B, 1]
    eps_low: float,
    eps_high: float,
) -> torch.Tensor:
    """Bool [B, T]: tokens whose PPO-clip gradient is zero, i.e. M_t = 0 (eq. 7)."""
    return ((adv > 0) & (ratio > 1.0 + eps_high)) | ((adv < 0) & (ratio < 1.0 - eps_low))


def minirl_mask(
    log_r: torch.Tensor,  # [B, T] log π_θ − log π_old
    advantages: torch.Tensor,  # [B]
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
) -> torch.Tensor:
    """M_t of MiniRL eq. 7 as a float 0/1 tensor [B, T] (1 = the token keeps its gradient)."""
    ratio = torch.exp(log_r.detach())
    return (~clipped_region(ratio, advantages.detach()[:, None], eps_low, eps_high)).to(log_r.dtype)


def ppo_clip(
    ratio: torch.Tensor,  # [B, T] carries the gradient
    adv: torch.Tensor,  # [B, 1]
    eps_low: float,
    eps_high: float,
) -> torch.Tensor:
    """min(r Â, clip(r, 1 − ε_low, 1 + ε_high) Â) per token (PPO, Schulman et al. 2017)."""
    return torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv)
