"""The Megatron training engine (`engine.training: megatron`): π_θ as a megatron-core
`GPTModel`, with Routing Replay through megatron-core's own RouterReplay.

`MegatronPolicy` is the backend; `MegatronTrainingEngine` is that policy in the one
training engine of local.py, as the transformers engine is, so the RL step and the loop
do not know which one runs. The checkpoint's Qwen3-MoE weights are converted into
Megatron's layout at start (convert.py); `model` is a transformers module that receives
Megatron's current weights, converted back, whenever it is read: what the inference
engine syncs from and what π's evaluation samples. R2/R3 use Megatron's routes
(routing.py). AdamW and clipping are the transformers engine's update (update.py).

One process: every parallel size 1, in a 1-process gloo world of its own (megatron-core
needs a torch.distributed world; an in-process vLLM keeps the default one). In a torchrun
job the same policy is each rank's part of the model (parallel.py), with the sizes of
`engine.megatron`. fp32, arch qwen3_moe; on a CPU-only torch cpu.py patches first.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from torch import Tensor

from core.errors import UserError
from trainer import distributed
from trainer.engines.device import resolve_device
from trainer.engines.local import LocalTrainingEngine
from trainer.engines.megatron import convert
from trainer.engines.megatron import state as megatron_state
from trainer.engines.megatron.routing import routed
from trainer.engines.update import UpdateSettings
from trainer.models import load_policy

INSTALL_HINT = "pip install 'minirl[megatron]'"
_world: distributed.World | None = None


def megatron_world() -> AbstractContextManager[None]:
    """The world Megatron's parallel state lives in; enter it around every call into
    Megatron. In a torchrun job: the job's own (initialised by `init_parallel`); else a
    1-process gloo world of its own, made once per process with every parallel size 1."""
    global _world
    if distributed.active():
        return nullcontext()
    if _world is None:
        import torch.distributed as dist
        from megatron.core import parallel_state

        world = distributed.World()
        with world.active():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            parallel_state.initialize_model_parallel()
        _world = world
    return _world.active()


def check_sizes(world_size: int, num_experts: int, tp: int, pp: int, ep: int) -> None:
    """Raise ValueError (naming the engine.megatron key) unless tensor, pipeline and
    expert parallel sizes `tp`, `pp`, `ep` fit a job of `world_size` processes and a
    model of `num_experts` experts per layer."""
    hint = "; start that many processes with minirl train --nproc N"
    if world_size % (tp * pp):
        raise ValueError(
            f"engine.megatron.tensor_model_parallel_size={tp} * "
            f"pipeline_model_parallel_size={pp} must divide the world size {world_size}" + hint
        )
    if num_experts % ep:
        raise ValueError(
            f"engine.megatron.expert_model_parallel_size={ep} must divide the model's "
            f"{num_experts} experts per layer"
        )
    if (world_size // pp) % (ep * tp):
        raise ValueError(
            f"engine.megatron.expert_model_parallel_size={ep} * tensor_model_parallel_"
            f"size={tp} must divide the world size {world_size} (per pipeline stage)" + hint
        )


def init_parallel(num_experts: int, tp: int, pp: int, ep: int) -> None:
    """Check the tensor, pipeline and expert parallel sizes against this process's world
    and the model, then (in a torchrun job) initialise Megatron's parallel state in the
    job's world, once."""
    if tp > 1:
        raise UserError(
            f"engine.megatron.tensor_model_parallel_size={tp}: "
            "not supported; the weight conversion does not split tensors for tensor "
            "parallel, and on the CPU megatron-core 0.16.1 refuses MoE with tensor parallel "
            "(it needs sequence parallel, which its torch norms do not support). Use "
            "expert_model_parallel_size and data parallel (--nproc)"
        )
    try:
        check_sizes(distributed.world_size(), num_experts, tp, pp, ep)
    except ValueError as err:
        raise UserError(str(err)) from None
    if not distributed.active():
        return
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            expert_model_parallel_size=ep,
        )
    elif parallel_state.get_expert_model_parallel_world_size() != ep:
        raise RuntimeError("Megatron's parallel state was initialised with other sizes")


