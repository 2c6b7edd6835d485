"""The two engine interfaces, and the rollout batch that passes between them.

`InferenceEngine` samples μ_old; `TrainingEngine` holds π_θ and its optimiser. The RL
step (trainer/step.py) and the loop (trainer/run.py) see only these two protocols, so a
new backend (a GPU vLLM path, a sharded FSDP2 or Megatron training engine) implements
one of them and touches neither. Every inference engine returns the same `Rollout`, laid
out the way a training engine consumes it. This module holds data and protocols only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from core.vocabulary import WeightQuant


@dataclass(frozen=True)
class SamplingParams:
    """How responses are sampled. Temperature/top-p/top-k other than 1/1/0 make μ differ
    from π systematically (sampler mismatch), which the diagnostics then measure."""

    n: int = 8
    """Responses per prompt (the group size of the advantage baseline)."""
    max_new_tokens: int = 16
    """Response length cap; a response that hits it is counted as truncated."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens with this probability mass."""
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
    An engine returns it on a device of its choosing; the RL step moves it to the
    training engine's (`to`).
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

    def to(self, device: torch.device) -> Rollout:
        """The same rollout on `device` (itself if it is there already)."""
        if self.input_ids.device == device:
            return self
        tensors = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return Rollout(**{k: None if t is None else t.to(device) for k, t in tensors.items()})


class WeightSyncError(RuntimeError):
    """After a weight sync the inference engine does not compute what the training
    model computes: the run must stop rather than drift silently."""


class InferenceEngine(Protocol):
    """Samples from μ_old and accepts new weights after every training step."""

    weight_quant: WeightQuant
    """How it rounds the weights it is given; the loop sets it when the rollout
    precision moves (trainer/incidents.py), then syncs the weights again."""

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


class TrainingEngine(Protocol):
    """π_θ and its optimiser, as the RL step and the loop use them.

    A sharded engine keeps its shards to itself: it returns whole [B, S] tensors from
    `forward_logprobs`, reduces the gradient norm and the cosine over all ranks, and
    gathers `model` and `state_dict` (on the rank that syncs and checkpoints)."""

    tokenizer: Any
    device: torch.device
    """Where `forward_logprobs` wants its inputs (and returns its outputs); the RL step
    moves each rollout there (engine.device, resolved)."""
    model: nn.Module
    """The whole policy as one transformers module: the inference engine loads its
    weights (`InferenceEngine.update_weights`) and π's own evaluation samples it."""

    @property
    def is_moe(self) -> bool: ...

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (0 for a dense policy)."""
        ...

    def forward_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
        replay: torch.Tensor | None = None,
        record: bool = False,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(log π [B, S] at response positions, entropy [B, S] | None, routing
        [B, S, L, k] | None), aligned like `Rollout.logp`; `replay` routes the MoE layers
        through given experts (R2/R3), `record` returns the live routing."""
        ...

    def step(self, loss: torch.Tensor | None = None) -> dict[str, float]:
        """Backward `loss`, clip, update, zero the gradients; {optim/grad_norm, optim/lr}.
        A non-finite gradient norm skips the update."""
        ...

    def step_with_grad_cosine(
        self, loss: torch.Tensor, reference: torch.Tensor
    ) -> tuple[dict[str, float], float]:
        """`step(loss)`, and the cosine between ∇loss and ∇reference (NaN when the
        reference is not finite): the approx/grad_cosine probe."""
        ...

    def set_lr_scale(self, scale: float) -> None:
        """lr = the configured lr * scale from now on."""
        ...

    def state_dict(self) -> dict:
        """Weights, optimiser state and lr scale, loadable with weights_only=True."""
        ...

    def load_state_dict(self, state: dict) -> None: ...
