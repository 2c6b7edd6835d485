"""The one place where the config picks the engines' backends.

`EngineConfig.inference` picks the inference backend; the training backend is the
single-process PyTorch engine (a sharded one would be chosen here). Imports each backend
lazily: choosing the PyTorch engine never imports vLLM.
"""

from __future__ import annotations

from pathlib import Path

from trainer.engines.base import InferenceEngine, TrainingEngine
from trainer.engines.config import EngineConfig, OptimConfig


def make_inference_engine(checkpoint_dir: str | Path, config: EngineConfig) -> InferenceEngine:
    """The configured inference engine (μ) on `checkpoint_dir`."""
    if config.inference == "torch":
        from trainer.engines.torch_engine import TorchInferenceEngine

        return TorchInferenceEngine(checkpoint_dir, config)
    if config.inference == "vllm":
        from trainer.engines.vllm_engine import VLLMEngine

        return VLLMEngine(checkpoint_dir, config)
    raise ValueError(f"inference={config.inference!r}: allowed are torch, vllm")


def make_training_engine(
    checkpoint_dir: str | Path, config: EngineConfig, optim: OptimConfig
) -> TrainingEngine:
    """The training engine (π_θ and AdamW) on `checkpoint_dir`."""
    from trainer.engines.training import TorchTrainingEngine

    return TorchTrainingEngine(checkpoint_dir, config, optim)
