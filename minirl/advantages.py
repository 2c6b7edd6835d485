"""Group-relative advantages: one scalar per response from the rewards of its group.

MiniRL, arXiv 2512.01374 eq. 7 uses Â_i = R_i − mean_group(R), without dividing by the
group's standard deviation. Also here: GRPO's std normalisation (arXiv 2402.03300) and the
leave-one-out baseline (RLOO, Ahmadian et al. 2024). Rows i·n … i·n + n − 1 are the n
responses of prompt i. This module does not compute rewards or per-token advantages.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

Baseline = Literal["mean", "loo"]
BASELINES: tuple[Baseline, ...] = get_args(Baseline)


def group_advantages(
    rewards: torch.Tensor,  # [B] one reward per response, prompt-major
    group_size: int,
    baseline: Baseline = "mean",
    std_normalize: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Â [B]: R_i minus the group mean ("mean", the paper's) or minus the mean of the other
    n − 1 rewards ("loo", = n/(n − 1) · (R_i − mean)); optionally divided by the group's
    sample standard deviation (Bessel-corrected, as GRPO implementations do) plus eps."""
    if not isinstance(rewards, torch.Tensor) or rewards.ndim != 1:
        shape = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards)
        raise ValueError(f"rewards must be a 1-D tensor [B], got {shape}.")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}.")
    batch = rewards.shape[0]
    if batch == 0 or batch % group_size != 0:
        raise ValueError(f"group_size={group_size} does not divide the {batch} rewards.")
    if baseline not in BASELINES:
        raise ValueError(f"baseline={baseline!r} is not one of 'mean', 'loo'.")
    if baseline == "loo" and group_size < 2:
        raise ValueError("baseline='loo' needs group_size >= 2: no other response to average.")
    if std_normalize and group_size < 2:
        raise ValueError("std_normalize=True needs group_size >= 2: one reward has no std.")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}.")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards contains a non-finite value.")

    groups = rewards.view(-1, group_size)  # [B/n, n]
    adv = groups - groups.mean(dim=1, keepdim=True)  # Â = R − mean_group(R), eq. 7
    if baseline == "loo":
        adv = adv * (group_size / (group_size - 1))  # R_i − mean_{j≠i} R_j
    if std_normalize:
        adv = adv / (groups.std(dim=1, keepdim=True) + eps)
    return adv.reshape(batch)
