"""The PyTorch training engine: the policy π_θ as a transformers model, and AdamW.

`TorchPolicy` is the backend: the transformers model's logits under a routing (Routing
Replay on demand: R2 passes e^π_old, R3 the inference engine's e^μ; MiniRL, arXiv
2512.01374) and its checkpoint layout. `TorchTrainingEngine` is that policy in the one
training engine of local.py: `forward_logprobs` gives, for every sampled token,
log π(y_t | prefix) aligned like `Rollout.logp`, optionally the full-vocabulary entropy at
the same prefixes and the routing e^π the MoE layers chose (scoring.py, shared with the
Megatron engine), and `step` applies one optimiser update with gradient clipping
(update.py, also shared).

It deliberately knows nothing of advantages, mini-batches or losses: the RL step
(`trainer/step.py`) calls `minirl.policy_loss` and hands the loss to `step`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path

import torch
from torch import Tensor

from trainer import routing
from trainer.engines.config import Autocast
from trainer.engines.device import autocast as autocast_to
from trainer.engines.local import LocalTrainingEngine
from trainer.engines.placement import Placement
from trainer.engines.update import UpdateSettings


class TorchPolicy:
    """π_θ as a transformers model on its `placement` (one device, the dtype of its
    parameters and compute), optionally under bf16 `autocast`; the module it trains is
    that model."""

    def __init__(
        self,
        checkpoint_dir: str | Path,
        placement: Placement = Placement(),
        autocast: Autocast = "none",
    ) -> None:
        self.device, self.model, self.tokenizer = placement.load(checkpoint_dir)
        self.dtype = placement.dtype
        self.autocast = autocast
        self.model.train()  # no dropout in these models; train mode for completeness
        self.module = self.model
        self.num_moe_layers = routing.num_moe_layers(self.model)

    @property
    def is_moe(self) -> bool:
        return self.num_moe_layers > 0

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (0 for a dense policy)."""
        if not self.is_moe:
            return 0
        cfg = self.model.config
        return int(getattr(cfg, "num_experts", None) or cfg.num_local_experts)

    def logits_and_routes(
        self, ids: Tensor, attn: Tensor, replay: Tensor | None, record: bool
    ) -> tuple[Tensor, Tensor | None]:
        """The transformers model's logits, through `replay`'s experts if given (MoE),
        recording the live routes if asked (record before replay: it keeps the live choice
        even under replay), under `autocast`."""
        with ExitStack() as stack:
            live = record and self.is_moe
            rec = stack.enter_context(routing.record(self.model)) if live else None
            if replay is not None:
                stack.enter_context(routing.replay(self.model, replay))
            stack.enter_context(autocast_to(self.device, self.autocast))
            logits = self.model(input_ids=ids, attention_mask=attn).logits
        return logits, None if rec is None else rec.indices()

    def autograd_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """Weights and AdamW state: plain tensors, so that it loads with
        `torch.load(..., weights_only=True)`."""
        return {"model": self.model.state_dict(), "optimizer": optimizer.state_dict()}

    def load_state_dict(self, state: dict, optimizer: torch.optim.Optimizer) -> None:
        self.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])


class TorchTrainingEngine(LocalTrainingEngine):
    """`TrainingEngine` on one process and one device: `TorchPolicy` and AdamW over all
    its parameters (`optim`); the other arguments are TorchPolicy's."""

    def __init__(
        self,
        checkpoint_dir: str | Path,
        optim: UpdateSettings,
        placement: Placement = Placement(),
        autocast: Autocast = "none",
    ) -> None:
        super().__init__(TorchPolicy(checkpoint_dir, placement, autocast), optim)
