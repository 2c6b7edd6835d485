"""The PyTorch inference engine: μ on its own copy of the policy, with selectable numerics.

It loads the checkpoint in its `dtype`, rounds weights (and optionally
activations) through simulated FP8/FP4 (`quant.py`), and samples with the KV-cache loop
of `decode.py` (transformers' DynamicCache): one batched prefill of the left-padded
prompts, then one token per step for every row. For each sampled token it returns log μ
computed from ITS OWN logits, and for MoE the experts it routed through (prefill and
decode), in the `Rollout` layout of `base.py`.

Log-probabilities are those of the distribution actually sampled from (after
temperature, top-k and top-p, renormalised): μ is that distribution, so the IS weight
π/μ is exact and a sampler that departs from π shows as sampler mismatch. Everything
lives on `engine.device`. It does not train, compute rewards, or batch across calls.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn

from core.vocabulary import WeightQuant
from trainer import routing
from trainer.engines import quant
from trainer.engines.base import Rollout, SamplingParams, WeightSyncError
from trainer.engines.config import ActivationQuant
from trainer.engines.decode import Decoded, decode
from trainer.engines.placement import Placement

SYNC_PROBE_TOL = 1e-4  # max |Δ logit| accepted after a weight sync with exact numerics


class TorchInferenceEngine:
    """`InferenceEngine` on plain PyTorch; see the module docstring."""

    def __init__(
        self,
        checkpoint_dir: str | Path,
        placement: Placement = Placement(dtype="bf16"),
        *,
        weight_quant: WeightQuant = "none",
        activation_quant: ActivationQuant = "none",
    ) -> None:
        """Weights (and activations) rounded through the given simulated formats."""
        self.device, self.model, self.tokenizer = placement.load(checkpoint_dir)
        self.dtype = placement.dtype
        self.weight_quant = weight_quant
        self.activation_quant = activation_quant
        self.model.requires_grad_(False)
        self.eos_id = int(self.tokenizer.eos_token_id)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.num_moe_layers = routing.num_moe_layers(self.model)
        quant.quantize_weights_(self.model, weight_quant)
        self._act_hooks = quant.add_activation_quant(self.model, activation_quant)

    @property
    def exact(self) -> bool:
        """Numerics equal to an fp32 training engine's (up to kernel order)."""
        return (
            self.dtype == "fp32" and self.weight_quant == "none" and self.activation_quant == "none"
        )

    # ------------------------------------------------------------------ sampling

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int
    ) -> Rollout:
        """Sample params.n responses per prompt; rows are prompt-major (see Rollout)."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("generate: every prompt needs at least one token")
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError(f"generate: n={params.n}, max_new_tokens={params.max_new_tokens}")
        if params.temperature < 0 or not 0 < params.top_p <= 1 or params.top_k < 0:
            raise ValueError(
                f"generate: temperature={params.temperature} (>= 0, 0 = greedy), "
                f"top_p={params.top_p} (in (0, 1]), top_k={params.top_k} (>= 0)"
            )
        rows = [list(map(int, p)) for p in prompts for _ in range(params.n)]
        gen = torch.Generator(device=self.device).manual_seed(seed)
        recording = routing.record(self.model) if self.num_moe_layers else nullcontext()
        with recording as rec:
            out = decode(
                self.model,
                rows,
                params,
                eos_id=self.eos_id,
                pad_id=self.pad_id,
                generator=gen,
                cache=self._new_cache(),
            )
        return self._rollout(rows, out, rec)

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _rollout(self, rows: list[list[int]], out: Decoded, rec) -> Rollout:
        """Lay prompts and responses out right-padded, prompt then response, per row."""
        batch, width, lengths = len(rows), out.width, out.lengths
        sampled, sampled_logp = out.tokens, out.logp  # [B, T]
        dev = sampled.device
        plen = torch.tensor([len(r) for r in rows], device=dev)
        total = plen + lengths
        seq = int(total.max())
        input_ids = torch.full((batch, seq), self.pad_id, dtype=torch.long, device=dev)
        response_mask = torch.zeros(batch, seq, device=dev)
        logp = torch.zeros(batch, seq, device=dev)
        routed = None
        if rec is not None:
            # recorded columns: [0, width) prefill (left-padded), then width + r for the
            # decode step that fed response token r
            got = rec.indices()
            routed = torch.full((batch, seq, *got.shape[2:]), -1, dtype=torch.long, device=dev)
        for b, (r, p, n) in enumerate(zip(rows, plen.tolist(), lengths.tolist(), strict=True)):
            input_ids[b, :p] = torch.tensor(r, device=dev)
            input_ids[b, p : p + n] = sampled[b, :n]
            response_mask[b, p : p + n] = 1.0
            logp[b, p : p + n] = sampled_logp[b, :n]
            if routed is not None:
                routed[b, :p] = got[b, width - p : width]
                fed = max(n - 1, 0)  # the last response token is never fed back
                routed[b, p : p + fed] = got[b, width : width + fed]
        attention_mask = (torch.arange(seq, device=dev)[None, :] < total[:, None]).long()
        return Rollout(
            input_ids=input_ids,
            attention_mask=attention_mask,
            response_mask=response_mask,
            logp=logp,
            truncated=~out.done,
            routing=routed,
        )

    # ------------------------------------------------------------------ weight sync

    @torch.no_grad()
    def update_weights(self, model: nn.Module) -> None:
        """Copy the training model's weights in, cast and re-rounded like at load time.
        Raises if a tensor is missing, extra or misshapen, or (exact numerics only) if a
        probe forward then differs from the training model."""
        src = model.state_dict()
        dst = self.model.state_dict()
        if src.keys() != dst.keys():
            missing, extra = dst.keys() - src.keys(), src.keys() - dst.keys()
            raise ValueError(f"update_weights: missing {sorted(missing)}, extra {sorted(extra)}")
        rounded = quant.quantized_weight_names(self.model)
        for name, target in dst.items():
            value = src[name]
            if value.shape != target.shape:
                raise ValueError(f"update_weights: {name} has shape {tuple(value.shape)}")
            if name in rounded:
                value = quant.round_weight(value, self.weight_quant)
            target.copy_(value.to(target.dtype))
        if self.exact and next(model.parameters()).dtype == torch.float32:
            self._probe(model)

    def _probe(self, model: nn.Module) -> None:
        probe = torch.arange(3, 3 + 12, device=self.device)
        probe = probe.remainder(self.model.config.vocab_size)[None]
        mine = self.model(input_ids=probe).logits.float()
        theirs = model(input_ids=probe.to(next(model.parameters()).device)).logits.float()
        err = float((mine - theirs.to(self.device)).abs().max())
        if not err <= SYNC_PROBE_TOL:
            raise WeightSyncError(f"update_weights: engine differs from the model by {err:.3g}")

    def close(self) -> None:
        for h in self._act_hooks:
            h.remove()
        self._act_hooks = []
        self.model = None
        gc.collect()
