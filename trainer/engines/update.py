"""The update every training engine makes, written once: AdamW over the trained
parameters, gradient clipping, an update skipped on a non-finite gradient norm, and the
lr scale remediation sets.

Every training engine owns one `Update` over the module it trains (the transformers
model, Megatron's GPTModel, or one rank's shard of either), so that the engines' runs
are comparable step for step. What differs between them is given to it: the context
Megatron needs around autograd, and (Megatron's expert parallel) a clip that sums the
gradient norm over the ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from minirl.sequence import grad_cosine


@dataclass(frozen=True)
class UpdateSettings:
    """AdamW's hyperparameters and the gradient clip of an `Update`."""

    lr: float = 3e-4
    """Base learning rate (the lr scale multiplies it)."""
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    """Max global L2 norm of the gradient; 0 disables clipping."""


def adamw(params: Iterable[nn.Parameter], settings: UpdateSettings) -> torch.optim.AdamW:
    """AdamW with `settings`' hyperparameters."""
    return torch.optim.AdamW(
        params,
        lr=settings.lr,
        betas=settings.betas,
        eps=settings.eps,
        weight_decay=settings.weight_decay,
    )


class Update:
    """AdamW over `module`'s parameters: one step per loss, clipped, skipped when the
    gradient norm is not finite, at `optim.lr` times `lr_scale`."""

    def __init__(
        self,
        module: nn.Module,
        optim: UpdateSettings,
        context: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        self.module, self.optim = module, optim
        self.optimizer = adamw(module.parameters(), optim)
        self.lr_scale = 1.0
        self.context = context  # entered around every backward pass
        # clips the accumulated gradients and returns their norm; an engine whose norm is
        # a sum over ranks replaces it
        self.clip: Callable[[], float] = self.clip_gradients

    def set_lr_scale(self, scale: float) -> None:
        """lr = base lr * scale for the following steps (remediation lowers it)."""
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"lr scale {scale}: must be a positive finite number")
        self.lr_scale = float(scale)
        for group in self.optimizer.param_groups:
            group["lr"] = self.optim.lr * self.lr_scale

    @property
    def lr(self) -> float:
        return self.optim.lr * self.lr_scale

    def step_with_grad_cosine(
        self, loss: torch.Tensor, reference: torch.Tensor
    ) -> tuple[dict[str, float], float]:
        """`step(loss)`, and the cosine between ∇loss and ∇reference (NaN when either is
        not finite: `step` then skips the update). Two extra backward passes: a periodic
        probe."""
        params = [p for p in self.module.parameters() if p.requires_grad]
        with self.context():
            g_loss = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
            g_ref = torch.autograd.grad(reference, params, allow_unused=True)
        finite = all(g is None or bool(torch.isfinite(g).all()) for g in (*g_loss, *g_ref))
        cosine = grad_cosine(list(g_loss), list(g_ref)) if finite else math.nan
        for p, g in zip(params, g_loss, strict=True):
            p.grad = g
        return self.step(None), cosine

    def step(self, loss: torch.Tensor | None = None) -> dict[str, float]:
        """Backward `loss` (if given) onto the accumulated gradients, clip, update, zero.

        A non-finite gradient norm skips the update (the weights stay as they were) and
        is reported as such, so one bad batch cannot poison the policy silently.
        """
        if loss is not None:
            with self.context():
                loss.backward()
        return self.apply_gradients()

    def clip_gradients(self) -> float:
        """Clip the accumulated gradients by their global norm; return the norm. Under
        FSDP2 the norm is a DTensor over every rank's shards: its full value is the same
        on all ranks, so all skip or step together."""
        params = [p for p in self.module.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.optim.grad_clip if self.optim.grad_clip > 0 else math.inf
        total = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(total.full_tensor() if hasattr(total, "full_tensor") else total)

    def apply_gradients(self) -> dict[str, float]:
        """Clip the accumulated gradients (`clip`), update unless their norm is not
        finite, zero them."""
        norm = self.clip()
        if math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"optim/grad_norm": norm, "optim/lr": self.lr}
