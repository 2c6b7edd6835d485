"""`ModelConfig`: the shape of a tiny policy, and its mapping onto a transformers config.

The sizes default to a tiny Qwen3-MoE (hidden 64, 2 layers, 8 experts, top-2: seconds
per RL step on 2 CPU cores) and are checked against the CPU-kernel rules of vLLM
(head_dim >= 32, MoE hidden and expert sizes multiples of 32), so that every engine can
load the same checkpoint.
This module builds no weights and touches no files; see `build.py`. Bad values raise
ValueError naming the field (the config loader and `minirl build-model` turn it into a
one-line UserError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

Arch = Literal["qwen3_moe", "qwen3", "olmoe", "mixtral"]
ARCHS: tuple[str, ...] = get_args(Arch)
MOE_ARCHS = ("qwen3_moe", "olmoe", "mixtral")

# vLLM's CPU attention kernels support these head sizes only (vLLM 0.32, CPU backend).
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256)


@dataclass(frozen=True)
class ModelConfig:
    """A tiny causal LM. The vocabulary is not a field: it is the tokenizer's."""

    arch: Arch = "qwen3_moe"
    """Qwen3-MoE is the reference MoE, Qwen3 the reference dense model."""
    hidden_size: int = 64
    """Residual width; a multiple of 32 for vLLM's CPU MoE kernels."""
    num_layers: int = 2
    """Decoder layers; for MoE archs every layer is an MoE layer (L of the routing)."""
    num_heads: int = 4
    """Query heads."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention); must divide num_heads."""
    head_dim: int = 32
    """Per-head width, >= 32 (CPU kernel rule). OLMoE needs num_heads*head_dim == hidden."""
    num_experts: int = 8
    """Routed experts per MoE layer (ignored by qwen3)."""
    top_k: int = 2
    """Experts per token (the k of the routing tensor)."""
    expert_intermediate_size: int = 64
    """Hidden width of each expert's SwiGLU; a multiple of 32 (CPU kernel rule)."""
    intermediate_size: int = 128
    """Hidden width of the dense SwiGLU MLP (qwen3 only)."""
    norm_topk_prob: bool = True
    """Renormalise the top-k gate weights to sum to 1 (Mixtral always does)."""
    max_position_embeddings: int = 512
    """Longest prompt + response the RoPE tables are sized for."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    tie_word_embeddings: bool = False
    """Share the input embedding with the output head."""
    initializer_range: float = 0.02
    """Std of the normal initialisation of every weight matrix."""
    seed: int = 0
    """Seed of the random initialisation: same config + seed -> same weights."""

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch={self.arch!r}: allowed are {', '.join(ARCHS)}")
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be >= 1")
        if self.head_dim not in CPU_HEAD_DIMS:
            raise ValueError(
                f"head_dim={self.head_dim}: vLLM's CPU kernels need one of {CPU_HEAD_DIMS}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}"
            )
        if self.arch == "olmoe" and self.num_heads * self.head_dim != self.hidden_size:
            raise ValueError(
                f"olmoe derives head_dim from hidden_size/num_heads; set "
                f"num_heads*head_dim == hidden_size (got {self.num_heads}*{self.head_dim} "
                f"!= {self.hidden_size})"
            )
        if self.is_moe:
            if self.hidden_size % 32 or self.expert_intermediate_size % 32:
                raise ValueError(
                    f"MoE hidden_size={self.hidden_size} and expert_intermediate_size="
                    f"{self.expert_intermediate_size} must be multiples of 32 (CPU kernel rule)"
                )
            if not 1 <= self.top_k <= self.num_experts:
                raise ValueError(
                    f"top_k={self.top_k}: must be in 1..num_experts={self.num_experts}"
                )
            if self.arch == "mixtral" and not self.norm_topk_prob:
                raise ValueError("mixtral always renormalises top-k; norm_topk_prob=false")
        elif self.intermediate_size < 1:
            raise ValueError(f"intermediate_size={self.intermediate_size}: must be >= 1")

    @property
    def is_moe(self) -> bool:
        return self.arch in MOE_ARCHS

    def hf_config(self, vocab_size: int, pad_id: int, bos_id: int, eos_id: int) -> Any:
        """The transformers config of this model, with the tokenizer's vocab and ids."""
        import transformers

        common: dict[str, Any] = dict(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            max_position_embeddings=self.max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            pad_token_id=pad_id,
            bos_token_id=bos_id,
            eos_token_id=eos_id,
        )
        moe = dict(num_experts_per_tok=self.top_k, output_router_logits=False)
        if self.arch == "qwen3_moe":
            return transformers.Qwen3MoeConfig(
                **common,
                **moe,
                head_dim=self.head_dim,
                num_experts=self.num_experts,
                moe_intermediate_size=self.expert_intermediate_size,
                intermediate_size=self.intermediate_size,
                norm_topk_prob=self.norm_topk_prob,
            )
        if self.arch == "olmoe":
            return transformers.OlmoeConfig(
                **common,
                **moe,
                num_experts=self.num_experts,
                intermediate_size=self.expert_intermediate_size,
                norm_topk_prob=self.norm_topk_prob,
            )
        if self.arch == "mixtral":
            return transformers.MixtralConfig(
                **common,
                **moe,
                head_dim=self.head_dim,
                num_local_experts=self.num_experts,
                intermediate_size=self.expert_intermediate_size,
            )
        return transformers.Qwen3Config(
            **common, head_dim=self.head_dim, intermediate_size=self.intermediate_size
        )
