"""Rank 0's `TrainingEngine` over a policy sharded on the ranks of a torchrun job, and
the worker loop of the other ranks; shared by FSDP2 (fsdp.py) and Megatron's parallel
path (megatron/parallel.py).

Every rank holds a *shard*: its part of the policy, with methods all ranks run together
(rank 0 passes the whole batch as `data`). Rank 0's `RankZeroEngine` is the engine the
loop sees: each call is broadcast as a command (trainer/distributed.py), then run by rank
0's own shard. One update, exact to the single-process engine's: rank 0 scatters the rows,
every rank computes log π of its rows, rank 0 gathers whole [B, S] tensors and the RL step
computes the loss and diagnostics on the whole batch; rank 0 back-propagates to the
gathered log π, scatters ∂loss/∂log π, every rank back-propagates its share, and the
shard sums the gradients over ranks. Norm, clipping, the non-finite skip and the cosine
probe use global sums. Rank 0 keeps an unsharded transformers copy (`model`, refreshed
after each update) for the weight sync and π's evaluation. Checkpoints are the subclass's.
"""

from __future__ import annotations

import math
import resource
import signal
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from core.errors import UserError
from trainer import distributed as ranks
from trainer.engines.device import HOST
from trainer.engines.local import LocalTrainingEngine
from trainer.engines.scoring import check_batch
from trainer.engines.update import UpdateSettings
from trainer.models import load_policy


class RankZeroEngine:
    """`TrainingEngine` on rank 0 of a torchrun job; see the module docstring."""

    shard_type: type
    """The class of every rank's shard (sent to the workers, which build theirs)."""

    def __init__(self, checkpoint_dir: str | Path, optim: UpdateSettings, **policy_args: Any):
        """`policy_args`: the keyword arguments of `shard_type` (its backend's policy)."""
        ranks.Commands.send("init", self.shard_type, (str(checkpoint_dir), optim), policy_args)
        self.shard = self.shard_type(checkpoint_dir, optim, **policy_args)
        engine = self.shard.engine
        self.tokenizer = engine.tokenizer
        self.world_size = dist.get_world_size()
        self.is_moe: bool = engine.is_moe
        self.num_experts: int = engine.num_experts
        self.optim: UpdateSettings = engine.optim
        self._mirror, _ = load_policy(checkpoint_dir, self.shard.dtype)  # unsharded copy
        self._mirror.train()
        self._stale = False
        self._leaf: torch.Tensor | None = None  # the gathered log π the loss is built on

    @property
    def model(self) -> nn.Module:
        """The whole policy, refreshed from the shards if an update or a load changed them."""
        if self._stale:
            self._run("full_weights")
            self._mirror.load_state_dict(self.shard.full_weights())
            self._stale = False
        return self._mirror

    @property
    def device(self) -> torch.device:
        """Where rank 0 keeps the whole batch's tensors (each rank moves its rows)."""
        return HOST

    @property
    def lr(self) -> float:
        return self.shard.engine.lr

    def _run(self, name: str, *args: Any) -> None:
        ranks.Commands.send(name, *args)

    def forward_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
        replay: torch.Tensor | None = None,
        record: bool = False,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """As TorchTrainingEngine.forward_logprobs, each rank on its share of the rows.
        With grad enabled, log π is a leaf whose gradient `step` sends back to the ranks."""
        check_batch(input_ids, attention_mask, response_mask)
        if input_ids.shape[0] < self.world_size:
            raise UserError(
                f"{input_ids.shape[0]} rows for {self.world_size} ranks: every rank needs a "
                "row (raise train.prompts_per_step or lower train.mini_batches)"
            )
        if replay is not None and not self.is_moe:
            raise ValueError("routing replay on a dense model")
        flags = (torch.is_grad_enabled(), record, with_entropy)
        self._run("forward", flags)
        logp, entropy, routed = self.shard.forward(
            flags, (input_ids, attention_mask, response_mask, replay)
        )
        self._leaf = logp.requires_grad_() if flags[0] else None
        return logp, entropy, routed

    def step(self, loss: torch.Tensor | None = None) -> dict[str, float]:
        """Backward `loss` on every rank's rows, clip by the global norm, update, zero."""
        leaf = self._take_leaf()
        if loss is not None:
            loss.backward()
        grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        self._run("backward_step")
        out = self.shard.backward_step((grad,))
        self._stale = True
        return out

    def step_with_grad_cosine(
        self, loss: torch.Tensor, reference: torch.Tensor
    ) -> tuple[dict[str, float], float]:
        """`step(loss)` and the cosine between ∇loss and ∇reference, over all shards."""
        leaf = self._take_leaf()
        g_loss = _grad(loss, leaf, keep=True)
        with_ref = bool(torch.isfinite(reference))
        g_ref = _grad(reference, leaf) if with_ref else None
        self._run("backward_cosine_step", with_ref)
        out, cosine = self.shard.backward_cosine_step(with_ref, (g_loss, g_ref))
        self._stale = True
        return out, cosine

    def _take_leaf(self) -> torch.Tensor:
        if self._leaf is None:
            raise RuntimeError("step without a forward_logprobs under grad")
        leaf, self._leaf = self._leaf, None
        return leaf

    def set_lr_scale(self, scale: float) -> None:
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"lr scale {scale}: must be a positive finite number")
        self._run("set_lr_scale", scale)
        self.shard.set_lr_scale(scale)

    def state_dict(self) -> Any:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    def usage_per_rank(self) -> list[dict[str, float]]:
        """`usage_of` each rank: the bytes of weights and AdamW state it holds, its peak
        RSS and CPU seconds so far (for `minirl bench scale`)."""
        self._run("usage")
        out = self.shard.usage()
        assert out is not None
        return out


