"""The one place where the config picks the engines' backends and sets them up.

`EngineConfig.inference` picks the inference backend. The training backend is
megatron-core if `EngineConfig.training` says so, else the single-process PyTorch
engine; on rank 0 of a torchrun job of several processes (trainer/distributed.py), the
sharded front of either (FSDP2, or Megatron with its parallel sizes), where vLLM also
gets a torch.distributed world of its own. The engines take explicit arguments and
never see the config: this module reads `EngineConfig` and `OptimConfig` for them.
Imports each backend lazily: choosing the PyTorch engine never imports vLLM.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import UserError
from trainer.engines.base import InferenceEngine, TrainingEngine
from trainer.engines.config import EngineConfig, OptimConfig
from trainer.engines.placement import Placement
from trainer.engines.update import UpdateSettings


def make_inference_engine(checkpoint_dir: str | Path, config: EngineConfig) -> InferenceEngine:
    """The configured inference engine (μ) on `checkpoint_dir`."""
    placement = Placement(config.device, config.inference_dtype)
    if config.inference == "torch":
        from trainer.engines.torch.inference import TorchInferenceEngine

        quant = dict(weight_quant=config.weight_quant, activation_quant=config.activation_quant)
        return TorchInferenceEngine(checkpoint_dir, placement, **quant)
    if config.inference == "vllm":
        from trainer import distributed
        from trainer.engines.vllm.inference import VLLMEngine

        if not config.vllm_in_process:
            raise UserError(
                "engine.vllm_in_process: false is not supported by the vLLM engine (weight "
                "sync and routing capture reach into the worker); set it to true"
            )

        def make() -> VLLMEngine:
            return VLLMEngine(
                checkpoint_dir,
                placement,
                weight_quant=config.weight_quant,
                kv_cache_bytes=config.kv_cache_bytes,
                gpu_memory=config.vllm_gpu_memory,
            )

        return distributed.InOwnWorld(make) if distributed.active() else make()
    raise ValueError(f"inference={config.inference!r}: allowed are torch, vllm")


def update_settings(optim: OptimConfig) -> UpdateSettings:
    """The training engines' AdamW and clip, as `optim` configures them."""
    return UpdateSettings(
        lr=optim.lr,
        betas=(optim.beta1, optim.beta2),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        grad_clip=optim.grad_clip,
    )


def make_training_engine(
    checkpoint_dir: str | Path, config: EngineConfig, optim: OptimConfig
) -> TrainingEngine:
    """The training engine (π_θ and AdamW) on `checkpoint_dir`."""
    from trainer import distributed

    settings = update_settings(optim)
    if config.training == "megatron":
        if config.train_dtype != "fp32" or config.autocast != "none":
            raise UserError(
                "engine.training=megatron: train_dtype=fp32 and autocast=none only "
                f"(got {config.train_dtype}, {config.autocast})"
            )
        sizes = config.megatron
        policy = dict(
            device=config.device,
            tensor_model_parallel_size=sizes.tensor_model_parallel_size,
            pipeline_model_parallel_size=sizes.pipeline_model_parallel_size,
            expert_model_parallel_size=sizes.expert_model_parallel_size,
        )
        if distributed.active():
            from trainer.engines.megatron.parallel import MegatronRankZero

            return MegatronRankZero(checkpoint_dir, settings, **policy)
        from trainer.engines.megatron.training import MegatronTrainingEngine

        return MegatronTrainingEngine(checkpoint_dir, settings, **policy)
    placement = Placement(config.device, config.train_dtype)
    if distributed.active():
        from trainer.engines.distributed.fsdp import FSDPTrainingEngine

        return FSDPTrainingEngine(
            checkpoint_dir, settings, placement=placement, autocast=config.autocast
        )
    from trainer.engines.torch.training import TorchTrainingEngine

    return TorchTrainingEngine(checkpoint_dir, settings, placement, config.autocast)
