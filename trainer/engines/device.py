"""Where tensors live: `engine.device` resolved to a torch device, once per engine.

Everything that creates a tensor or a random generator takes its device from here or
from a tensor it already has, never from torch's default device: forcing CUDA as the
default device must not leave a CPU generator behind (torch.multinomial refuses one for
CUDA probabilities). This module does not move models; the engines do.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from core.errors import UserError

# Where tensors that cross processes as pickled Python objects live (rank 0's batch in a
# torchrun job, the rows gathered back): gloo's object collectives carry host memory.
HOST = torch.device("cpu")


def resolve_device(spec: str) -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' -> a torch device with an index on CUDA.

    auto is the current CUDA device when CUDA is available, else the CPU; asking for CUDA
    where there is none (a CPU torch build, no GPU visible, N too large) is a UserError.
    """
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UserError(f"engine.device: {spec!r}: allowed are auto, cpu, cuda, cuda:N") from None
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU"
        raise UserError(f"engine.device: {spec}, but CUDA is unavailable ({why}); use auto or cpu")
    index = torch.cuda.current_device() if device.index is None else device.index
    count = torch.cuda.device_count()
    if index >= count:
        raise UserError(f"engine.device: {spec}, but only {count} CUDA device(s) are visible")
    return torch.device("cuda", index)


def autocast(device: torch.device, dtype: str):
    """torch.autocast for `device` in `dtype` ('bf16'), or a disabled one for 'none'."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")


def module_device(module: nn.Module) -> torch.device:
    """Where `module` computes: its first parameter's or buffer's device (torch's default
    device for a module with neither, such as a test double)."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.get_default_device()
