"""Full-vocabulary token entropy of the policy at the rollout's prefixes.

H_t = −Σ_v π(v | y_<t) log π(v | y_<t) over the whole vocabulary, not just the sampled
token: entropy collapse is the earliest sign the paper watches (arXiv 2512.01374, Fig. 1).
Rows are processed in chunks so that the [chunk, T, V] softmax temporaries stay small.
This module computes no gradient (it is a diagnostic, not an entropy bonus) and draws no
histograms (the monitor bins the raw values).
"""

from __future__ import annotations

import torch

from minirl._checks import as_mask, check_finite, check_tokens


@torch.no_grad()
def token_entropy(
    logits: torch.Tensor,  # [B, T, V]
    chunk_size: int = 8,
) -> torch.Tensor:
    """Entropy in nats [B, T], float32 or wider. -inf logits (filtered tokens) count 0."""
    check_tokens(logits, "logits", ndim=3)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}.")
    dtype = torch.promote_types(logits.dtype, torch.float32)
    out = torch.empty(logits.shape[:2], dtype=dtype, device=logits.device)
    for start in range(0, logits.shape[0], chunk_size):
        z = logits[start : start + chunk_size].to(dtype)  # [c, T, V]
        logp = torch.log_softmax(z, dim=-1)
        p = torch.exp(logp)
        out[start : start + chunk_size] = -torch.where(p > 0, p * logp, 0.0).sum(dim=-1)
    return out


@torch.no_grad()
def entropy_metrics(
    entropy: torch.Tensor,  # [B, T] from token_entropy
    mask: torch.Tensor,  # [B, T] 1 on response tokens
) -> dict[str, float]:
    """{"policy/entropy": mean entropy over response tokens}."""
    check_tokens(entropy, "entropy")
    mask = as_mask(mask, entropy.shape)
    check_finite(entropy, mask, "entropy")
    return {"policy/entropy": float(entropy.to(torch.float64)[mask].mean())}
