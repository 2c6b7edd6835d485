"""The only place that patches megatron-core: what it needs to run on a CPU-only torch.

Each patch changes behaviour only where the original would crash without CUDA; where
`torch.cuda.is_available()`, `apply()` installs nothing. Checked against megatron-core
0.16.1 (`apply()` refuses other versions on CPU); tests/test_megatron_cpu.py tests each.
1. `Router.gating`, `RotaryEmbedding.get_emb`, `DotProductAttention.forward` allocate on
   `torch.cuda.current_device()`: they run with it answering "cpu".
2. `CudaRNGStatesTracker.fork` needs CUDA RNG states: without CUDA the fork is a no-op
   (the CPU generator is used, as everywhere else; the models have no dropout).
3. The expert-parallel token gathers (`mappings._gather_along_first_dim`,
   `_reduce_scatter_along_first_dim`) allocate on the current device: as in 1.
4. `moe_utils.te_general_gemm` is undefined without Transformer Engine (a NameError in
   0.16.1): set to None, which the code's own `torch.mm` fallback tests for.
Not patched, avoided by the caller: the alltoall dispatcher creates a CUDA stream (use
"allgather" on CPU), and the default causal mask is allocated on CUDA (pass a mask).
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
