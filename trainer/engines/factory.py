"""The one place where `EngineConfig.inference` picks an inference backend.

Imports each backend lazily: choosing the PyTorch engine never imports vLLM.
"""

from __future__ import annotations

from pathlib import Path

from trainer.engines.base import InferenceEngine
from trainer.engines.config import EngineConfig


def make_inference_engine(checkpoint_dir: str | Path, config: EngineConfig) -> InferenceEngine:
    """The configured inference engine (μ) on `checkpoint_dir`."""
    if config.inference == "torch":
        from trainer.engines.torch_engine import TorchInferenceEngine

        return TorchInferenceEngine(checkpoint_dir, config)
    if config.inference == "vllm":
        from trainer.engines.vllm_engine import VLLMEngine

        return VLLMEngine(checkpoint_dir, config)
    raise ValueError(f"inference={config.inference!r}: allowed are torch, vllm")
