"""Weight sync from the transformers training model into an in-process vLLM engine.

Three steps, each a function, so that tests can run them apart:

1. `checkpoint_tensors`: the training model's weights under the names `save_pretrained`
   writes (transformers' own `revert_weight_conversion` splits the fused 3-D MoE experts
   into one tensor per expert, as the checkpoint vLLM loaded has them), with the simulated
   weight quantisation (`quant.py`) the PyTorch engine applies.
2. `reload`: vLLM's in-place `reload_weights` through `LLM.collective_rpc` (in-process:
   tensors passed, not serialised), a reset of the prefix cache (blocks of the old
   weights), then `repack_cpu_moe_experts`: on CPU, vLLM 0.32 skips the expert-weight
   prepack when weights are *updated*, so we redo it into the same storage.
3. `check_sync`: the engine's log-probabilities of a probe batch against the training
   model's (float32 reference). A failed check raises `WeightSyncError`.

This module does not sample and does not capture routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from core.vocabulary import WeightQuant
from trainer.engines import quant
from trainer.engines.base import WeightSyncError

# Accepted engine-vs-training differences of log π on the probe tokens after a sync.
# fp32: the kernels differ only in summation order, far below this tolerance.
FP32_MAX_ABS_TOL = 1e-4
# bf16: the rounding error grows with the model's sharpness, and MoE routing flips make
# the max unbounded, and the mean too: on a sharp policy a handful of flipped tokens
# (|Δ| of 6-7 nats among a few hundred) move it past any bound that still catches a broken
# sync. So the bound is on the 90th percentile of |Δ| (a flip on up to a tenth of the
# tokens passes; a broken sync, e.g. unpacked MoE experts, moves most of them) and is
# calibrated on every sync by the same model run in bf16 by transformers:
# q90 |Δ| (vLLM bf16 vs fp32) <= max(floor, factor * q90 |Δ| (transformers bf16 vs fp32)).
# It cannot see a sync that skipped one small step (fp32 runs can).
BF16_Q90_ABS_FLOOR = 5e-3
BF16_NOISE_FACTOR = 5.0
BF16_QUANTILE = 0.9


@dataclass(frozen=True)
class SyncReport:
    """What the last sync measured on the probe batch."""

    max_abs: float
    mean_abs: float
    seconds: float
    tol: float
    on: str  # "max" or "q90": which statistic `tol` bounds
    q90_abs: float = 0.0


def rounded_params(model: nn.Module, weight_quant: WeightQuant) -> dict[str, torch.Tensor]:
    """Parameters that weight quantisation replaces, rounded (empty for "none")."""
    if weight_quant == "none":
        return {}
    params = dict(model.named_parameters())
    return {
        name: quant.round_weight(params[name].detach(), weight_quant).to(params[name].dtype)
        for name in quant.quantized_weight_names(model)
    }


def checkpoint_tensors(model: nn.Module, weight_quant: WeightQuant = "none") -> dict:
    """{checkpoint name: tensor} of the model's current weights (detached, no copy
    unless rounded or un-fused), in the layout `save_pretrained` would write."""
    from transformers.core_model_loading import revert_weight_conversion

    state = {name: t.detach() for name, t in model.state_dict().items()}
    state.update(rounded_params(model, weight_quant))
    return revert_weight_conversion(model, state)


def repack_cpu_moe_experts(vllm_model: nn.Module) -> int:
    """Redo vLLM's CPU prepack of every unquantized MoE layer's expert weights after an
    in-place reload (the vLLM 0.32 bug of the module docstring); returns how many layers.
    A no-op on other platforms and kernels (GPU, zentorch)."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    done = 0
    for module in vllm_model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if not isinstance(experts, CPUUnquantizedExperts) or experts._use_zentorch:
            continue
        with torch.no_grad():
            for name in ("w13_weight", "w2_weight"):
                weight = getattr(module, name)
                weight.copy_(ops.cpu_prepack_moe_weight(weight, experts.isa))
        done += 1
    return done


