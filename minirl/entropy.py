"""Full-vocabulary token entropy of the policy at the rollout's prefixes.

H_t = −Σ_v π(v | y_<t) log π(v | y_<t) over the whole vocabulary, not just the sampled
token: entropy collapse is the earliest sign the paper watches (arXiv 2512.01374, Fig. 1).
Positions are processed in chunks so that the softmax temporaries stay small.
This module computes no gradient (it is a diagnostic, not an entropy bonus) and draws no
histograms (the monitor bins the raw values).
"""

from __future__ import annotations

import torch

from minirl._checks import as_mask, check_finite, check_tokens

CHUNK_ELEMENTS = 1 << 24
"""Logits per chunk by default (64 MiB in float32): a full vocabulary of 150k tokens then
runs ~110 tokens at a time."""


@torch.no_grad()
def token_entropy(
    logits: torch.Tensor,  # [B, T, V]
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Entropy in nats [B, T], float32 or wider. -inf logits (filtered tokens) count 0.

    The B·T positions are processed `chunk_size` at a time (default: as many as fit in
    CHUNK_ELEMENTS logits), so the softmax temporaries stay small whatever B, T and V are.
    """
    check_tokens(logits, "logits", ndim=3)
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}.")
    vocab = logits.shape[-1]
    step = chunk_size or max(1, CHUNK_ELEMENTS // max(vocab, 1))
    dtype = torch.promote_types(logits.dtype, torch.float32)
    flat = logits.reshape(-1, vocab)  # [B·T, V], a view when contiguous
    out = torch.empty(flat.shape[0], dtype=dtype, device=logits.device)
    for start in range(0, flat.shape[0], step):
        z = flat[start : start + step].to(dtype)  # [c, V]
        logp = torch.log_softmax(z, dim=-1)
        p = torch.exp(logp)
        out[start : start + step] = -torch.where(p > 0, p * logp, 0.0).sum(dim=-1)
    return out.view(logits.shape[:2])


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
