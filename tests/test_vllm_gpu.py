"""The GPU-only part of the vLLM engine (trainer/engines/vllm/gpu.py), checked on the CPU:
the engine arguments are vLLM's own (its EngineArgs takes them), and vLLM's
`CompletionOutput.routed_experts` lands in the `Rollout.routing` layout the training
engine replays. The GPU run itself is in tests/test_gpu.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from trainer.engines.vllm import gpu as vllm_gpu

vllm = pytest.importorskip("vllm")
from vllm.outputs import CompletionOutput  # noqa: E402


def _output(tokens: list[int], routed: np.ndarray | None) -> CompletionOutput:
    return CompletionOutput(0, "", tokens, None, None, routed_experts=routed)


def test_moe_engine_args_ask_vllm_for_routed_experts():
    kwargs, env = vllm_gpu.engine_args(0.3, is_moe=True)
    assert kwargs == {
        "gpu_memory_utilization": 0.3,
        "enable_return_routed_experts": True,
        "enable_prefix_caching": True,  # vLLM keeps cached blocks' routing only with it
    }
    assert env == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    args = vllm.EngineArgs(model="unused", **kwargs)  # every name is one of vLLM's
    fields = {f.name for f in dataclasses.fields(args)}
    assert kwargs.keys() <= fields and args.enable_return_routed_experts


def test_dense_engine_args_only_share_memory():
    kwargs, env = vllm_gpu.engine_args(0.4, is_moe=False)
    assert kwargs == {"gpu_memory_utilization": 0.4} and env == {}


def test_routed_experts_fill_the_fed_positions_of_each_row():
    """Row b: prompt p_b + response r_b tokens, vLLM returns p_b + r_b - 1 rows (the last
    sampled token is never fed); position j of the rollout holds row j."""
    layers, k, seq = 2, 3, 7
    lengths = [(3, 4), (2, 2)]  # (prompt, response): totals 7 and 4
    fed = torch.tensor([p + r - 1 for p, r in lengths])
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 8, (int(n), layers, k)).astype(np.int32) for n in fed]
    samples = [_output(list(range(r)), a) for (_, r), a in zip(lengths, arrays, strict=True)]
    routed = vllm_gpu.routed_experts(samples, fed, seq)
    assert routed.shape == (2, seq, layers, k) and routed.dtype == torch.long
    for b, n in enumerate(fed.tolist()):
        assert torch.equal(routed[b, :n], torch.from_numpy(arrays[b]).long())
        assert (routed[b, n:] == -1).all()


def test_routed_experts_longer_than_fed_are_cut():
    arr = np.arange(5 * 1 * 2).reshape(5, 1, 2)
    routed = vllm_gpu.routed_experts([_output([1, 2], arr)], torch.tensor([3]), 4)
    assert torch.equal(routed[0, :3], torch.from_numpy(arr[:3]).long())
    assert (routed[0, 3] == -1).all()


@pytest.mark.parametrize(
    "routed, match",
    [
        (None, "no routed experts"),
        (np.zeros((2, 1, 2)), r"row 0: shape \(2, 1, 2\), expected \[>= 3, layers, top_k\]"),
        (np.zeros((3, 2)), "row 0: shape"),
    ],
)
def test_missing_or_short_routing_is_an_error(routed, match):
    with pytest.raises(RuntimeError, match=match):
        vllm_gpu.routed_experts([_output([1, 2], routed)], torch.tensor([3]), 4)
