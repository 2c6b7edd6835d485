"""Weight sync from the transformers training model into an in-process vLLM engine.

Three steps, each a function, so that tests can run them apart:

1. `checkpoint_tensors`: the training model's weights under the names `save_pretrained`
   writes (transformers 5 keeps MoE experts fused as 3-D tensors, `experts.gate_up_proj`
   [E, 2I, H] and `experts.down_proj` [E, H, I]; the checkpoint and vLLM's loader use one
   tensor per expert). The conversion is transformers' own `revert_weight_conversion`, the
   code `save_pretrained` runs, so the names match the checkpoint vLLM loaded. Simulated
   weight quantisation (`quant.py`) is applied here, exactly as the PyTorch engine does.
2. `reload`: vLLM's in-place `reload_weights(weights_iterator=...)`, then
   `repack_cpu_moe_experts`: on CPU, vLLM 0.32 skips the expert-weight prepack
   (`cpu_prepack_moe_weight`) when weights are *updated* (`is_weight_update` in
   `UnquantizedFusedMoEMethod._setup_kernel`), so the experts would run on unpacked
   weights. We redo the prepack of `w13_weight`/`w2_weight` into the same storage.
3. `check_sync`: the engine's log-probabilities of a probe batch against the training
   model's (float32 reference). A failed check raises `WeightSyncError`.

This module does not sample and does not capture routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from trainer.engines import quant
from trainer.engines.config import WeightQuant

# Accepted engine-vs-training differences of log π on the probe tokens after a sync.
# fp32: the kernels differ only in summation order (measured ≈ 1e-6 max).
FP32_MAX_ABS_TOL = 1e-4
# bf16: rounding every matmul moves log π by ≈ 2e-3 mean on the probe (≈ 0.02-0.03 on a
# trained model's samples, ENGINES.md), and MoE routing flips make the max unbounded, so
# bf16 is checked on the mean. This catches wrong/missing/transposed tensors and unpacked
# experts, not a sync that silently skipped one small optimiser step (fp32 catches that).
BF16_MEAN_ABS_TOL = 5e-2


class WeightSyncError(RuntimeError):
    """After a weight sync the inference engine does not compute what the training
    model computes: the run must stop rather than drift silently."""


@dataclass(frozen=True)
class SyncReport:
    """What the last sync measured on the probe batch."""

    max_abs: float
    mean_abs: float
    seconds: float
    tol: float
    on: str  # "max" or "mean": which statistic `tol` bounds


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


def reload(worker, vllm_model: nn.Module, tensors: dict, repack: bool = True) -> None:
    """Load `tensors` (checkpoint names) into the in-process vLLM worker, in place.
    `repack=False` reproduces vLLM's raw behaviour (for the test that watches the bug)."""
    worker.reload_weights(weights_iterator=iter(tensors.items()))
    if repack:
        repack_cpu_moe_experts(vllm_model)


def probe_sequences(vocab_size: int, num: int = 8, length: int = 32, seed: int = 0) -> list:
    """Fixed pseudo-random token sequences (ids 3.. skip pad/bos/eos) that exercise every
    position embedding up to `length` and, in practice, every expert."""
    gen = torch.Generator().manual_seed(seed)
    low = 3 if vocab_size > 3 else 0
    return torch.randint(low, vocab_size, (num, length), generator=gen).tolist()


@torch.no_grad()
def reference_logprobs(
    model: nn.Module, sequences: Sequence[Sequence[int]], weight_quant: WeightQuant = "none"
) -> torch.Tensor:
    """[N, T-1] float32: log π(x_t | x_<t) for t >= 1 of equal-length sequences, from the
    training model with its weights rounded like the engine's (functional_call: the
    model itself is not modified)."""
    ids = torch.tensor(sequences, dtype=torch.long)
    device = next(model.parameters()).device
    rounded = rounded_params(model, weight_quant)
    logits = torch.func.functional_call(model, rounded, (ids.to(device),), strict=False).logits
    logp = torch.log_softmax(logits.float(), dim=-1)[:, :-1]
    return logp.gather(-1, ids[:, 1:, None].to(device)).squeeze(-1).cpu()


def check_sync(
    engine_logp: torch.Tensor, reference: torch.Tensor, dtype: str, seconds: float
) -> SyncReport:
    """Compare [N, T-1] log-probabilities; raise WeightSyncError outside the tolerance."""
    diff = (engine_logp.float() - reference.float()).abs()
    max_abs, mean_abs = float(diff.max()), float(diff.mean())
    if dtype == "fp32":
        report = SyncReport(max_abs, mean_abs, seconds, FP32_MAX_ABS_TOL, "max")
        ok = max_abs <= FP32_MAX_ABS_TOL
    else:
        report = SyncReport(max_abs, mean_abs, seconds, BF16_MEAN_ABS_TOL, "mean")
        ok = mean_abs <= BF16_MEAN_ABS_TOL
    if not ok:  # NaN fails too
        raise WeightSyncError(
            f"vLLM weight sync not verified: {report.on} |Δ log π| on the probe batch is "
            f"{max_abs if report.on == 'max' else mean_abs:.3g} > {report.tol:g} "
            f"(inference_dtype={dtype}; max {max_abs:.3g}, mean {mean_abs:.3g})"
        )
    return report
