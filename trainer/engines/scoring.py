"""Scoring a batch with the policy: log π, entropy and routes from the logits.

Every training engine that holds the whole policy in this process (the transformers
engine, the Megatron engine and each rank's part of it) scores a batch the same way; a
backend only says how it computes logits under a given routing (`logits_and_routes`).
Log-probabilities are float32 math even with bf16 parameters, and are computed only at
response positions (no [B, S, V] float copy).
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirl.entropy import token_entropy
from trainer.engines.update import PolicyUpdate


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


class LocalScorer(PolicyUpdate):
    """`TrainingEngine.forward_logprobs` for an engine whose `device` holds the whole batch;
    subclasses give `logits_and_routes`."""

    device: torch.device
    is_moe: bool

    def logits_and_routes(
        self, ids: Tensor, attn: Tensor, replay: Tensor | None, record: bool
    ) -> tuple[Tensor, Tensor | None]:
        """([B, S, V] logits, the live routes [B, S, L, k] if `record`, else None), with the
        MoE layers routed through `replay` where it is not -1."""
        raise NotImplementedError

    def forward_logprobs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        response_mask: Tensor,
        replay: Tensor | None = None,
        record: bool = False,
        with_entropy: bool = False,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """(logp [B, S], entropy [B, S] | None, routing [B, S, L, k] | None).

        logp[b, j] = log π(input_ids[b, j] | input_ids[b, :j]) at response positions
        (response_mask > 0), 0 elsewhere; it carries the gradient if grad is enabled.
        entropy[b, j] is the full-vocabulary entropy of π at that same prefix (no grad).
        replay: routing indices [B, S, L, k] to route through (-1 = live top-k).
        record: return the live routing, -1 on padding (MoE only, else None).
        Inputs on another device are moved to the engine's; outputs are on the engine's.
        """
        check_batch(input_ids, attention_mask, response_mask)
        if replay is not None and not self.is_moe:
            raise ValueError("routing replay on a dense model")
        dev = self.device
        ids, attn, mask = (t.to(dev) for t in (input_ids, attention_mask, response_mask))
        replay = None if replay is None else replay.to(dev)
        logits, routes = self.logits_and_routes(ids, attn, replay, record)
        logp, entropy = response_logprobs(logits, ids, mask, with_entropy)
        if routes is not None:
            routes = routes.masked_fill((attn == 0)[..., None, None], -1)
        return logp, entropy, routes