def reload(llm, vllm_model: nn.Module, tensors: dict, repack: bool = True) -> None:
    """Load `tensors` (checkpoint names) into the in-process `vllm.LLM`, in place, on any
    device (vLLM's loader copies them over). `repack=False` skips the CPU expert repack
    (GPU, or the test that watches vLLM's bug)."""
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors.items())})
    llm.reset_prefix_cache()
    if repack:
        repack_cpu_moe_experts(vllm_model)


def probe_sequences(vocab_size: int, num: int = 8, length: int = 32, seed: int = 0) -> list:
    """Fixed pseudo-random token sequences (ids 3.. skip pad/bos/eos) that exercise every
    position embedding up to `length` and, in practice, every expert."""
    gen = torch.Generator().manual_seed(seed)
    low = 3 if vocab_size > 3 else 0
    ids = torch.randint(low, vocab_size, (num, length), generator=gen, device=gen.device)
    return ids.tolist()  # plain ids: the same on every machine and default device


@torch.no_grad()
def reference_logprobs(
    model: nn.Module,
    sequences: Sequence[Sequence[int]],
    weight_quant: WeightQuant = "none",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """[N, T-1] float32: log π(x_t | x_<t) for t >= 1 of equal-length sequences, from the
    training model with its weights rounded like the engine's and, if `dtype` is given,
    every floating parameter and buffer cast to it (as `model.to(dtype)` would). Through
    functional_call: the model itself is not modified."""
    device = next(model.parameters()).device
    ids = torch.tensor(sequences, dtype=torch.long, device=device)
    swap = dict(rounded_params(model, weight_quant))
    if dtype is not None:
        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers()), **swap}
        swap = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    logits = torch.func.functional_call(model, swap, (ids,), strict=False).logits
    logp = torch.log_softmax(logits.float(), dim=-1)[:, :-1]
    return logp.gather(-1, ids[:, 1:, None]).squeeze(-1)


def _q90(diff: torch.Tensor) -> float:
    """The BF16_QUANTILE quantile of |Δ| (NaN when any is NaN, so that NaN fails)."""
    flat = diff.flatten().float()
    return float("nan") if bool(flat.isnan().any()) else float(flat.quantile(BF16_QUANTILE))


def check_sync(
    engine_logp: torch.Tensor,
    reference: torch.Tensor,
    dtype: str,
    seconds: float,
    reference_low: torch.Tensor | None = None,
) -> SyncReport:
    """Compare [N, T-1] log-probabilities with the float32 reference; raise
    WeightSyncError outside the tolerance. bf16 needs `reference_low`, the reference
    computed in bf16, to calibrate its bound (see BF16_NOISE_FACTOR)."""
    reference = reference.to(engine_logp.device)
    diff = (engine_logp.float() - reference.float()).abs()
    max_abs, mean_abs = float(diff.max()), float(diff.mean())
    q90_abs = _q90(diff)
    if dtype == "fp32":
        report = SyncReport(max_abs, mean_abs, seconds, FP32_MAX_ABS_TOL, "max", q90_abs)
        ok = max_abs <= FP32_MAX_ABS_TOL
    else:
        if reference_low is None:
            raise ValueError(f"check_sync: inference_dtype={dtype} needs reference_low")
        noise = _q90((reference_low.to(reference.device).float() - reference.float()).abs())
        tol = max(BF16_Q90_ABS_FLOOR, BF16_NOISE_FACTOR * noise)
        report = SyncReport(max_abs, mean_abs, seconds, tol, "q90", q90_abs)
        ok = q90_abs <= tol
    if not ok:  # NaN fails too
        raise WeightSyncError(
            f"vLLM weight sync not verified: {report.on} |Δ log π| on the probe batch is "
            f"{max_abs if report.on == 'max' else q90_abs:.3g} > {report.tol:.3g} "
            f"(inference_dtype={dtype}; max {max_abs:.3g}, mean {mean_abs:.3g})"
        )
    return report
