"""Scoring a batch with the policy: log π, entropy and routes from the logits.

Every training engine that holds the whole policy in this process (the transformers
engine, the Megatron engine and each rank's part of it: local.py) scores a batch the same
way; a backend only says how it computes logits under a given routing.
Log-probabilities are float32 math even with bf16 parameters, and are computed only at
response positions (no [B, S, V] float copy).
"""

from __future__ import annotations

import torch

from minirl.entropy import token_entropy


def check_batch(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor
) -> None:
    """What every training engine's `forward_logprobs` refuses: masks of another shape
    than the ids, and a response at position 0 (no prefix to score it by)."""
    if input_ids.shape != attention_mask.shape or input_ids.shape != response_mask.shape:
        raise ValueError(
            f"shapes differ: input_ids {tuple(input_ids.shape)}, attention_mask "
            f"{tuple(attention_mask.shape)}, response_mask {tuple(response_mask.shape)}"
        )
    if bool((response_mask[:, 0] > 0).any()):
        raise ValueError("response_mask marks position 0, which has no prefix to score")


def response_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log π [B, S], entropy [B, S] | None) from [B, S, V] logits: the token at j is scored
    by the logits at j-1, in float32, at response positions only (0 elsewhere); the
    entropy is the full vocabulary's at the same prefixes, without gradient."""
    target = response_mask[:, 1:] > 0  # [B, S-1]
    pred = logits[:, :-1][target]  # [N, V]
    tok = input_ids[:, 1:][target]  # [N]
    pred32 = pred.float()
    tok_logp = pred32.gather(-1, tok[:, None]).squeeze(-1) - torch.logsumexp(pred32, dim=-1)
    logp = torch.zeros(input_ids.shape, dtype=torch.float32, device=logits.device)
    logp[:, 1:] = logp[:, 1:].masked_scatter(target, tok_logp)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(input_ids.shape, dtype=torch.float32, device=logits.device)
        entropy[:, 1:][target] = token_entropy(pred.detach()[None])[0]
    return logp, entropy
