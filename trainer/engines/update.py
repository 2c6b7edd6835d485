"""The update every training engine makes, written once: AdamW over the trained
parameters, gradient clipping, an update skipped on a non-finite gradient norm, and the
lr scale remediation sets.

The transformers engine (torch/training.py, and its FSDP2 shards) and the Megatron engine
(megatron/training.py) differ in the module they train and in the context Megatron needs around
autograd; everything else about an update is the same, so that the engines' runs are
comparable step for step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from torch import nn

from minirl.sequence import grad_cosine
from trainer.engines.config import OptimConfig


def adamw(params: Iterable[nn.Parameter], optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW as `optim` configures it."""
    return torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=(optim.beta1, optim.beta2),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
    )


class PolicyUpdate:
    """The optimiser half of a `TrainingEngine`. An engine sets `optim`, `optimizer`
    (`adamw(...)`), `lr_scale` and `device`, and says which module trains."""

    optim: OptimConfig
    optimizer: torch.optim.Optimizer
    lr_scale: float
    device: torch.device

    def trained_module(self) -> nn.Module:
        """The module whose parameters the optimiser updates."""
        raise NotImplementedError

    def autograd_context(self) -> AbstractContextManager[None]:
        """Entered around every backward pass (Megatron needs its parallel state)."""
        return nullcontext()

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
        params = [p for p in self.trained_module().parameters() if p.requires_grad]
        with self.autograd_context():
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
            with self.autograd_context():
                loss.backward()
        return self.apply_gradients()

    def clip_gradients(self) -> float:
        """Clip the accumulated gradients by their global norm; return the norm. Under
        FSDP2 the norm is a DTensor over every rank's shards: its full value is the same
        on all ranks, so all skip or step together."""
        params = [p for p in self.trained_module().parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.optim.grad_clip if self.optim.grad_clip > 0 else math.inf
        total = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(total.full_tensor() if hasattr(total, "full_tensor") else total)

    def apply_gradients(self) -> dict[str, float]:
        """Clip the accumulated gradients (`clip_gradients`), update unless their norm is
        not finite, zero them."""
        norm = self.clip_gradients()
        if math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"optim/grad_norm": norm, "optim/lr": self.lr}

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        torch.save(self.state_dict(), Path(path))

    def load(self, path: str | Path) -> None:
        self.load_state_dict(torch.load(Path(path), weights_only=True, map_location=self.device))
