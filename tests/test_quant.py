"""Simulated FP8/FP4 rounding against formats enumerated from their bit layouts."""

import itertools

import numpy as np
import pytest
import torch

from trainer.engines import quant
from trainer.models import ModelConfig


def _fp8_values(exp_bits: int, man_bits: int, bias: int, fn: bool) -> tuple[np.ndarray, np.ndarray]:
    """All finite non-negative values of an FP8 format and their mantissa codes, from the
    bit layout: subnormals at exponent 0, e4m3fn has no inf (only 1111.111 is NaN)."""
    vals, mans = [], []
    for e, m in itertools.product(range(2**exp_bits), range(2**man_bits)):
        if e == 2**exp_bits - 1 and (not fn or m == 2**man_bits - 1):
            continue  # inf/NaN codes
        v = (
            m / 2**man_bits * 2.0 ** (1 - bias)
            if e == 0
            else (1 + m / 2**man_bits) * 2.0 ** (e - bias)
        )
        vals.append(v)
        mans.append(m)
    return np.array(vals), np.array(mans)


def _round_to_grid(y: np.ndarray, grid: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Nearest grid magnitude, ties to the even code, sign kept."""
    out = np.empty_like(y)
    for i, v in enumerate(np.abs(y)):
        d = np.abs(grid - v)
        best = np.flatnonzero(d == d.min())
        pick = best[codes[best] % 2 == 0][0] if len(best) > 1 else best[0]
        out[i] = np.sign(y[i]) * grid[pick]
    return out


@pytest.mark.parametrize(
    "fmt,layout", [("fp8_e4m3", (4, 3, 7, True)), ("fp8_e5m2", (5, 2, 15, False))]
)
def test_fp8_rounding_matches_the_enumerated_format(fmt, layout):
    grid, codes = _fp8_values(*layout)
    assert grid.max() == torch.finfo(quant._FP8[fmt]).max  # 448 / 57344 from the bits
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 40, generator=g) * 0.02
    w[0, 3] = 0.0
    w[1] *= 1e-3  # a row of tiny weights: the per-row scale keeps them representable
    got = quant.round_fp8(w, fmt)
    for row in range(w.shape[0]):
        x = w[row].numpy()
        scale = np.float32(np.abs(x).max()) / np.float32(grid.max())
        y = (x / scale).astype(np.float32).astype(np.float64)
        ref = (_round_to_grid(y, grid, codes).astype(np.float32) * scale).astype(np.float32)
        np.testing.assert_array_equal(got[row].numpy(), ref)
    assert got[0, 3] == 0
    # the row max is exactly representable: it survives the rounding unchanged
    assert torch.equal(got.abs().amax(1), w.abs().amax(1))


def test_mxfp4_rounding_matches_a_per_block_reference():
    grid = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    codes = np.arange(8)  # e2m1 mantissa bit = parity of the position in the grid
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, -5.0, 7.0]  # 7 saturates at 6
    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, 70, generator=g) * 0.05  # 70 = two blocks of 32 and a partial one
    w[0, : len(ties)] = torch.tensor(ties)
    got = quant.round_mxfp4(w).numpy()
    for row, start in itertools.product(range(3), range(0, 70, 32)):
        x = w[row, start : start + 32].double().numpy()
        scale = 2.0 ** (np.floor(np.log2(np.abs(x).max())) - 2)
        ref = _round_to_grid(np.clip(x / scale, -6, 6), grid, codes) * scale
        np.testing.assert_allclose(got[row, start : start + 32], ref, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(got[0, : len(ties)], [0, 1, 1, 2, 2, 4, 4, -1, -4, 6])


def test_which_weights_are_rounded():
    import transformers

    for arch, expect in (
        ("qwen3_moe", {"experts.gate_up_proj", "experts.down_proj", "q_proj.weight"}),
        ("qwen3", {"mlp.gate_proj.weight", "mlp.down_proj.weight", "o_proj.weight"}),
    ):
        cfg = ModelConfig(arch=arch).hf_config(99, 0, 1, 2)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        names = quant.quantized_weight_names(model)
        assert all(any(n.endswith(e) for n in names) for e in expect)
        kept = {n for n, _ in model.named_parameters()} - names
        assert all(
            ("norm" in n or "embed" in n or "lm_head" in n or "mlp.gate." in n) for n in kept
        )
        before = {n: p.clone() for n, p in model.named_parameters()}
        assert quant.quantize_weights_(model, "fp8_e5m2") == len(names)
        for n, p in model.named_parameters():
            assert torch.equal(p, before[n]) == (n not in names), n


def test_activation_quant_rounds_projection_inputs_and_is_removable():
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(ModelConfig().hf_config(99, 0, 1, 2))
    ids = torch.randint(3, 99, (2, 7))
    seen = []
    q_proj = model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        ref = model(ids).logits
        handles = quant.add_activation_quant(model, "fp8_e4m3")
        probe = q_proj.register_forward_pre_hook(lambda _m, a: seen.append(a[0]))
        out = model(ids).logits
        for h in [*handles, probe]:
            h.remove()
        again = model(ids).logits
    x = seen[0].reshape(-1, seen[0].shape[-1])
    assert torch.equal(quant.round_fp8(x, "fp8_e4m3"), x)  # already on the FP8 grid
    assert not torch.equal(out, ref) and torch.equal(again, ref)
    # e4m3 keeps 3 mantissa bits (relative rounding error <= 2^-4 per element)
    assert (out - ref).norm() < 0.1 * ref.norm()
