"""Routing capture and Routing Replay (R2/R3) of a Megatron MoE model, through
megatron-core's own RouterReplay (`TransformerConfig.moe_enable_routing_replay`).

Each `TopKRouter` owns a `RouterReplay`: with RECORD it keeps the top-k indices it chose,
with REPLAY_FORWARD it routes through target indices and computes the gate weights from
its LIVE logits over them, so the router gets gradients (arXiv 2512.01374: R2 replays
e^π_old, R3 the inference engine's e^μ_old). The routers see tokens sequence-first
([S, B, H], rows s*B + b); the project's layout is [B, S, L, k] (`Rollout.routing`),
transposed here both ways.

Added around Megatron's replay, without changing it, by a forward pre-hook on the router:
- a (token, layer) row holding any -1 (padding, the never-fed last token) keeps the live
  top-k (one extra small matmul through the router's own `gating`);
- under replay the hook records the live choice, so a replayed forward still reports what
  θ would have routed (the routing-mismatch diagnostics need it). Without replay the
  routes are Megatron's RECORD.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from trainer.routing import check_indices


def routers(module: nn.Module) -> list[nn.Module]:
    """The TopKRouters of `module` in layer order (the L axis), each with its replay."""
    from megatron.core.transformer.moe.router import TopKRouter

    found = [m for m in module.modules() if isinstance(m, TopKRouter)]
    if any(r.router_replay is None for r in found):
        raise ValueError("routers without RouterReplay: build with moe_enable_routing_replay")
    return found


class Capture:
    """The live routing of the forward run inside `routed`; read it with `indices()`."""

    def __init__(self, batch: int, num_layers: int) -> None:
        self.batch = batch
        self.live: list[torch.Tensor | None] = [None] * num_layers  # [S*B, k] per layer

    def indices(self) -> torch.Tensor:
        """[B, S, L, k] long."""
        if any(x is None for x in self.live):
            raise ValueError("nothing recorded: no MoE forward ran inside routed()")
        per_layer = [x.reshape(-1, self.batch, x.shape[-1]).transpose(0, 1) for x in self.live]
        return torch.stack(per_layer, dim=2).long()


@contextmanager
def routed(
    module: nn.Module, batch: int, replay: torch.Tensor | None = None, record: bool = False
) -> Iterator[Capture]:
    """Run ONE forward of batch `batch` inside: routed through `replay` [B, S, L, k]
    (-1 = live top-k) if given, recording the live routes (into the yielded Capture) if
    `record`. Megatron's replay state is cleared on exit, whatever happened."""
    from megatron.core.transformer.moe.router_replay import RouterReplayAction

    rs = routers(module)
    cap = Capture(batch, len(rs))
    handles = []
    if replay is not None:
        first = rs[0]
        check_indices(replay, len(rs), int(first.topk), int(first.config.num_moe_experts))
        for layer, router in enumerate(rs):
            target = replay[:, :, layer].transpose(0, 1).reshape(-1, replay.shape[-1])

            def substitute(router, args, target=target, layer=layer):
                with torch.no_grad():
                    logits = router.gating(args[0]).reshape(-1, router.config.num_moe_experts)
                    live = torch.topk(logits, k=router.topk, dim=-1).indices
                given = target.to(live.device)
                if given.shape != live.shape:
                    raise ValueError(f"replay of {tuple(given.shape)} rows for {tuple(live.shape)}")
                unknown = (given < 0).any(dim=-1, keepdim=True)
                router.router_replay.clear_indices()
                router.router_replay.set_target_indices(torch.where(unknown, live, given))
                cap.live[layer] = live

            handles.append(router.register_forward_pre_hook(substitute))
            router.router_replay.set_router_replay_action(RouterReplayAction.REPLAY_FORWARD)
    elif record:
        for router in rs:
            router.router_replay.set_router_replay_action(RouterReplayAction.RECORD)
    try:
        yield cap
        if replay is None and record:
            cap.live = [r.router_replay.get_recorded_indices() for r in rs]
    finally:
        for h in handles:
            h.remove()
        for router in rs:
            router.router_replay.clear_indices()
            router.router_replay.clear_router_replay_action()
