"""Tiny local policies: `ModelConfig`, the checkpoint builder and the loader."""

from trainer.models.build import build_tiny_checkpoint, load_policy, resolve_dtype
from trainer.models.config import ModelConfig

__all__ = ["ModelConfig", "build_tiny_checkpoint", "load_policy", "resolve_dtype"]
