"""The FSDP2 training engine: π_θ sharded over the ranks of a torchrun job, data-parallel.

Each rank holds `ShardedPolicy`: the policy with every decoder layer and then the root
wrapped by `fully_shard` (parameters, gradients and AdamW state sharded), and runs the
forward and backward of its share of the rows. Rank 0 holds `FSDPTrainingEngine`, the
`TrainingEngine` the loop sees: each call is broadcast to the other ranks
(trainer/distributed.py) and run by all of them together.

The split of one update, exact to the single-process engine's:
  - forward: rank 0 scatters the rows (contiguous shares), every rank computes log π of
    its rows, rank 0 gathers whole [B, S] tensors (log π, entropy, routing). The RL step
    then computes the loss and every diagnostic on the whole batch, unchanged: token
    sums, extremes and quantiles over all ranks' tokens, nothing averaged per rank.
  - backward: rank 0 back-propagates the loss to the gathered log π (a leaf), scatters
    ∂loss/∂log π by rows, and every rank back-propagates its share through its graph;
    FSDP sums (not averages) the gradients over ranks, so ∇θ is that of the whole batch.
  - gradient norm, clipping, the non-finite skip and the cosine probe use global sums.
Rank 0 also keeps an unsharded copy of the weights (`model`, refreshed from the shards
after each update) for the weight sync into the inference engine and π's evaluation.
Checkpoints go through torch.distributed.checkpoint: every rank writes its shards.
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
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from monitor.errors import UserError
from trainer import distributed as ranks
from trainer.engines.config import EngineConfig, OptimConfig
from trainer.engines.device import HOST
from trainer.engines.reshard import full_fqn_state
from trainer.engines.training import TorchTrainingEngine, check_batch
from trainer.engines.update import adamw
from trainer.models import load_policy

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
_FULL_FROM_0 = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a transformers causal LM (each becomes one FSDP unit)."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no decoder layers at .model.layers to shard")
    return layers


class ShardedPolicy(TorchTrainingEngine):
    """One rank's part of the policy. Every method is run by all ranks together (rank 0
    passes the whole batch as `data`, the others nothing)."""

    def __init__(self, checkpoint_dir: str | Path, config: EngineConfig, optim: OptimConfig):
        super().__init__(checkpoint_dir, config, optim)  # the whole policy, on this rank
        device = next(self.model.parameters()).device.type
        mesh = init_device_mesh(device, (dist.get_world_size(),))
        for layer in decoder_layers(self.model):
            fully_shard(layer, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        for module in self.model.modules():
            if isinstance(module, FSDPModule):  # ∇ of the whole batch: sum over ranks
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        self.optimizer = adamw(self.model.parameters(), optim)  # over this rank's shards
        self._graph: torch.Tensor | None = None  # this rank's log π of the last forward

    def forward(self, flags: tuple[bool, bool, bool], data: Any = None) -> Any:
        """log π (entropy, routing) of this rank's rows; whole tensors on rank 0."""
        grad, record, with_entropy = flags
        ids, attn, mask, replay = ranks.scatter_rows(data)
        with torch.set_grad_enabled(grad):
            logp, entropy, routed = self.forward_logprobs(
                ids, attn, mask, replay=replay, record=record, with_entropy=with_entropy
            )
        self._graph = logp if grad else None
        return ranks.gather_rows([_cpu(logp.detach()), _cpu(entropy), _cpu(routed)])

    def backward_step(self, data: Any = None) -> dict[str, float]:
        """Back-propagate rank 0's ∂loss/∂log π through this rank's rows, then update."""
        (grad,) = ranks.scatter_rows(data)
        self._backward(grad)
        return self.apply_gradients()

    def backward_cosine_step(self, with_reference: bool, data: Any = None) -> Any:
        """`backward_step`, and the cosine between ∇loss and ∇reference over all shards."""
        g_loss, g_ref = ranks.scatter_rows(data)
        params = [p for p in self.model.parameters() if p.requires_grad]
        cosine = math.nan
        if with_reference:
            self._backward(g_ref, keep=True)
            ref = [_local(p.grad) for p in params]
            self.optimizer.zero_grad(set_to_none=True)
            self._backward(g_loss)
            cosine = _cosine(ref, [_local(p.grad) for p in params])
        else:
            self._backward(g_loss)
        return self.apply_gradients(), cosine

    def _backward(self, grad: torch.Tensor, keep: bool = False) -> None:
        if self._graph is None:
            raise RuntimeError("backward without a forward that kept its graph")
        self._graph.backward(grad.to(self._graph.device), retain_graph=keep)
        if not keep:
            self._graph = None

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on rank 0 (empty elsewhere)."""
        return get_model_state_dict(self.model, options=_FULL)

    def save_shards(self, folder: str) -> None:
        """Every rank writes its shards of the weights and of AdamW (DCP)."""
        dcp.save(self._dcp_state(), checkpoint_id=folder)

    def load_shards(self, folder: str, lr_scale: float) -> None:
        """Load a DCP checkpoint written by any number of ranks (resharded on load)."""
        state = self._dcp_state()
        dcp.load(state, checkpoint_id=folder)
        set_model_state_dict(self.model, state["model"])
        set_optimizer_state_dict(self.model, self.optimizer, state["optim"])
        self.set_lr_scale(lr_scale)
        self._graph = None

    def load_full(self, lr_scale: float, data: Any = None) -> None:
        """Load a single-process checkpoint that rank 0 holds as full FQN-keyed state."""
        model_sd, optim_sd = data if data is not None else ({}, {})
        set_model_state_dict(self.model, model_sd, options=_FULL_FROM_0)
        set_optimizer_state_dict(self.model, self.optimizer, optim_sd, options=_FULL_FROM_0)
        self.set_lr_scale(lr_scale)
        self._graph = None

    def usage(self) -> list[dict[str, float]] | None:
        """`usage_of` this rank; the list of every rank's on rank 0."""
        local = usage_of(self.model, self.optimizer)
        out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(local, out, dst=0)
        return out

    def _dcp_state(self) -> dict[str, Any]:
        return {
            "model": get_model_state_dict(self.model),
            "optim": get_optimizer_state_dict(self.model, self.optimizer),
        }


