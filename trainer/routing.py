"""MoE routing capture and Routing Replay for transformers 5.x MoE models.

Each MoE block of Qwen3-MoE, OLMoE and Mixtral calls its `gate`, a `*TopKRouter` whose
forward maps the block's flattened hidden states [B*S, H] (row r = b*S + s) to
`(router_logits [B*S, E], routing_weights [B*S, k], expert_indices [B*S, k])`.
Forward hooks on those routers

- record the top-k expert indices of every token and MoE layer, as a [B, S, L, k] long
  tensor (the `Rollout.routing` layout of `trainer/engines/base.py`), and
- replay given indices: the router's indices are replaced and the gate weights are
  recomputed from the LIVE router logits over the replayed set (softmax over all E
  logits, gather, renormalise if the architecture does), so router gradients flow
  (MiniRL, arXiv 2512.01374, Routing Replay: R2 replays e^π_old, R3 replays e^μ_old).

Several forwards inside one context (prefill then decode steps) are laid end to end
along S, in call order. Recording always captures the router's own (live) choice, even
under replay, so that a replayed forward still reports what θ would have routed.
This module changes no weights and knows nothing about engines or the loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

# Router class -> does it renormalise the gathered top-k (None: read `norm_topk_prob`),
# and does it cast the weights back to the logits' dtype. Read from transformers 5.19.
_ROUTERS: dict[str, tuple[bool | None, bool]] = {
    "Qwen3MoeTopKRouter": (None, True),
    "OlmoeTopKRouter": (None, True),
    "MixtralTopKRouter": (True, False),  # Mixtral always renormalises, keeps float32
}


@dataclass(frozen=True)
class _Router:
    block: nn.Module  # the MoE block whose input is [B, S, H]
    gate: nn.Module  # its *TopKRouter
    renormalise: bool
    cast_back: bool


def _routers(model: nn.Module) -> list[_Router]:
    """The MoE routers of `model` in layer order (the L axis of the routing tensor)."""
    found = []
    for module in model.modules():
        gate = getattr(module, "gate", None)
        if gate is None or not type(gate).__name__.endswith("TopKRouter"):
            continue
        name = type(gate).__name__
        if name not in _ROUTERS:
            raise NotImplementedError(f"routing capture/replay does not know router {name}")
        renorm, cast_back = _ROUTERS[name]
        renorm = bool(gate.norm_topk_prob) if renorm is None else renorm
        found.append(_Router(module, gate, renorm, cast_back))
    return found


def num_moe_layers(model: nn.Module) -> int:
    """L of the routing tensor; 0 for a dense model."""
    return len(_routers(model))


def top_k(model: nn.Module) -> int:
    """k of the routing tensor (experts per token)."""
    routers = _routers(model)
    if not routers:
        raise ValueError("dense model: no MoE routers")
    return int(routers[0].gate.top_k)


def gate_weights(
    router_logits: torch.Tensor, indices: torch.Tensor, renormalise: bool, cast_back: bool
) -> torch.Tensor:
    """Gate weights of the experts `indices` [N, k] from the logits [N, E], exactly as the
    router computes them for its own top-k: softmax over all E in float32, gather,
    optional renormalisation over the k, optional cast back to the logits' dtype."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights = probs.gather(-1, indices)
    if renormalise:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype) if cast_back else weights


class Recording:
    """Indices captured inside `record(model)`; read them with `indices()`."""

    def __init__(self, num_layers: int) -> None:
        self._rows: list[list[torch.Tensor]] = [[] for _ in range(num_layers)]  # [N, k] per call
        self._shapes: list[list[tuple[int, int]]] = [[] for _ in range(num_layers)]  # (B, S)

    @property
    def num_forwards(self) -> int:
        return len(self._rows[0]) if self._rows else 0

    def indices(self) -> torch.Tensor:
        """[B, S_total, L, k] long: every recorded forward laid end to end along S."""
        if not self._rows or not self._rows[0]:
            raise ValueError("nothing recorded: no MoE forward ran inside record()")
        per_layer = []
        for rows, shapes in zip(self._rows, self._shapes, strict=True):
            per_call = [r.view(b, s, -1) for r, (b, s) in zip(rows, shapes, strict=True)]
            per_layer.append(torch.cat(per_call, dim=1))  # [B, S_total, k]
        return torch.stack(per_layer, dim=2)


