"""The Megatron engine on the ranks of a torchrun job: expert parallel and data parallel
with Megatron's own parallel state (`engine.megatron`'s sizes, in the job's world).

Each rank holds `MegatronShard`: the training engine (local.py) of a `MegatronPolicy`
holding its num_experts / ep experts of every MoE layer (Megatron's allgather token
dispatcher reaches the others), everything else replicated. Rank 0 holds
`MegatronRankZero`, the engine the loop sees (distributed/rank_zero.py).

The update equals the single-process engine's on the same batch: the dense gradients
are summed over Megatron's data-parallel group and the expert gradients over its
expert-data-parallel group (an expert's owner already holds the gradient of every EP
rank's tokens routed to it). The global norm counts each distinct gradient once, then
the same clip, non-finite skip and AdamW on every rank. Checkpoints and the weight
sync gather the whole model on rank 0 (state.py: experts by global index, so a
checkpoint resumes on any world size, this engine's or the single-process one's).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer import distributed as ranks
from trainer.engines.distributed.rank_zero import RankZeroEngine, Shard, usage_on_rank_0
from trainer.engines.local import LocalTrainingEngine
from trainer.engines.megatron import convert
from trainer.engines.megatron import state as megatron_state
from trainer.engines.megatron.training import MegatronPolicy, check_megatron_checkpoint
from trainer.engines.update import UpdateSettings


class MegatronShard(Shard):
    """One rank's part of the Megatron policy; every method runs on all ranks together.
    The arguments are MegatronTrainingEngine's (`policy_args`: MegatronPolicy's keywords)."""

    def __init__(self, checkpoint_dir: str | Path, optim: UpdateSettings, **policy_args: Any):
        policy = MegatronPolicy(checkpoint_dir, **policy_args)
        self.engine = LocalTrainingEngine(policy, optim)
        self.engine.update.clip = self.clip_gradients  # the norm over all ranks
        self.module, self.global_names = policy.module, policy.global_names
        self.hf_config, self.ep_size = policy.hf_config, policy.ep_size
        self.optimizer = self.engine.optimizer
        from megatron.core import parallel_state as ps

        self._expert = [megatron_state.is_expert(n) for n, _ in self.module.named_parameters()]
        self._groups = {
            False: ps.get_data_parallel_group(),
            True: ps.get_expert_data_parallel_group(),
        }
        self._ep_group = ps.get_expert_model_parallel_group()
        edp, world = dist.get_world_size(self._groups[True]), dist.get_world_size()
        self._weights = [1 / edp if e else 1 / world for e in self._expert]
        first_holder = {False: dist.get_rank() == 0, True: ps.get_expert_data_parallel_rank() == 0}
        self._held = {  # the global names this rank contributes to a gathered whole model
            g for n, g in self.global_names.items() if first_holder[megatron_state.is_expert(n)]
        }
        self._layouts: list[Any] = [None] * world  # every rank's local -> global names
        dist.all_gather_object(self._layouts, self.global_names)

    # ------------------------------------------------------------------ rows and gradients

    def pad_rows(self, rows: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """Equal row counts on the EP ranks (the allgather dispatcher gathers equal
        shapes): all-padding rows (no response, replay -1) up to the largest share."""
        if self.ep_size == 1:
            return rows
        most = torch.tensor([len(rows[0])])
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self._ep_group)
        extra = int(most) - len(rows[0])
        if extra == 0:
            return rows
        fill = [0, 0, 0, -1]  # ids, attention, response mask, replay
        return [
            None if t is None else torch.cat([t, t.new_full((extra, *t.shape[1:]), v)])
            for t, v in zip(rows, fill, strict=True)
        ]

    def part_weights(self) -> list[float]:
        return self._weights

    def reduce_gradients(self) -> None:
        """Sum the dense gradients over the data-parallel group and the experts' over the
        expert-data-parallel group (a parameter without a gradient on every rank stays
        without one, as in one process: AdamW then leaves it alone)."""
        params = list(self.module.parameters())
        for expert, group in self._groups.items():
            mine = [p for p, e in zip(params, self._expert, strict=True) if e == expert]
            if dist.get_world_size(group) == 1 or not mine:
                continue
            had = torch.tensor([float(p.grad is not None) for p in mine])
            flat = torch.cat(
                [
                    had,
                    *[
                        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                        for p in mine
                    ],
                ]
            )
            dist.all_reduce(flat, group=group)
            had, rest = flat[: len(mine)], flat[len(mine) :]
            for p, n, g in zip(mine, had, rest.split([p.numel() for p in mine]), strict=True):
                p.grad = g.view_as(p).clone() if n > 0 else None

    def clip_gradients(self) -> float:
        """Clip by the global norm over all ranks, each distinct gradient counted once (a
        collective: the same norm, so the same step or skip, on every rank)."""
        pairs = [(p, w) for p, w in zip(self.module.parameters(), self._weights, strict=True)]
        pairs = [(p, w) for p, w in pairs if p.grad is not None]
        (squares,) = ranks.all_sum(
            [sum(w * float(p.grad.double().square().sum()) for p, w in pairs)]
        )
        norm = math.sqrt(squares) if squares >= 0 else math.nan
        grad_clip = self.engine.optim.grad_clip
        if pairs and grad_clip > 0:
            grads = [p for p, _ in pairs]
            torch.nn.utils.clip_grads_with_norm_(grads, grad_clip, torch.tensor(norm))
        return norm

    # ------------------------------------------------------------------ the whole model

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole model's weights in transformers naming on rank 0 (empty elsewhere)."""
        mine = {
            self.global_names[n]: t.detach().to("cpu")
            for n, t in self.module.state_dict().items()
            if torch.is_tensor(t) and self.global_names[n] in self._held
        }
        parts = ranks.gather_to_rank_0(mine)
        if parts is None:
            return {}
        whole = {k: v for part in parts for k, v in part.items()}
        return convert.megatron_to_hf(whole, self.hf_config)

    def gather_state(self) -> dict | None:
        """The checkpoint of the whole model on rank 0 (None elsewhere), in the layout of
        the single-process engine's `state_dict`."""
        part = megatron_state.named_state(
            self.module, self.optimizer, self.global_names, self._held
        )
        parts = ranks.gather_to_rank_0(part)
        if parts is None:
            return None
        return {**megatron_state.merge(parts), "lr_scale": self.engine.lr_scale}

    def load_state(self, data: dict | None = None) -> None:
        """Load a whole checkpoint that rank 0 holds (of any world size): each rank gets
        its experts and their AdamW state by global name."""
        shares = None
        if data is not None:
            shares = [
                (*megatron_state.local_state(data, self.module, names), float(data["lr_scale"]))
                for names in self._layouts
            ]
        box: list[Any] = [None]
        dist.scatter_object_list(box, shares, src=0)
        weights, optim, scale = box[0]
        convert.load_into(self.module, weights)
        self.optimizer.load_state_dict(optim)
        self.engine.set_lr_scale(scale)
        self._graph = None

    def usage(self) -> list[dict[str, float]] | None:
        """`usage_of` this rank; the list of every rank's on rank 0."""
        return usage_on_rank_0(self.module, self.optimizer)


class MegatronRankZero(RankZeroEngine):
    """`TrainingEngine` on rank 0 of a torchrun job over `MegatronShard`s."""

    shard_type = MegatronShard
    shard: MegatronShard

    def state_dict(self) -> dict:
        """The whole model's checkpoint (gathered from every rank)."""
        self._run("gather_state")
        state = self.shard.gather_state()
        assert state is not None
        return state

    def load_state_dict(self, state: dict) -> None:
        check_megatron_checkpoint(state)
        self._run("load_state")
        self.shard.load_state(state)
        self._leaf, self._stale = None, True
