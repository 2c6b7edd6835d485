"""The PyTorch training engine: the policy π_θ, its log-probabilities, and AdamW.

`forward_logprobs` (scoring.py, shared with the Megatron engine) gives, for every sampled
token, log π(y_t | prefix) aligned like `Rollout.logp`, optionally the full-vocabulary
entropy at the same prefixes and the routing e^π the MoE layers chose, with Routing
Replay on demand (R2 passes e^π_old, R3 passes the inference engine's e^μ; MiniRL, arXiv
2512.01374); this engine supplies the transformers model's logits under that routing.
`step` applies one optimiser update with gradient clipping (update.py, also shared).

It deliberately knows nothing of advantages, mini-batches or losses: the RL step
(`trainer/step.py`) calls `minirl.policy_loss` and hands the loss to `step`.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch
from torch import Tensor

from trainer import routing
from trainer.engines.config import EngineConfig, OptimConfig
from trainer.engines.device import autocast, resolve_device
from trainer.engines.scoring import LocalScorer
from trainer.engines.update import adamw
from trainer.models import load_policy


class TorchTrainingEngine(LocalScorer):
    """`TrainingEngine` on one process and one device (`engine.device`): π_θ in
    `train_dtype` (optionally under bf16 autocast), AdamW over all its parameters,
    gradient clipping."""

    def __init__(
        self, checkpoint_dir: str | Path, config: EngineConfig, optim: OptimConfig
    ) -> None:
        self.config, self.optim = config, optim
        self.device = resolve_device(config.device)
        self.model, self.tokenizer = load_policy(checkpoint_dir, config.train_dtype, self.device)
        self.model.train()  # no dropout in these models; train mode for completeness
        self.num_moe_layers = routing.num_moe_layers(self.model)
        self.optimizer = adamw(self.model.parameters(), optim)
        self.lr_scale = 1.0

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

    # ------------------------------------------------------------------ forward

    def logits_and_routes(
        self, ids: Tensor, attn: Tensor, replay: Tensor | None, record: bool
    ) -> tuple[Tensor, Tensor | None]:
        """The transformers model's logits, through `replay`'s experts if given (MoE),
        recording the live routes if asked (record before replay: it keeps the live choice
        even under replay), under the configured autocast."""
        with ExitStack() as stack:
            live = record and self.is_moe
            rec = stack.enter_context(routing.record(self.model)) if live else None
            if replay is not None:
                stack.enter_context(routing.replay(self.model, replay))
            stack.enter_context(autocast(self.device, self.config.autocast))
            logits = self.model(input_ids=ids, attention_mask=attn).logits
        return logits, None if rec is None else rec.indices()

    # ------------------------------------------------------------------ optimiser

    def trained_module(self) -> torch.nn.Module:
        return self.model

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Weights, AdamW state and lr scale: plain tensors and numbers, so that it loads
        with `torch.load(..., weights_only=True)`."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scale": self.lr_scale,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.set_lr_scale(float(state["lr_scale"]))
