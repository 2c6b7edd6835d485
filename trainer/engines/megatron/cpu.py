"""The only place that patches megatron-core: what it needs to run on a CPU-only torch.

megatron-core assumes a CUDA device in a few spots that a tiny MoE `GPTModel` (local
layer spec, allgather token dispatcher, one process or expert parallel) passes through.
Each patch below changes behaviour only where the original would crash without CUDA; on
a machine where `torch.cuda.is_available()`, `apply()` installs nothing and megatron
runs unmodified (megatron-core 0.19.2 ran the same model on an H100 with no patch). Checked against
megatron-core 0.16.1 (the newest release for Python 3.11); `apply()` refuses other
versions on CPU rather than patching code it was not checked against. Every patch is
tested (tests/test_megatron_cpu.py).

1. `Router.gating`, `RotaryEmbedding.get_emb`, `DotProductAttention.forward` move a CPU
   tensor to, or allocate on, `torch.cuda.current_device()` (the router weight, RoPE's
   inverse frequencies, the attention-score buffer from the global memory buffer). The
   patch runs them with `torch.cuda.current_device` answering "cpu".
2. `CudaRNGStatesTracker.fork` (attention dropout's RNG fork) needs CUDA RNG states that
   only `model_parallel_cuda_manual_seed` (CUDA-only) adds. Without CUDA the fork is a
   no-op: the CPU generator is used, as everywhere else (the models have no dropout).
3. `mappings._gather_along_first_dim` / `_reduce_scatter_along_first_dim` (only called
   with expert or tensor parallel > 1: the allgather dispatcher's token gathers,
   forward and backward) allocate their output on `torch.cuda.current_device()`: run
   with it answering "cpu" as in 1. With them, expert parallel 2 runs on 2 gloo
   processes (tests/test_megatron_ep.py).
4. `moe_utils.te_general_gemm` is referenced by the router's gating GEMM but defined
   only when Transformer Engine imports (0.16.1 bug: NameError without TE). Set to
   None, the value the code's own fallback (`torch.mm`) tests for.

Not patched, avoided by the caller: the alltoall token dispatcher creates a CUDA stream
(use `moe_token_dispatcher_type="allgather"` on CPU), and the default causal mask is
allocated with device="cuda" (pass an explicit `attention_mask`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

CHECKED_VERSIONS = ("0.16.1",)
_applied: list[str] = []


@contextlib.contextmanager
def cpu_is_current_device() -> Iterator[None]:
    """Inside: `torch.cuda.current_device()` returns the CPU device (patch 1)."""
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.current_device = original


def _on_cpu(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with cpu_is_current_device():
            return method(*args, **kwargs)

    wrapped.__minirl_cpu_patch__ = True  # type: ignore[attr-defined]
    return wrapped


@contextlib.contextmanager
def _no_fork(self: Any, name: str = "") -> Iterator[None]:
    """CudaRNGStatesTracker.fork without CUDA: nothing to fork (patch 2)."""
    yield


def megatron_version() -> str:
    from importlib.metadata import version

    return version("megatron-core")


def apply() -> list[str]:
    """Install the patches once per process (nothing where CUDA is available); returns
    the names of the patched attributes. Raises RuntimeError for an unchecked version."""
    if _applied or torch.cuda.is_available():
        return list(_applied)
    found = megatron_version()
    if found not in CHECKED_VERSIONS:
        raise RuntimeError(
            f"megatron-core {found} on CPU: the CPU patches were checked with "
            f"{', '.join(CHECKED_VERSIONS)} only; install megatron-core==0.16.1 or use a GPU"
        )
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.tensor_parallel import mappings
    from megatron.core.tensor_parallel.random import CudaRNGStatesTracker
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.moe import moe_utils
    from megatron.core.transformer.moe.router import Router

    for cls, name in (
        (Router, "gating"),
        (RotaryEmbedding, "get_emb"),
        (DotProductAttention, "forward"),
    ):
        setattr(cls, name, _on_cpu(getattr(cls, name)))
        _applied.append(f"{cls.__name__}.{name}")
    for name in ("_gather_along_first_dim", "_reduce_scatter_along_first_dim"):
        setattr(mappings, name, _on_cpu(getattr(mappings, name)))
        _applied.append(f"mappings.{name}")
    CudaRNGStatesTracker.fork = _no_fork  # type: ignore[method-assign]
    _applied.append("CudaRNGStatesTracker.fork")
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
        _applied.append("moe_utils.te_general_gemm")
    return list(_applied)