@contextmanager
def record(model: nn.Module) -> Iterator[Recording]:
    """Capture the live top-k of every MoE layer of every forward run inside the block."""
    routers = _routers(model)
    rec = Recording(len(routers))
    handles = []
    for layer, router in enumerate(routers):

        def note_shape(_m, args, layer=layer):
            rec._shapes[layer].append(tuple(args[0].shape[:2]))

        def keep(_m, _args, output, layer=layer):
            rec._rows[layer].append(output[2].detach().clone())

        handles.append(router.block.register_forward_pre_hook(note_shape))
        # prepend: run before any replay hook, so the live choice is what gets recorded
        handles.append(router.gate.register_forward_hook(keep, prepend=True))
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()


def check_indices(indices: torch.Tensor, num_layers: int, k: int, num_experts: int) -> None:
    """Reject a routing tensor that cannot be replayed: shape, range, repeated experts."""
    if indices.dim() != 4 or indices.shape[2] != num_layers or indices.shape[3] != k:
        raise ValueError(
            f"routing indices of shape {tuple(indices.shape)}: expected [B, S, {num_layers}, {k}]"
        )
    if indices.dtype != torch.long:
        raise ValueError(f"routing indices must be int64, got {indices.dtype}")
    known = (indices >= 0).all(dim=-1)  # rows with a -1 fall back as a whole
    rows = indices[known]
    if rows.numel() and (int(rows.max()) >= num_experts or int(indices.min()) < -1):
        raise ValueError(f"routing indices outside [0, {num_experts}) (and -1 for unknown)")
    if k > 1 and rows.numel():
        ordered = rows.sort(dim=-1).values
        if (ordered[:, 1:] == ordered[:, :-1]).any():
            raise ValueError("routing indices repeat an expert within one token and layer")


@contextmanager
def replay(model: nn.Module, indices: torch.Tensor) -> Iterator[None]:
    """Route every forward inside the block through `indices` [B, S, L, k].

    A (token, layer) row holding any -1 (unknown: padding, the never-fed last token, a
    position the source engine did not see) keeps the live top-k. Each forward of batch
    B consumes its S_call positions along S, in order; all S must be consumed.
    """
    routers = _routers(model)
    if not routers:
        raise ValueError("replay on a dense model: no MoE routers")
    gate0 = routers[0].gate
    check_indices(indices, len(routers), int(gate0.top_k), int(gate0.num_experts))
    batch, seq = int(indices.shape[0]), int(indices.shape[1])
    cursor = [0] * len(routers)
    handles = []
    for layer, router in enumerate(routers):

        def substitute(_m, args, output, layer=layer, router=router):
            logits, _, live = output
            rows = int(logits.shape[0])
            if rows % batch:
                raise ValueError(f"router saw {rows} rows, not a multiple of batch {batch}")
            s_call = rows // batch
            start = cursor[layer]
            if start + s_call > seq:
                raise ValueError(f"replay ran past the {seq} positions of the given indices")
            cursor[layer] = start + s_call
            given = indices[:, start : start + s_call, layer].reshape(rows, -1).to(live.device)
            unknown = (given < 0).any(dim=-1, keepdim=True)
            chosen = torch.where(unknown, live, given)
            weights = gate_weights(logits, chosen, router.renormalise, router.cast_back)
            return logits, weights, chosen

        handles.append(router.gate.register_forward_hook(substitute))
    try:
        yield
        if any(c != seq for c in cursor):
            raise ValueError(f"replay consumed {cursor} of {seq} positions per layer")
    finally:
        for h in handles:
            h.remove()
