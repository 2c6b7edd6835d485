"""The PyTorch training engine: the policy π_θ, its log-probabilities, and AdamW.

`forward_logprobs` gives, for every sampled token, log π(y_t | prefix) aligned like
`Rollout.logp`, optionally the full-vocabulary entropy at the same prefixes and the
routing e^π the MoE layers chose, with Routing Replay on demand (R2 passes e^π_old,
R3 passes the inference engine's e^μ; MiniRL, arXiv 2512.01374). `step` applies one
optimiser update with gradient clipping (update.py, shared with the Megatron engine).
Log-probabilities are float32 math even with bf16 parameters, and are computed only at
response positions (no [B, S, V] float copy).

It deliberately knows nothing of advantages, mini-batches or losses: the RL step
(`trainer/step.py`) calls `minirl.policy_loss` and hands the loss to `step`.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch

from minirl.entropy import token_entropy
from trainer import routing
from trainer.engines.config import EngineConfig, OptimConfig
from trainer.engines.device import autocast, resolve_device
from trainer.engines.update import PolicyUpdate, adamw
from trainer.models import load_policy


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


class TorchTrainingEngine(PolicyUpdate):
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

    def forward_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
        replay: torch.Tensor | None = None,
        record: bool = False,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
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
        input_ids, attention_mask, response_mask = (
            t.to(dev) for t in (input_ids, attention_mask, response_mask)
        )
        with ExitStack() as stack:
            # record before replay: it keeps the live choice even under replay
            rec = (
                stack.enter_context(routing.record(self.model)) if record and self.is_moe else None
            )
            if replay is not None:
                stack.enter_context(routing.replay(self.model, replay.to(dev)))
            stack.enter_context(autocast(dev, self.config.autocast))
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits

        logp, entropy = response_logprobs(logits, input_ids, response_mask, with_entropy)
        routed = None
        if rec is not None:
            routed = rec.indices().masked_fill((attention_mask == 0)[..., None, None], -1)
        return logp, entropy, routed

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


TrainingEngine = TorchTrainingEngine
"""The former name, kept until the bench scripts say TorchTrainingEngine."""