class Shard:
    """One rank's part of the policy: the training engine of that part (local.py), and
    the forward and backward every rank runs on its rows. The FSDP2 and the Megatron
    shards build `engine` and add their own commands; a shard that sums gradients over
    ranks itself does it in `reduce_gradients` (FSDP2 does it inside its backward), and
    `part_weights` counts each parameter once in global sums."""

    engine: LocalTrainingEngine
    dtype: str = "fp32"
    """The policy's parameter dtype (rank 0's unsharded copy is loaded in it)."""
    _graph: torch.Tensor | None = None  # this rank's log π of the last forward under grad

    def pad_rows(self, rows: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """This rank's rows as its forward needs them (Megatron's expert parallel: equal
        row counts on all ranks); extra rows are dropped from the outputs."""
        return rows

    def reduce_gradients(self) -> None:
        """Sum this rank's gradients with the other ranks' (FSDP2: in its backward)."""

    def part_weights(self) -> list[float] | None:
        """Per trained parameter: 1 / the number of ranks holding the same gradient."""
        return None

    def set_lr_scale(self, scale: float) -> None:
        self.engine.set_lr_scale(scale)

    def forward(self, flags: tuple[bool, bool, bool], data: Any = None) -> Any:
        """log π (entropy, routing) of this rank's rows; whole tensors on rank 0."""
        grad, record, with_entropy = flags
        mine = ranks.scatter_rows(data)
        n = len(mine[0])
        ids, attn, mask, replay = self.pad_rows(mine)
        with torch.set_grad_enabled(grad):
            outs = self.engine.forward_logprobs(
                ids, attn, mask, replay=replay, record=record, with_entropy=with_entropy
            )
        self._graph = outs[0] if grad else None
        return ranks.gather_rows([None if t is None else to_host(t.detach()[:n]) for t in outs])

    def backward_step(self, data: Any = None) -> dict[str, float]:
        """Back-propagate rank 0's ∂loss/∂log π through this rank's rows, then update."""
        (grad,) = ranks.scatter_rows(data)
        self._backward(grad)
        return self.engine.update.apply_gradients()

    def backward_cosine_step(self, with_reference: bool, data: Any = None) -> Any:
        """`backward_step`, and the cosine between ∇loss and ∇reference over all shards."""
        g_loss, g_ref = ranks.scatter_rows(data)
        update = self.engine.update
        params = [p for p in update.module.parameters() if p.requires_grad]
        found = math.nan
        if with_reference:
            self._backward(g_ref, keep=True)
            ref = [local(p.grad) for p in params]
            update.optimizer.zero_grad(set_to_none=True)
            self._backward(g_loss)
            found = cosine(ref, [local(p.grad) for p in params], self.part_weights())
        else:
            self._backward(g_loss)
        return update.apply_gradients(), found

    def _backward(self, grad: torch.Tensor, keep: bool = False) -> None:
        if self._graph is None:
            raise RuntimeError("backward without a forward that kept its graph")
        extra = len(self._graph) - len(grad)  # pad_rows' rows: no loss on them
        grad = torch.cat([grad, grad.new_zeros(extra, *grad.shape[1:])]) if extra else grad
        with self.engine.update.context():
            self._graph.backward(grad.to(self._graph.device), retain_graph=keep)
        if not keep:
            self._graph = None
        self.reduce_gradients()


def usage_of(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Bytes of `model`'s parameters and `optimizer`'s state in this process (its shards
    only, if sharded), the process's peak resident memory and its CPU seconds so far."""
    states = [v for s in optimizer.state.values() for v in s.values()]
    return {
        "params": sum(local(p).nbytes for p in model.parameters()),
        "optimizer": sum(local(v).nbytes for v in states if isinstance(v, torch.Tensor)),
        "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cpu_s": time.process_time(),
    }


def usage_on_rank_0(model: nn.Module, optimizer: torch.optim.Optimizer) -> list | None:
    """`usage_of` every rank, as a list on rank 0 (None elsewhere); a collective."""
    return ranks.gather_to_rank_0(usage_of(model, optimizer))


def local(t: torch.Tensor | None) -> torch.Tensor | None:
    """This rank's shard of a (DTensor) parameter or gradient."""
    if t is None:
        return None
    return t.to_local() if hasattr(t, "to_local") else t


def to_host(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to(HOST)


def cosine(
    a: list[torch.Tensor | None],
    b: list[torch.Tensor | None],
    weights: list[float] | None = None,
) -> float:
    """Cosine of two gradients held in parts over the ranks (None = zeros), from sums of
    every rank's dot products, part i counted with `weights[i]` (1 / the ranks holding
    the same part; default 1: every part on one rank only). NaN when either gradient is
    zero or not finite (no direction to compare)."""
    dot = na = nb = 0.0
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        w = 1.0 if weights is None else weights[i]
        x64 = x.double().reshape(-1) if x is not None else None
        y64 = y.double().reshape(-1) if y is not None else None
        if x64 is not None:
            na += w * float(x64 @ x64)
        if y64 is not None:
            nb += w * float(y64 @ y64)
        if x64 is not None and y64 is not None:
            dot += w * float(x64 @ y64)
    dot, na, nb = ranks.all_sum([dot, na, nb])
    if not (math.isfinite(dot) and math.isfinite(na) and math.isfinite(nb)) or na == 0 or nb == 0:
        return math.nan
    return max(-1.0, min(1.0, dot / math.sqrt(na * nb)))


def _grad(out: torch.Tensor, leaf: torch.Tensor, keep: bool = False) -> torch.Tensor:
    (g,) = torch.autograd.grad(out, leaf, retain_graph=keep, allow_unused=True)
    return torch.zeros_like(leaf) if g is None else g


def serve() -> None:
    """A worker rank: build its shard (of the class rank 0 names) when told, then run each
    command on it until exit. Ctrl-C (which torchrun passes on to every rank) is rank 0's
    to handle: it checkpoints the interrupted run with every rank, then sends exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    shard: Any = None
    while True:
        name, args = ranks.Commands.receive()
        if name == "exit":
            return
        if name == "init":
            torch.manual_seed(0)  # nothing on a worker samples; keep it deterministic anyway
            shard_type, positional, keywords = args
            shard = shard_type(*positional, **keywords)
        elif shard is None:
            raise RuntimeError(f"command {name!r} before the policy was built")
        else:
            getattr(shard, name)(*args)
