"""The training engine of a policy held in this process: a backend's forward and the update.

`LocalTrainingEngine` is the `TrainingEngine` of one process (the transformers policy of
torch/training.py, or Megatron's of megatron/training.py) and the engine each rank runs
on its own part of a sharded policy (distributed/rank_zero.py). It is made of two parts:
the backend `Policy` says how its module computes logits under a given routing and how
its checkpoint is laid out; the `Update` (update.py) trains that module's parameters.
The scoring of log π, entropy and routes from the logits (scoring.py) is the same for
every backend, so one update reads top to bottom in this file and update.py.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from trainer.engines.scoring import check_batch, response_logprobs
from trainer.engines.update import Update, UpdateSettings


class Policy(Protocol):
    """What a training backend gives the engine."""

    tokenizer: Any
    device: torch.device
    module: nn.Module
    """The module the update trains."""
    is_moe: bool
    num_experts: int
    """Routed experts per MoE layer (0 for a dense policy)."""

    @property
    def model(self) -> nn.Module:
        """The whole policy as a transformers module (what the inference engine syncs)."""
        ...

    def logits_and_routes(
        self, ids: Tensor, attn: Tensor, replay: Tensor | None, record: bool
    ) -> tuple[Tensor, Tensor | None]:
        """([B, S, V] logits, the live routes [B, S, L, k] if `record`, else None), with the
        MoE layers routed through `replay` where it is not -1."""
        ...

    def autograd_context(self) -> AbstractContextManager[None]:
        """Entered around every backward pass."""
        ...

    def state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """Weights and optimiser state, loadable with weights_only=True."""
        ...

    def load_state_dict(self, state: dict, optimizer: torch.optim.Optimizer) -> None: ...


class LocalTrainingEngine:
    """`TrainingEngine` over a `Policy` whose `device` holds the whole batch."""

    def __init__(self, policy: Policy, optim: UpdateSettings) -> None:
        self.policy = policy
        self.update = Update(policy.module, optim, policy.autograd_context)
        self.optim = optim
        self.tokenizer = policy.tokenizer
        self.device: torch.device = policy.device
        self.is_moe: bool = policy.is_moe
        self.num_experts: int = policy.num_experts

    @property
    def model(self) -> nn.Module:
        return self.policy.model

    # ------------------------------------------------------------------ forward

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
        logits, routes = self.policy.logits_and_routes(ids, attn, replay, record)
        logp, entropy = response_logprobs(logits, ids, mask, with_entropy)
        if routes is not None:
            routes = routes.masked_fill((attn == 0)[..., None, None], -1)
        return logp, entropy, routes

    # ------------------------------------------------------------------ the update

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.update.optimizer

    @property
    def lr_scale(self) -> float:
        return self.update.lr_scale

    @property
    def lr(self) -> float:
        return self.update.lr

    def set_lr_scale(self, scale: float) -> None:
        self.update.set_lr_scale(scale)

    def step(self, loss: Tensor | None = None) -> dict[str, float]:
        return self.update.step(loss)

    def step_with_grad_cosine(
        self, loss: Tensor, reference: Tensor
    ) -> tuple[dict[str, float], float]:
        return self.update.step_with_grad_cosine(loss, reference)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """The backend's weights and AdamW state, and the lr scale (weights_only-loadable)."""
        return {**self.policy.state_dict(self.optimizer), "lr_scale": self.lr_scale}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state, self.optimizer)
        self.set_lr_scale(float(state["lr_scale"]))

    def save(self, path: str | Path) -> None:
        torch.save(self.state_dict(), Path(path))

    def load(self, path: str | Path) -> None:
        self.load_state_dict(torch.load(Path(path), weights_only=True, map_location=self.device))
