"""The PyTorch inference engine: μ on its own copy of the policy, with selectable numerics.

It loads the checkpoint in the configured dtype, rounds weights (and optionally
activations) through simulated FP8/FP4 (`quant.py`), and samples with a KV cache
(transformers' DynamicCache): one batched prefill of the left-padded prompts, then one
token per step for every row. For each sampled token it returns log μ computed from ITS
OWN logits, and for MoE the experts it routed through (prefill and decode), in the
`Rollout` layout of `base.py`.

Log-probabilities are those of the distribution actually sampled from — after
temperature, top-k and top-p (renormalised over what they keep) — the same quantity as
vLLM's `logprobs_mode="processed_logprobs"`. μ is that sampling distribution, so the IS
weight π/μ is exact, and a sampler that departs from π (temperature ≠ 1, top-p < 1)
shows up in the diagnostics as a training-inference mismatch (sampler mismatch). Greedy
decoding (temperature 0) has no density; it reports the unscaled log_softmax.

It does not train, compute rewards, or batch across calls (no continuous batching).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from trainer import routing
from trainer.engines import quant
from trainer.engines.base import Rollout, SamplingParams, WeightSyncError
from trainer.engines.config import EngineConfig
from trainer.models import load_policy

SYNC_PROBE_TOL = 1e-4  # max |Δ logit| accepted after a weight sync with exact numerics


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


class TorchInferenceEngine:
    """`InferenceEngine` on plain PyTorch; see the module docstring."""

    def __init__(self, checkpoint_dir: str | Path, config: EngineConfig) -> None:
        self.config = config
        self.model, self.tokenizer = load_policy(checkpoint_dir, config.inference_dtype)
        self.model.requires_grad_(False)
        self.eos_id = int(self.tokenizer.eos_token_id)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.num_moe_layers = routing.num_moe_layers(self.model)
        quant.quantize_weights_(self.model, config.weight_quant)
        self._act_hooks = quant.add_activation_quant(self.model, config.activation_quant)

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
        batch = len(rows)
        plen = torch.tensor([len(r) for r in rows])
        width = int(plen.max())
        # left-pad the prompts so every row's next token is predicted at the last column
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(batch, width, dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, width - len(r) :] = torch.tensor(r)
            mask[b, width - len(r) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)

        gen = torch.Generator().manual_seed(seed)
        tokens, logps = [], []
        done = torch.zeros(batch, dtype=torch.bool)
        lengths = torch.zeros(batch, dtype=torch.long)  # response tokens, EOS included
        cache = self._new_cache()
        recorder = routing.record(self.model) if self.num_moe_layers else None
        rec = recorder.__enter__() if recorder else None
        try:
            step_ids = ids
            for t in range(params.max_new_tokens):
                out = self.model(
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                )
                token, logp = sample_next(out.logits[:, -1].float(), params, gen)
                token = torch.where(done, self.pad_id, token)
                tokens.append(token)
                logps.append(torch.where(done, 0.0, logp))
                lengths += (~done).long()
                done |= token == self.eos_id
                if bool(done.all()) or t == params.max_new_tokens - 1:
                    break
                step_ids = token[:, None]
                mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], dim=1)
                positions = positions[:, -1:] + 1
        finally:
            if recorder:
                recorder.__exit__(None, None, None)
        truncated = ~done
        return self._rollout(rows, plen, width, tokens, logps, lengths, truncated, rec)

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _rollout(self, rows, plen, width, tokens, logps, lengths, truncated, rec) -> Rollout:
        """Lay prompts and responses out right-padded, prompt then response, per row."""
        batch = len(rows)
        sampled = torch.stack(tokens, dim=1)  # [B, T]
        sampled_logp = torch.stack(logps, dim=1)
        total = plen + lengths
        seq = int(total.max())
        input_ids = torch.full((batch, seq), self.pad_id, dtype=torch.long)
        response_mask = torch.zeros(batch, seq)
        logp = torch.zeros(batch, seq)
        routed = None
        if rec is not None:
            # recorded columns: [0, width) prefill (left-padded), then width + r for the
            # decode step that fed response token r
            got = rec.indices()
            routed = torch.full((batch, seq, *got.shape[2:]), -1, dtype=torch.long)
        for b, r in enumerate(rows):
            p, n = int(plen[b]), int(lengths[b])
            input_ids[b, :p] = torch.tensor(r)
            input_ids[b, p : p + n] = sampled[b, :n]
            response_mask[b, p : p + n] = 1.0
            logp[b, p : p + n] = sampled_logp[b, :n]
            if routed is not None:
                routed[b, :p] = got[b, width - p : width]
                fed = max(n - 1, 0)  # the last response token is never fed back
                routed[b, p : p + fed] = got[b, width : width + fed]
        attention_mask = (torch.arange(seq)[None, :] < total[:, None]).long()
        return Rollout(
            input_ids=input_ids,
            attention_mask=attention_mask,
            response_mask=response_mask,
            logp=logp,
            truncated=truncated,
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
                value = quant.round_weight(value, self.config.weight_quant)
            target.copy_(value.to(target.dtype))
        if self.config.exact_inference and next(model.parameters()).dtype == torch.float32:
            self._probe(model)

    def _probe(self, model: nn.Module) -> None:
        probe = torch.arange(3, 3 + 12).remainder(self.model.config.vocab_size)[None]
        mine = self.model(input_ids=probe).logits.float()
        theirs = model(input_ids=probe.to(next(model.parameters()).device)).logits.float()
        err = float((mine - theirs.cpu()).abs().max())
        if not err <= SYNC_PROBE_TOL:
            raise WeightSyncError(f"update_weights: engine differs from the model by {err:.3g}")

    def close(self) -> None:
        for h in self._act_hooks:
            h.remove()
        self._act_hooks = []
        self.model = None
        gc.collect()
