"""The FSDP2 training engine: π_θ sharded over the ranks of a torchrun job, data-parallel.

Each rank holds `FSDPShard`: the transformers policy (torch/training.py) with every
decoder layer and then the root wrapped by `fully_shard` (parameters, gradients and AdamW
state sharded) in the one training engine of local.py, and runs the forward and backward
of its share of the rows. Rank 0 holds `FSDPTrainingEngine`, the
`TrainingEngine` the loop sees (rank_zero.py: each call is broadcast to the other ranks
and run by all of them together; the loss and every diagnostic are computed on rank 0 on
the whole batch). FSDP sums (not averages) the gradients over ranks, so ∇θ is that of
the whole batch; the gradient norm, clipping, the non-finite skip and the cosine probe
use global sums. Checkpoints go through torch.distributed.checkpoint: every rank writes
its shards (reshard.py reads them on another world size).
"""

from __future__ import annotations

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

from trainer.engines.distributed.rank_zero import RankZeroEngine, Shard, usage_on_rank_0
from trainer.engines.distributed.reshard import full_fqn_state
from trainer.engines.local import LocalTrainingEngine
from trainer.engines.torch.training import TorchPolicy
from trainer.engines.update import UpdateSettings

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
_FULL_FROM_0 = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a transformers causal LM (each becomes one FSDP unit)."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no decoder layers at .model.layers to shard")
    return layers


class FSDPShard(Shard):
    """One rank's part of the policy. Every method is run by all ranks together (rank 0
    passes the whole batch as `data`, the others nothing). The arguments are
    TorchTrainingEngine's (`policy_args`: TorchPolicy's)."""

    def __init__(self, checkpoint_dir: str | Path, optim: UpdateSettings, **policy_args: Any):
        # the whole policy, on this rank
        policy = TorchPolicy(checkpoint_dir, **policy_args)
        self.dtype = policy.dtype
        self.model = policy.model
        device = next(self.model.parameters()).device.type
        mesh = init_device_mesh(device, (dist.get_world_size(),))
        for layer in decoder_layers(self.model):
            fully_shard(layer, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        for module in self.model.modules():
            if isinstance(module, FSDPModule):  # ∇ of the whole batch: sum over ranks
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        self.engine = LocalTrainingEngine(policy, optim)  # AdamW over this rank's shards
        self.optimizer = self.engine.optimizer

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
        self.engine.set_lr_scale(lr_scale)
        self._graph = None

    def load_full(self, lr_scale: float, data: Any = None) -> None:
        """Load a single-process checkpoint that rank 0 holds as full FQN-keyed state."""
        model_sd, optim_sd = data if data is not None else ({}, {})
        set_model_state_dict(self.model, model_sd, options=_FULL_FROM_0)
        set_optimizer_state_dict(self.model, self.optimizer, optim_sd, options=_FULL_FROM_0)
        self.engine.set_lr_scale(lr_scale)
        self._graph = None

    def usage(self) -> list[dict[str, float]] | None:
        """`usage_of` this rank; the list of every rank's on rank 0."""
        return usage_on_rank_0(self.model, self.optimizer)

    def _dcp_state(self) -> dict[str, Any]:
        return {
            "model": get_model_state_dict(self.model),
            "optim": get_optimizer_state_dict(self.model, self.optimizer),
        }


class FSDPTrainingEngine(RankZeroEngine):
    """`TrainingEngine` on rank 0 of a torchrun job (rank_zero.py), over FSDP2 shards;
    its checkpoints go through torch.distributed.checkpoint."""

    shard_type = FSDPShard
    shard: FSDPShard

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
            full = full_fqn_state(self._mirror, state)
            self._run("load_full", scale)
            self.shard.load_full(scale, full)
        self._leaf, self._stale = None, True


class ShardedState:
    """What `FSDPTrainingEngine.state_dict` returns: the checkpoint writer calls `write`
    (every rank saves its shards into `folder`) and stores `meta` beside it."""

    def __init__(self, engine: FSDPTrainingEngine) -> None:
        self.engine = engine
        self.meta = {"lr_scale": engine.shard.engine.lr_scale, "world_size": engine.world_size}

    def write(self, folder: Path) -> None:
        """`folder` is new (trainer/checkpoints.py never reuses one)."""
        self.engine._run("save_shards", str(folder))
        self.engine.shard.save_shards(str(folder))
