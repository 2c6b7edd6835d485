"""Importance-sampling policies: how the train-inference factor of the weight is corrected.

Given per-token log-ratios (log ρ_t = log π_old − log μ_old, or the full log w_t), each
policy returns the factor that multiplies the token's gradient, plus which tokens it
changed (for `is/trunc_frac`):

    none       1                                  no correction (wo_train-infer-is ablation)
    token_tis  min(ρ_t, C)                        truncated IS, Yao et al. 2025; MiniRL's cap C = 5
    seq_tis    min(Π_t ρ_t, C), per response      sequence-level truncated IS
    token_mis  ρ_t · 1[ρ_t ≤ hi]                  masked IS, Liu et al. 2025 (one-sided)
    seq_mis    ρ(y) · 1[ρ(y) ≤ hi], ρ(y) = Π_t ρ_t  sequence-level masked IS (one-sided)
    icepop     ρ_t · 1[lo ≤ ρ_t ≤ hi]             IcePop (Ling Team, Ring-1T 2025): two-sided,
                                                   M(k) = k inside [α, β] = [0.5, 5], else 0

TIS truncates (the token keeps weight C); MIS and IcePop reject (weight 0). Everything is
computed in log space and returned detached: an IS factor is always sg[·]. This module
does not decide which ratio the policy is applied to; `loss.py` does.
"""

from __future__ import annotations

import math

import torch

from core.vocabulary import ICEPOP_BAND, IS_POLICIES, TIS_CAP, ISPolicy

__all__ = ["ICEPOP_BAND", "IS_POLICIES", "TIS_CAP", "TOKEN_LEVEL", "ISPolicy", "is_weight"]

TOKEN_LEVEL: tuple[ISPolicy, ...] = ("none", "token_tis", "token_mis", "icepop")


def is_weight(
    log_ratio: torch.Tensor,  # [B, T] log ρ_t (or log w_t), 0 on padding
    mask: torch.Tensor,  # [B, T] bool, response tokens
    policy: ISPolicy,
    cap: float = TIS_CAP,
    band: tuple[float, float] = ICEPOP_BAND,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor [B, T] detached, changed [B, T] bool): the IS factor of each token and
    whether the policy truncated or rejected it. Both are 0/False on padding."""
    x = torch.where(mask, log_ratio.detach(), 0.0)  # [B, T]
    lo, hi = band
    log_cap, log_lo, log_hi = _log(cap), _log(lo), _log(hi)
    match policy:
        case "none":
            factor, changed = torch.ones_like(x), torch.zeros_like(mask)
        case "token_tis":  # min(ρ_t, C), in log space
            changed = x > log_cap
            factor = torch.exp(torch.clamp(x, max=log_cap))
        case "seq_tis":  # min(Π_t ρ_t, C) per response
            seq = x.sum(dim=1, keepdim=True)  # [B, 1] log ρ(y)
            changed = (seq > log_cap).expand_as(x)
            factor = torch.exp(torch.clamp(seq, max=log_cap)).expand_as(x)
        case "token_mis":  # ρ_t · 1[ρ_t ≤ hi]
            changed = x > log_hi
            factor = torch.where(changed, 0.0, torch.exp(x))
        case "seq_mis":  # ρ(y) · 1[ρ(y) ≤ hi]
            seq = x.sum(dim=1, keepdim=True)  # [B, 1]
            changed = (seq > log_hi).expand_as(x)
            factor = torch.where(changed, 0.0, torch.exp(seq).expand_as(x))
        case "icepop":  # ρ_t · 1[lo ≤ ρ_t ≤ hi]
            changed = (x < log_lo) | (x > log_hi)
            factor = torch.where(changed, 0.0, torch.exp(x))
        case _:
            raise ValueError(f"is_policy={policy!r} is not one of {ISPolicy.__args__}.")
    return factor * mask, changed & mask


def _log(v: float) -> float:
    return math.log(v) if v > 0 else float("-inf")
