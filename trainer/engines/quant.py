"""Simulated low-precision inference: round weights (and activations) through FP8 or FP4.

The inference engine's numerics are the thing the lab varies, so the rounding must be
real and identical in every engine: the PyTorch engine and the vLLM engine both call
`quantize_weights_` on the weights they load. Values are rounded to the format and
immediately dequantised ("fake quantisation"); the matmuls then run in the engine's
dtype. Formats and scales:

- fp8_e4m3 / fp8_e5m2: one float32 scale per output channel (absmax / format max), as in
  per-channel FP8 checkpoints; round-to-nearest-even through torch's float8 dtypes.
- fp4: MXFP4 (OCP Microscaling): e2m1 elements in blocks of 32 along the input dim,
  sharing a power-of-two scale 2^(floor(log2(absmax)) - 2); elements saturate at 6.
- activations fp8_e4m3: dynamic per-token scale on the input of every quantised
  projection (the fused expert module's internal down-projection input excepted).

Quantised: every nn.Linear except the output head, and the fused MoE expert tensors.
Kept in full precision, as FP8 serving does: embeddings, output head, norms, MoE router.
This module does not pack weights or run low-precision kernels.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from core.vocabulary import QUANT_BITS, WeightQuant
from trainer.engines.config import ActivationQuant, Dtype

_FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
DTYPE_BITS = {"fp32": 32, "bf16": 16}
_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # magnitudes of FP4 e2m1
MX_BLOCK = 32  # OCP MX block size
_E2M1_EMAX = 2  # largest exponent of e2m1 (6 = 1.5 * 2^2)


def round_fp8(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """x rounded through FP8 with one absmax scale per row of the last dim; float32 out."""
    dtype = _FP8[fmt]
    fmax = torch.finfo(dtype).max
    x = x.float()
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / fmax
    q = (x / scale).clamp(-fmax, fmax).to(dtype).float()
    return q * scale


def round_e2m1(y: torch.Tensor) -> torch.Tensor:
    """Round to the nearest FP4 e2m1 value, ties to even mantissa, saturating at ±6."""
    grid = _E2M1.to(y.device)
    mag = y.abs().clamp(max=6.0)
    idx = torch.bucketize(mag, (grid[1:] + grid[:-1]) / 2)  # ties go to the lower value
    # ties to even: the upper neighbour wins at 0.75, 1.75, 3.5 (its mantissa bit is 0)
    tie_up = torch.isin(mag, torch.tensor([0.75, 1.75, 3.5], device=y.device))
    idx = torch.where(tie_up, idx + 1, idx)
    return torch.sign(y) * grid[idx]


def round_mxfp4(x: torch.Tensor, block: int = MX_BLOCK) -> torch.Tensor:
    """x rounded through MXFP4 along the last dim (zero-padded to a whole block)."""
    x = x.float()
    n = x.shape[-1]
    pad = (-n) % block
    xb = nn.functional.pad(x, (0, pad)).unflatten(-1, (-1, block))  # [..., n/block, block]
    amax = xb.abs().amax(dim=-1, keepdim=True)
    exp = torch.floor(torch.log2(amax.clamp_min(torch.finfo(torch.float32).tiny))) - _E2M1_EMAX
    scale = torch.exp2(exp)
    q = round_e2m1(xb / scale) * scale
    return q.flatten(-2)[..., :n]


def rollout_bits(dtype: Dtype, fmt: WeightQuant) -> float:
    """Bits of a rollout weight: its rounding format's, else the inference dtype's."""
    return float(DTYPE_BITS[dtype] if fmt == "none" else QUANT_BITS[fmt])


def round_weight(w: torch.Tensor, fmt: WeightQuant) -> torch.Tensor:
    """w rounded through `fmt`, float32 (the caller casts to the engine's dtype)."""
    if fmt == "none":
        return w.float()
    if fmt in _FP8:
        return round_fp8(w, fmt)
    if fmt == "fp4":
        return round_mxfp4(w)
    raise ValueError(f"weight_quant={fmt!r}: allowed are none, fp8_e4m3, fp8_e5m2, fp4")


def quantized_weight_names(model: nn.Module) -> set[str]:
    """Parameter names that weight quantisation rounds (see the module docstring)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = set()
    for mod_name, module in model.named_modules():
        prefix = f"{mod_name}." if mod_name else ""
        if isinstance(module, nn.Linear) and module is not head:
            names.add(f"{prefix}weight")
        elif type(module).__name__.endswith("Experts"):
            names |= {f"{prefix}{p}" for p in ("gate_up_proj", "down_proj") if hasattr(module, p)}
    return names


@torch.no_grad()
def quantize_weights_(model: nn.Module, fmt: WeightQuant) -> int:
    """Round the quantisable weights of `model` in place; returns how many tensors."""
    if fmt == "none":
        return 0
    names = quantized_weight_names(model)
    params = dict(model.named_parameters())
    for name in names:
        p = params[name]
        p.copy_(round_weight(p, fmt).to(p.dtype))
    return len(names)


def _activation_modules(model: nn.Module) -> Iterator[nn.Module]:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for module in model.modules():
        is_linear = isinstance(module, nn.Linear) and module is not head
        if is_linear or type(module).__name__.endswith("Experts"):
            yield module


def add_activation_quant(model: nn.Module, fmt: ActivationQuant) -> list:
    """Round the input of every quantised projection through FP8 per token, with forward
    pre-hooks; returns their handles (remove them to undo)."""
    if fmt == "none":
        return []
    if fmt not in _FP8:
        raise ValueError(f"activation_quant={fmt!r}: allowed are none, fp8_e4m3")

    def pre_hook(_module, args):
        x = args[0]
        return (round_fp8(x, fmt).to(x.dtype), *args[1:])

    return [m.register_forward_pre_hook(pre_hook) for m in _activation_modules(model)]