def megatron_logits(module: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """[B, S, V] logits of a Megatron GPTModel on right-padded rows: positions 0..S-1 and
    an explicit causal mask (Megatron's default one is allocated on CUDA)."""
    batch, seq = input_ids.shape
    positions = torch.arange(seq, device=input_ids.device).expand(batch, seq)
    causal = torch.ones(seq, seq, dtype=torch.bool, device=input_ids.device).triu(1)
    return module(input_ids, positions, attention_mask=causal[None, None])


def _require_megatron(device: torch.device) -> None:
    # megatron-core warns at import and on every forward about what a CPU install lacks
    # (Apex, Transformer Engine, a default tp group): noise in the trainer's output
    for category in (UserWarning, DeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module=r"megatron\.")
    # its expert-parallel token gathers call collectives torch deprecated (warned per call)
    warnings.filterwarnings(
        "ignore", r"`torch\.distributed\.\w+` is deprecated", FutureWarning, r"torch\."
    )
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        raise UserError(
            f"engine.training=megatron needs megatron-core, which is not installed: {INSTALL_HINT}"
        ) from None
    if device.type == "cpu" and torch.cuda.is_available():
        raise UserError("engine.training=megatron: engine.device=cpu on a CUDA machine; use cuda")
    from trainer.engines.megatron import cpu as megatron_cpu

    try:
        megatron_cpu.apply()
    except RuntimeError as err:
        raise UserError(f"engine.training=megatron: {err}") from None


class MegatronPolicy:
    """π_θ as a megatron-core GPTModel, world size 1 (or one rank's part of a torchrun
    job's model, parallel.py), with a transformers view; see the module docstring.
    fp32 only; the parallel sizes under megatron-core's names."""

    def __init__(
        self,
        checkpoint_dir: str | Path,
        *,
        device: str = "auto",
        tensor_model_parallel_size: int = 1,
        pipeline_model_parallel_size: int = 1,
        expert_model_parallel_size: int = 1,
    ) -> None:
        self.device = resolve_device(device)
        _require_megatron(self.device)
        hf_model, self.tokenizer = load_policy(checkpoint_dir, "fp32", self.device)
        self.hf_config = hf_model.config
        convert.check_supported(self.hf_config)
        init_parallel(
            self.num_experts,
            tensor_model_parallel_size,
            pipeline_model_parallel_size,
            expert_model_parallel_size,
        )
        self._hf = hf_model.requires_grad_(False)
        self.ep_size = expert_model_parallel_size
        with megatron_world():
            from megatron.core import parallel_state

            self.ep_rank = parallel_state.get_expert_model_parallel_rank()
            self.module = convert.build_model(
                self.hf_config, self.device.type == "cpu", self.ep_size
            )
        self.module.to(self.device).train()
        convert.load_into(
            self.module,
            convert.hf_to_megatron(
                hf_model.state_dict(), self.hf_config, self.ep_rank, self.ep_size
            ),
        )
        local = self.num_experts // self.ep_size
        self.global_names = {  # this module's weight names -> the world-size-1 names
            n: megatron_state.global_name(n, self.ep_rank, local)
            for n, t in self.module.state_dict().items()
            if torch.is_tensor(t)  # not Megatron's _extra_state entries
        }

    # ------------------------------------------------------------------ the HF view

    @property
    def model(self) -> torch.nn.Module:
        """The transformers policy with Megatron's current weights (copied in on read)."""
        weights = convert.megatron_to_hf(self.module.state_dict(), self.hf_config)
        convert.load_into(self._hf, weights)
        return self._hf

    @property
    def is_moe(self) -> bool:
        return True

    @property
    def num_experts(self) -> int:
        return int(self.hf_config.num_experts)

    # ------------------------------------------------------------------ forward

    def logits_and_routes(
        self, ids: Tensor, attn: Tensor, replay: Tensor | None, record: bool
    ) -> tuple[Tensor, Tensor | None]:
        """The GPTModel's logits through Megatron's RouterReplay (scoring.py does the rest,
        exactly as for the transformers policy; right padding needs no key mask under the
        causal mask: a pad only follows the tokens that are scored)."""
        with megatron_world(), routed(self.module, len(ids), replay, record) as cap:
            logits = megatron_logits(self.module, ids)
        return logits, cap.indices() if record else None

    # ------------------------------------------------------------------ the update

    def autograd_context(self) -> AbstractContextManager[None]:
        return megatron_world()

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """Megatron-layout weights and AdamW state by parameter name (state.py: the
        layout of every world size; weights_only-loadable)."""
        names = set(self.global_names.values())
        return megatron_state.named_state(self.module, optimizer, self.global_names, names)

    def load_state_dict(self, state: dict, optimizer: torch.optim.Optimizer) -> None:
        check_megatron_checkpoint(state)
        weights, optim = megatron_state.local_state(state, self.module, self.global_names)
        convert.load_into(self.module, weights)
        optimizer.load_state_dict(optim)


class MegatronTrainingEngine(LocalTrainingEngine):
    """`TrainingEngine` on megatron-core in one process: `MegatronPolicy` and AdamW over
    its parameters (`optim`); the other arguments are MegatronPolicy's."""

    def __init__(
        self,
        checkpoint_dir: str | Path,
        optim: UpdateSettings,
        *,
        device: str = "auto",
        tensor_model_parallel_size: int = 1,
        pipeline_model_parallel_size: int = 1,
        expert_model_parallel_size: int = 1,
    ) -> None:
        policy = MegatronPolicy(
            checkpoint_dir,
            device=device,
            tensor_model_parallel_size=tensor_model_parallel_size,
            pipeline_model_parallel_size=pipeline_model_parallel_size,
            expert_model_parallel_size=expert_model_parallel_size,
        )
        super().__init__(policy, optim)


def check_megatron_checkpoint(state: dict) -> None:
    """Refuse a checkpoint of the transformers engine (one process or FSDP2 shards)."""
    if "shards" in state or "model.embed_tokens.weight" in state["model"]:
        raise UserError(
            "checkpoint of engine.training=torch (its optimiser state does not fit "
            "Megatron's parameters): resume with --set engine.training=torch"
        )
