"""The inference-engine interface and the rollout batch it returns.

Every inference engine (the PyTorch one, vLLM) returns the same `Rollout`, laid out the
way the training engine consumes it, so that the trainer never knows which engine ran.
This module holds data and a protocol only; it does not sample anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn


@dataclass(frozen=True)
class SamplingParams:
    """How responses are sampled. Temperature/top-p/top-k other than 1/1/0 make μ differ
    from π systematically (sampler mismatch), which the diagnostics then measure."""

    n: int = 8
    """Responses per prompt (the group size of the advantage baseline)."""
    max_new_tokens: int = 16
    """Response length cap; a response that hits it is counted as truncated."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""


@dataclass
class Rollout:
    """A batch of B = len(prompts) * n sampled sequences, prompt-major
    (rows i*n .. i*n+n-1 belong to prompt i), right-padded to length S.

    Alignment: `logp[b, j]` is log μ_old of token `input_ids[b, j]` given the prefix
    `input_ids[b, :j]`; `routing[b, j]` are the experts chosen while processing token
    `input_ids[b, j]` (the forward that predicts token j+1). So the last response token
    of a row has no routing (it was never fed back): it is -1 there, as on padding.
    """

    input_ids: torch.Tensor  # [B, S] long, prompt then response, right-padded with pad_id
    attention_mask: torch.Tensor  # [B, S] long, 1 on prompt and response tokens
    response_mask: torch.Tensor  # [B, S] float, 1 on sampled response tokens
    logp: torch.Tensor  # [B, S] float32, log μ_old of each sampled token, 0 elsewhere
    truncated: torch.Tensor  # [B] bool, response hit max_new_tokens without EOS
    routing: torch.Tensor | None = None  # [B, S, L, k] long expert ids, -1 where unknown

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])

    def response_lengths(self) -> torch.Tensor:
        return self.response_mask.sum(dim=1)


class WeightSyncError(RuntimeError):
    """After a weight sync the inference engine does not compute what the training
    model computes: the run must stop rather than drift silently."""


class InferenceEngine(Protocol):
    """Samples from μ_old and accepts new weights after every training step."""

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int
    ) -> Rollout:
        """Sample params.n responses per prompt (token-id lists, no padding). Seeded:
        the same prompts, params, seed and weights give the same rollout."""
        ...

    def update_weights(self, model: nn.Module) -> None:
        """Load the training model's current weights; raise WeightSyncError if the engine
        cannot verify that it now computes what the training model computes."""
        ...

    def close(self) -> None:
        """Free the engine's memory and threads."""
        ...
