"""Routed experts of vLLM's rollouts on CPU, captured at vLLM's own router capture point.

vLLM's official `enable_return_routed_experts` needs Model Runner V2, which has no CPU
backend (vLLM 0.32). What works on CPU: every MoE layer's router (`MoERunner.router`,
a `BaseRouter`) calls `capture_fn(topk_ids)` with the logical top-k ids [N, k] of the N
tokens of one forward. One forward of the model runner processes the scheduled tokens of
every running request laid end to end, in the order of `input_batch.req_ids`, each
request contributing `scheduler_output.num_scheduled_tokens[req_id]` tokens at the
positions held in the runner's `positions` buffer. We snapshot that order and those
positions when the first layer's router fires (after the runner has updated its batch),
and file each row under (request, position, layer).

Position p of a request is token p of prompt + response, so the result drops straight
into the `Rollout.routing` layout; positions never fed through the model (the last
sampled token) stay -1. Prefix caching must be off: cached tokens are not recomputed,
hence not captured (`rows()` then raises instead of returning a hole).
This module only reads; it never changes what vLLM computes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

_LAYER = re.compile(r"layers\.(\d+)\.")


def moe_routers(model: nn.Module) -> list[nn.Module]:
    """The routers of vLLM's MoE layers in layer order (the L axis of the routing)."""
    found = []
    for name, module in model.named_modules():
        router = getattr(module, "router", None)
        if router is not None and hasattr(router, "set_capture_fn"):
            match = _LAYER.search(name)
            found.append((int(match.group(1)) if match else len(found), router))
    return [router for _, router in sorted(found, key=lambda item: item[0])]


class _Step:
    """The routing of one forward: request order, positions, and per-layer top-k ids."""

    def __init__(self, num_layers: int) -> None:
        self.req_ids: list[str] = []
        self.positions: torch.Tensor | None = None  # [N] long
        self.ids: list[torch.Tensor | None] = [None] * num_layers  # [N, k] per layer
        self.num_scheduled: dict[str, int] = {}


class Captured:
    """Everything captured inside one `RoutingCapture.session()`, per forward."""

    def __init__(self, num_layers: int, top_k: int) -> None:
        self.num_layers, self.top_k = num_layers, top_k
        # per forward: (request ids in batch order, tokens per request, positions [N],
        # top-k ids [N, L, k])
        self._steps: list[tuple[list[str], list[int], torch.Tensor, torch.Tensor]] = []

    def _add(self, step: _Step) -> None:
        if step.positions is None or any(ids is None for ids in step.ids):
            raise RuntimeError("routing capture: a forward skipped some MoE layers")
        counts = [step.num_scheduled[r] for r in step.req_ids]
        total = sum(counts)
        ids = torch.stack([t[:total] for t in step.ids], dim=1).long()  # [N, L, k]
        self._steps.append((step.req_ids, counts, step.positions[:total], ids))

    def request_ids(self) -> set[str]:
        return {r for req_ids, *_ in self._steps for r in req_ids}

    def fill(self, routing: torch.Tensor, row_of: dict[str, int], fed: torch.Tensor) -> None:
        """Write every captured row into `routing` [B, S, L, k] at (row_of[request],
        position), for positions < fed[row]. Raises if a position 0..fed-1 of some row
        was not captured (the rollout would otherwise replay holes). A position computed
        twice (a preempted request is recomputed) keeps its first routing, the one its
        sampling saw."""
        dev = routing.device
        for req_ids, counts, positions, ids in reversed(self._steps):
            rows = torch.tensor([row_of[r] for r in req_ids], device=dev).repeat_interleave(
                torch.tensor(counts, device=dev)
            )
            positions, ids = positions.to(dev), ids.to(dev)
            keep = positions < fed[rows]
            routing[rows[keep], positions[keep]] = ids[keep]
        seen = (routing >= 0).all(-1).all(-1)  # [B, S]
        expect = torch.arange(routing.shape[1], device=dev)[None, :] < fed[:, None]
        if not torch.equal(seen & expect, expect):
            b, pos = (expect & ~seen).nonzero()[0].tolist()
            raise RuntimeError(
                f"routing capture: row {b} has no routing at position {pos} (prefix caching "
                "on, or vLLM changed how it schedules tokens)"
            )


class RoutingCapture:
    """Installs capture callbacks on vLLM's MoE routers and wraps the runner's
    `execute_model`, for one in-process CPU engine; `remove()` undoes both."""

    def __init__(self, runner, model: nn.Module) -> None:
        self.runner = runner
        self.routers = moe_routers(model)
        self.num_layers = len(self.routers)
        self.top_k = int(self.routers[0].top_k) if self.routers else 0
        self._step: _Step | None = None
        self._captured: Captured | None = None
        self._execute = runner.execute_model
        if not self.routers:
            return
        for layer, router in enumerate(self.routers):
            router.set_capture_fn(lambda ids, layer=layer: self._on_route(layer, ids))
        runner.execute_model = self._execute_model

    def _execute_model(self, scheduler_output, *args, **kwargs):
        if self._captured is None:
            return self._execute(scheduler_output, *args, **kwargs)
        self._step = _Step(self.num_layers)
        self._step.num_scheduled = dict(scheduler_output.num_scheduled_tokens)
        try:
            return self._execute(scheduler_output, *args, **kwargs)
        finally:
            step, self._step = self._step, None
            if step.req_ids:  # a forward ran (steps without tokens run none)
                self._captured._add(step)

    def _on_route(self, layer: int, topk_ids: torch.Tensor) -> None:
        step = self._step
        if step is None:  # warm-up and probe forwards outside a session
            return
        if layer == 0:  # the batch order and positions of this forward are final now
            step.req_ids = list(self.runner.input_batch.req_ids)
            step.positions = self.runner.positions[: topk_ids.shape[0]].clone()
        step.ids[layer] = topk_ids.detach().clone()

    @contextmanager
    def session(self) -> Iterator[Captured]:
        """Capture the routing of every forward run inside the block."""
        self._captured = Captured(self.num_layers, self.top_k)
        try:
            yield self._captured
        finally:
            self._captured = None

    def remove(self) -> None:
        for router in self.routers:
            router.set_capture_fn(None)
        if self.routers:
            self.runner.execute_model = self._execute
        self.routers = []
