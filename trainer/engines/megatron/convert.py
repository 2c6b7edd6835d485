"""A Megatron `GPTModel` with the architecture of a transformers Qwen3-MoE, and the weight
conversion between the two layouts, both ways.

The same architecture, term by term: RMSNorm (pre-attention, pre-MLP, final), GQA with
RMSNorm on each head's queries and keys before RoPE, SwiGLU experts (gate then up in one
fc1), a softmax top-k router without bias (`norm_topk_prob` maps to
`moe_router_pre_softmax` off), no aux loss, no token dropping.

Layouts (HF -> Megatron, per layer): `self_attn.{q,k,v}_proj` -> `linear_qkv`, rows
grouped per KV head ([q heads of group g, k_g, v_g]); `o_proj` -> `linear_proj`;
`{q,k}_norm` -> `{q,k}_layernorm`; `input_layernorm` -> `input_layernorm`;
`post_attention_layernorm` -> `pre_mlp_layernorm`; `mlp.gate` -> `mlp.router`;
`experts.gate_up_proj [E, 2I, H]` -> `local_experts.e.linear_fc1 [2I, H]`;
`experts.down_proj [E, H, I]` -> `local_experts.e.linear_fc2 [H, I]`; embed_tokens, norm,
lm_head -> word_embeddings, final_layernorm, output_layer (absent when tied). HF names
are those of the transformers 5 module's `state_dict()` (experts fused as 3-D tensors).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import UserError


def check_supported(hf: Any) -> None:
    """Raise UserError unless `hf` (a transformers config) is a Qwen3-MoE that this
    conversion reproduces exactly."""
    if getattr(hf, "model_type", None) != "qwen3_moe":
        raise UserError(
            f"engine.training=megatron: model.arch must be qwen3_moe (got "
            f"{getattr(hf, 'model_type', None)}); use engine.training=torch for other archs"
        )
    rope = getattr(hf, "rope_parameters", None) or {}
    unsupported = {
        "decoder_sparse_step != 1": hf.decoder_sparse_step != 1,
        "mlp_only_layers": bool(hf.mlp_only_layers),
        "attention_bias": bool(hf.attention_bias),
        "hidden_act != silu": hf.hidden_act != "silu",
        "rope_type != default": rope.get("rope_type", "default") != "default",
        "sliding window": bool(getattr(hf, "use_sliding_window", False)),
    }
    bad = [name for name, flag in unsupported.items() if flag]
    if bad:
        raise UserError(f"engine.training=megatron: unsupported Qwen3-MoE config: {bad}")


FIXED = {
    "moe_router_load_balancing_type": "none",
    "moe_aux_loss_coeff": 0.0,
    "moe_enable_routing_replay": True,
    "normalization": "RMSNorm",
    "qk_layernorm": True,
    "gated_linear_unit": True,
    "activation_func": F.silu,
    "add_bias_linear": False,
    "add_qkv_bias": False,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
    "bias_activation_fusion": False,
    "bias_dropout_fusion": False,
    "masked_softmax_fusion": False,
    "persist_layer_norm": False,
    "apply_rope_fusion": False,
    "perform_initialization": False,  # the HF weights are loaded over it
    "params_dtype": torch.float32,
}
"""What every Qwen3-MoE policy of this engine shares in Megatron's TransformerConfig: the
architecture (RMSNorm, QK-norm, SwiGLU, no biases), no auxiliary loss and no dropout (the
RL update is the only objective), no fused kernels (equal log-probs to transformers'),
routing replay on, fp32 parameters."""


def transformer_config(hf: Any, on_cpu: bool, ep_size: int = 1) -> Any:
    """Megatron's TransformerConfig of the HF config (`FIXED`, `ep_size` expert-parallel
    ranks). On CPU: the allgather token dispatcher (alltoall creates a CUDA stream) and
    CPU init."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        **FIXED,
        expert_model_parallel_size=ep_size,
        num_layers=hf.num_hidden_layers,
        hidden_size=hf.hidden_size,
        num_attention_heads=hf.num_attention_heads,
        num_query_groups=hf.num_key_value_heads,
        kv_channels=hf.head_dim,
        ffn_hidden_size=hf.intermediate_size,
        num_moe_experts=hf.num_experts,
        moe_router_topk=hf.num_experts_per_tok,
        moe_ffn_hidden_size=hf.moe_intermediate_size,
        moe_router_pre_softmax=not hf.norm_topk_prob,
        moe_token_dispatcher_type="allgather" if on_cpu else "alltoall",
        layernorm_epsilon=hf.rms_norm_eps,
        use_cpu_initialization=on_cpu,
    )