class FSDPTrainingEngine:
    """`TrainingEngine` on rank 0 of a torchrun job; see the module docstring."""

    def __init__(self, checkpoint_dir: str | Path, config: EngineConfig, optim: OptimConfig):
        ranks.Commands.send("init", str(checkpoint_dir), config, optim)
        self.shard = ShardedPolicy(checkpoint_dir, config, optim)
        self.tokenizer = self.shard.tokenizer
        self.world_size = dist.get_world_size()
        self._mirror, _ = load_policy(checkpoint_dir, config.train_dtype)  # unsharded copy
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
    def is_moe(self) -> bool:
        return self.shard.is_moe

    @property
    def num_experts(self) -> int:
        return self.shard.num_experts

    @property
    def lr(self) -> float:
        return self.shard.lr

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

    def state_dict(self) -> ShardedState:
        """A handle that writes the checkpoint's shards (trainer/checkpoints.py)."""
        return ShardedState(self)

    def load_state_dict(self, state: dict) -> None:
        """A sharded checkpoint ({"shards": folder}) or a single-process one."""
        scale = float(state["lr_scale"])
        if "shards" in state:
            self._run("load_shards", str(state["shards"]), scale)
            self.shard.load_shards(str(state["shards"]), scale)
        else:
            full = full_fqn_state(self._mirror, state, self.optim)
            self._run("load_full", scale)
            self.shard.load_full(scale, full)
        self._leaf, self._stale = None, True

    @property
    def optim(self) -> OptimConfig:
        return self.shard.optim

    def usage_per_rank(self) -> list[dict[str, float]]:
        """`usage_of` each rank: the bytes of weights and AdamW state it holds, its peak
        RSS and CPU seconds so far (for `minirl bench scale`)."""
        self._run("usage")
        out = self.shard.usage()
        assert out is not None
        return out


class ShardedState:
    """What `FSDPTrainingEngine.state_dict` returns: the checkpoint writer calls `write`
    (every rank saves its shards into `folder`) and stores `meta` beside it."""

    def __init__(self, engine: FSDPTrainingEngine) -> None:
        self.engine = engine
        self.meta = {"lr_scale": engine.shard.lr_scale, "world_size": engine.world_size}

    def write(self, folder: Path) -> None:
        """`folder` is new (trainer/checkpoints.py never reuses one)."""
        self.engine._run("save_shards", str(folder))
        self.engine.shard.save_shards(str(folder))


def usage_of(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Bytes of `model`'s parameters and `optimizer`'s state in this process (its shards
    only, if sharded), the process's peak resident memory and its CPU seconds so far."""
    states = [v for s in optimizer.state.values() for v in s.values()]
    return {
        "params": sum(_local(p).nbytes for p in model.parameters()),
        "optimizer": sum(_local(v).nbytes for v in states if isinstance(v, torch.Tensor)),
        "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cpu_s": time.process_time(),
    }


def _grad(out: torch.Tensor, leaf: torch.Tensor, keep: bool = False) -> torch.Tensor:
    (g,) = torch.autograd.grad(out, leaf, retain_graph=keep, allow_unused=True)
    return torch.zeros_like(leaf) if g is None else g


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to(HOST)


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    """This rank's shard of a (DTensor) parameter or gradient."""
    if t is None:
        return None
    return t.to_local() if hasattr(t, "to_local") else t


def _cosine(a: list[torch.Tensor | None], b: list[torch.Tensor | None]) -> float:
    """Cosine of two sharded gradients from per-rank sums (None = zeros); NaN when
    either is zero or not finite (no direction to compare)."""
    dot = na = nb = 0.0
    for x, y in zip(a, b, strict=True):
        x64 = x.double().reshape(-1) if x is not None else None
        y64 = y.double().reshape(-1) if y is not None else None
        if x64 is not None:
            na += float(x64 @ x64)
        if y64 is not None:
            nb += float(y64 @ y64)
        if x64 is not None and y64 is not None:
            dot += float(x64 @ y64)
    dot, na, nb = ranks.all_sum([dot, na, nb])
    if not (math.isfinite(dot) and math.isfinite(na) and math.isfinite(nb)) or na == 0 or nb == 0:
        return math.nan
    return max(-1.0, min(1.0, dot / math.sqrt(na * nb)))


def serve() -> None:
    """A worker rank: build its shard when told, then run each command on it until exit.
    Ctrl-C (which torchrun passes on to every rank) is rank 0's to handle: it checkpoints
    the interrupted run with every rank, then sends exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    shard: ShardedPolicy | None = None
    while True:
        name, args = ranks.Commands.receive()
        if name == "exit":
            return
        if name == "init":
            torch.manual_seed(0)  # nothing on a worker samples; keep it deterministic anyway
            shard = ShardedPolicy(*args)
        elif shard is None:
            raise RuntimeError(f"command {name!r} before the policy was built")
        else:
            getattr(shard, name)(*args)
