"""One rank of tests/test_megatron_ep.py (run by torchrun, 2 processes, gloo): the tiny
Qwen3-MoE as a Megatron GPTModel with expert parallel 2 (4 of the 8 experts per rank),
its own batch per rank, against the whole transformers model on the same batch: live
log-probs, then replay of other routes (R3-style) with router gradients. Writes
<out>/rank<r>.json with the largest differences it saw."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from trainer import routing
from trainer.engines.megatron import convert
from trainer.engines.megatron import cpu as megatron_cpu
from trainer.engines.megatron.routing import routed
from trainer.engines.megatron.training import megatron_logits
from trainer.models import load_policy


def main(ckpt: str, out: str) -> None:
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(expert_model_parallel_size=2)
    megatron_cpu.apply()
    hf_model, _ = load_policy(ckpt)
    hf = hf_model.config
    module = convert.build_model(hf, on_cpu=True)
    convert.load_into(module, convert.hf_to_megatron(hf_model.state_dict(), hf, rank, 2))
    experts = len(module.decoder.layers[0].mlp.experts.local_experts)

    ids = torch.randint(3, 99, (3, 10), generator=torch.Generator().manual_seed(rank))
    with torch.no_grad(), routed(module, 3, record=True) as cap:
        live = megatron_logits(module, ids)
    with torch.no_grad(), routing.record(hf_model) as rec:
        ref = hf_model(input_ids=ids).logits
    same_routes = torch.equal(cap.indices().sort(-1).values, rec.indices().sort(-1).values)

    replay = (rec.indices() + 3) % hf.num_experts  # other experts, on both ranks' shards
    with routed(module, 3, replay=replay):
        moved = megatron_logits(module, ids)
    with routing.replay(hf_model, replay):
        ref_moved = hf_model(input_ids=ids).logits
    (moved.logsumexp(-1).sum() + ref_moved.logsumexp(-1).sum()).backward()
    grads = [
        (
            module.decoder.layers[i].mlp.router.weight.grad,
            hf_model.model.layers[i].mlp.gate.weight.grad,
        )
        for i in range(hf.num_hidden_layers)
    ]
    result = {
        "local_experts": experts,
        "live_max_abs": float((live - ref).abs().max()),
        "same_routes": same_routes,
        "replay_max_abs": float((moved - ref_moved).abs().max()),
        "replay_changed": float((moved - live).abs().max()),
        "router_grad_norm": min(float(g.norm()) for g, _ in grads),
        "router_grad_max_abs": max(float((g - r).abs().max()) for g, r in grads),
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