def build_model(hf: Any, on_cpu: bool, ep_size: int = 1) -> nn.Module:
    """An (uninitialised) Megatron GPTModel of the HF config's shape. Needs megatron's
    parallel state (world 1 is enough; `ep_size` as initialised there). Its routers'
    RouterReplay instances are taken out of Megatron's process-wide list: the engine
    drives each model's own routers, so two models in one process never share replay
    state."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.moe.router_replay import RouterReplay

    check_supported(hf)
    spec = get_gpt_layer_local_spec(
        num_experts=hf.num_experts, qk_layernorm=True, normalization="RMSNorm"
    )
    before = list(RouterReplay.global_router_replay_instances)
    model = GPTModel(
        transformer_config(hf, on_cpu, ep_size),
        spec,
        vocab_size=hf.vocab_size,
        max_sequence_length=hf.max_position_embeddings,
        position_embedding_type="rope",
        rotary_base=int(hf.rope_parameters["rope_theta"]),
        share_embeddings_and_output_weights=bool(hf.tie_word_embeddings),
    )
    RouterReplay.global_router_replay_instances[:] = before
    return model


def _qkv_rows(hf: Any) -> tuple[int, int, int]:
    groups, d = hf.num_key_value_heads, hf.head_dim
    return groups, hf.num_attention_heads // groups * d, d


_RENAMED = {  # a layer's tensors that only change name: HF -> Megatron
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
    "self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
    "self_attn.k_norm.weight": "self_attention.k_layernorm.weight",
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
    "mlp.gate.weight": "mlp.router.weight",
}


def hf_to_megatron(
    state: dict[str, torch.Tensor], hf: Any, ep_rank: int = 0, ep_size: int = 1
) -> dict[str, torch.Tensor]:
    """Megatron's weights from HF's (new tensors, no aliasing). With expert parallel
    `ep_size` > 1: the shard of rank `ep_rank`, whose local expert e is global expert
    ep_rank * E/ep_size + e (Megatron's layout); the rest is replicated."""
    if hf.num_experts % ep_size or not 0 <= ep_rank < ep_size:
        raise ValueError(f"expert parallel rank {ep_rank} of {ep_size}: {hf.num_experts} experts")
    local = hf.num_experts // ep_size
    groups, q_rows, d = _qkv_rows(hf)
    out = {
        "embedding.word_embeddings.weight": state["model.embed_tokens.weight"],
        "decoder.final_layernorm.weight": state["model.norm.weight"],
    }
    if not hf.tie_word_embeddings:
        out["output_layer.weight"] = state["lm_head.weight"]
    for i in range(hf.num_hidden_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        q = state[h + "self_attn.q_proj.weight"].reshape(groups, q_rows, -1)
        k = state[h + "self_attn.k_proj.weight"].reshape(groups, d, -1)
        v = state[h + "self_attn.v_proj.weight"].reshape(groups, d, -1)
        out[m + "self_attention.linear_qkv.weight"] = torch.cat([q, k, v], 1).flatten(0, 1)
        out.update({m + meg: state[h + name] for name, meg in _RENAMED.items()})
        gate_up, down = state[h + "mlp.experts.gate_up_proj"], state[h + "mlp.experts.down_proj"]
        for e in range(local):
            expert = f"{m}mlp.experts.local_experts.{e}."
            out[expert + "linear_fc1.weight"] = gate_up[ep_rank * local + e]
            out[expert + "linear_fc2.weight"] = down[ep_rank * local + e]
    return {name: t.detach().clone() for name, t in out.items()}


def megatron_to_hf(state: dict[str, torch.Tensor], hf: Any) -> dict[str, torch.Tensor]:
    """HF's weights from Megatron's (the inverse of `hf_to_megatron`; new tensors)."""
    groups, q_rows, d = _qkv_rows(hf)
    out = {
        "model.embed_tokens.weight": state["embedding.word_embeddings.weight"],
        "model.norm.weight": state["decoder.final_layernorm.weight"],
        "lm_head.weight": state[
            "embedding.word_embeddings.weight" if hf.tie_word_embeddings else "output_layer.weight"
        ],
    }
    for i in range(hf.num_hidden_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        qkv = state[m + "self_attention.linear_qkv.weight"].reshape(groups, q_rows + 2 * d, -1)
        q, k, v = qkv.split([q_rows, d, d], dim=1)
        out[h + "self_attn.q_proj.weight"] = q.flatten(0, 1)
        out[h + "self_attn.k_proj.weight"] = k.flatten(0, 1)
        out[h + "self_attn.v_proj.weight"] = v.flatten(0, 1)
        out.update({h + name: state[m + meg] for name, meg in _RENAMED.items()})
        experts = [f"{m}mlp.experts.local_experts.{e}." for e in range(hf.num_experts)]
        out[h + "mlp.experts.gate_up_proj"] = torch.stack(
            [state[x + "linear_fc1.weight"] for x in experts]
        )
        out[h + "mlp.experts.down_proj"] = torch.stack(
            [state[x + "linear_fc2.weight"] for x in experts]
        )
    return {name: t.detach().clone() for name, t in out.items()}


def load_into(module: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy converted weights into `module` in place (its parameters keep their identity,
    so an optimiser over them stays valid). Every parameter must be given, nothing extra."""
    params = {n: t for n, t in module.state_dict().items() if isinstance(t, torch.Tensor)}
    if params.keys() != weights.keys():
        missing, extra = params.keys() - weights.keys(), weights.keys() - params.keys()
        raise ValueError(f"weight conversion: missing {sorted(missing)}, extra {sorted(extra)}")
    with torch.no_grad():
        for name, target in params.items():
            if target.shape != weights[name].shape:
                raise ValueError(
                    f"weight conversion: {name} has shape {tuple(weights[name].shape)}, "
                    f"expected {tuple(target.shape)}"
                )
            target.copy_(weights[name])
