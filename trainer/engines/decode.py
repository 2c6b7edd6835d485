"""The KV-cache decode loop of a transformers causal LM, and the sampler it draws with.

One loop serves the PyTorch inference engine (μ's rollouts) and the held-out evaluation
of a bare model (the cold start has no engine yet): one batched prefill of the
left-padded prompts with explicit positions, then one token per step for every row,
until every row has emitted EOS or the cap is reached. Explicit positions make a row's
tokens independent of the other rows in its batch.

`sample_next` draws from the distribution μ actually samples from (temperature, then
top-k, then top-p, renormalised) and returns log μ of the drawn token, the same quantity
as vLLM's `logprobs_mode="processed_logprobs"`. Temperature 0 is greedy (argmax; the
unscaled log_softmax is reported, as greedy decoding has no density). This module lays
out no rollout and records no routing: its callers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainer.engines.base import SamplingParams
from trainer.engines.device import module_device


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask to -inf what top-k (0 = off) and then top-p (nucleus) exclude; [B, V]."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
        drop = cum - torch.softmax(ordered, dim=-1) >= top_p  # mass before this token
        drop[:, 0] = False  # always keep the most likely token
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token [B], log μ of it [B]) from float32 logits [B, V], μ being the distribution
    sampled from: softmax of the temperature-scaled, top-k/top-p-filtered logits."""
    if params.temperature == 0:
        token = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
    else:
        scaled = _filter_logits(logits / params.temperature, params.top_k, params.top_p)
        logp = torch.log_softmax(scaled, dim=-1)
        token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


@dataclass
class Decoded:
    """What `decode` sampled, per row b of its B rows, over the T steps it ran."""

    tokens: torch.Tensor  # [B, T] long, pad_id after the row's EOS
    logp: torch.Tensor  # [B, T] float32, log μ of each token, 0 after the EOS
    lengths: torch.Tensor  # [B] long, response tokens, EOS included
    done: torch.Tensor  # [B] bool, the row ended with EOS (else it hit the cap)
    width: int  # prompt columns of the left-padded prefill

    def responses(self) -> list[list[int]]:
        """Each row's tokens up to its EOS (kept) or the cap."""
        return [row[:n] for row, n in zip(self.tokens.tolist(), self.lengths.tolist(), strict=True)]


@torch.no_grad()
def decode(
    model: nn.Module,
    rows: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
    cache: Any = None,
) -> Decoded:
    """Sample up to params.max_new_tokens tokens after each prompt row (params.n is not
    used: the rows are given). `cache` is the KV cache to fill (None: the model's own).
    Runs on the model's device; `generator` must be on it too (torch.multinomial)."""
    dev = module_device(model)
    if generator.device != dev:
        raise ValueError(f"decode: generator on {generator.device}, model on {dev}")
    batch = len(rows)
    width = max(map(len, rows))
    ids = torch.full((batch, width), pad_id, dtype=torch.long, device=dev)
    mask = torch.zeros(batch, width, dtype=torch.long, device=dev)
    for b, r in enumerate(rows):
        ids[b, width - len(r) :] = torch.tensor(r, dtype=torch.long, device=dev)
        mask[b, width - len(r) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    tokens, logps = [], []
    done = torch.zeros(batch, dtype=torch.bool, device=dev)
    lengths = torch.zeros(batch, dtype=torch.long, device=dev)
    step_ids = ids
    for t in range(params.max_new_tokens):
        out = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        token, logp = sample_next(out.logits[:, -1].float(), params, generator)
        token = torch.where(done, pad_id, token)
        tokens.append(token)
        logps.append(torch.where(done, 0.0, logp))
        lengths += (~done).long()
        done |= token == eos_id
        if bool(done.all()) or t == params.max_new_tokens - 1:
            break
        step_ids = token[:, None]
        mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
        positions = positions[:, -1:] + 1
    return Decoded(torch.stack(tokens, 1), torch.stack(logps, 1), lengths, done, width)
