"""The importance-sampling decomposition of the token weight, in log space.

MiniRL, arXiv 2512.01374 eq. 5: for a token y_t sampled by the inference engine,

    w_t = π_θ / μ_old = (π_old / μ_old) · (π_θ / π_old) = ρ_t · r_t

ρ_t is the training-inference discrepancy (same weights θ_old, two engines), r_t the
policy staleness (same engine, weights θ vs θ_old). Everything stays in log space, where
the product is a sum and no ratio can overflow. This module neither masks, caps nor
detaches: callers decide which factors carry a gradient.
"""

from __future__ import annotations

import torch

from minirl._checks import check_same_shape, check_tokens


def log_is_decomposition(
    logp: torch.Tensor,  # [B, T] log π_θ(y_t), carries the gradient
    logp_old: torch.Tensor,  # [B, T] log π_old(y_t), training engine at θ_old
    logp_rollout: torch.Tensor,  # [B, T] log μ_old(y_t), inference engine at θ_old
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log ρ, log r, log w), each [B, T], with log w = log ρ + log r exactly (eq. 5).

    log r and log w keep the gradient of `logp`; log ρ has none unless the caller's
    `logp_old` has one.
    """
    check_tokens(logp, "logp")
    check_tokens(logp_old, "logp_old")
    check_tokens(logp_rollout, "logp_rollout")
    check_same_shape(logp, "logp", logp_old=logp_old, logp_rollout=logp_rollout)
    log_rho = logp_old - logp_rollout  # train-inference discrepancy
    log_r = logp - logp_old  # staleness
    log_w = log_rho + log_r  # = logp - logp_rollout up to rounding; kept as the sum (eq. 5)
    return log_rho, log_r, log_w
