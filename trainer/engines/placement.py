"""What an engine's copy of the policy is placed on: a device and a dtype.

The factory builds one `Placement` from `engine.device` and the engine's dtype, and the
engines load their policy through it. The device stays the spec the config names
('auto', 'cpu', 'cuda:N') until `load` resolves it in the process that loads: a
`Placement` crosses to the other ranks of a torchrun job, and each rank resolves 'auto'
for itself (device.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.engines.config import Dtype
from trainer.engines.device import resolve_device
from trainer.models import load_policy


@dataclass(frozen=True)
class Placement:
    """`device` as resolve_device takes it; `dtype` of the policy's weights and matmuls."""

    device: str = "auto"
    dtype: Dtype = "fp32"

    def load(self, checkpoint_dir: str | Path) -> tuple[torch.device, nn.Module, Any]:
        """(the resolved device, the checkpoint's model on it in `dtype`, its tokenizer)."""
        device = resolve_device(self.device)
        model, tokenizer = load_policy(checkpoint_dir, self.dtype, device)
        return device, model, tokenizer
