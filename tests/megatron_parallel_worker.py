"""The job of tests/test_megatron_parallel.py (torchrun, 2 gloo processes): the Megatron
engine on rank 0 of the job (`MegatronRankZero`, rank 1 serving), expert parallel EP
(argv) on the tiny Qwen3-MoE, runs `updates` and writes what it saw to <out>/two.pt;
then loads the single-process engine's checkpoint <out>/one.pt (resume 1 -> 2), makes
one more update and writes <out>/two_resumed.pt. `updates` is also what the test runs
on the single-process engine, so both see the same batch and the same calls."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from trainer import distributed
from trainer.engines.config import EngineConfig, MegatronConfig, OptimConfig

OPTIM = OptimConfig(lr=1e-3, grad_clip=0.5)


def config(ep: int) -> EngineConfig:
    return EngineConfig(training="megatron", megatron=MegatronConfig(expert_model_parallel_size=ep))


def batch(rows: int = 5, seq: int = 12) -> tuple[torch.Tensor, ...]:
    """Right-padded rows, prompts of 4 tokens, responses of 0..8 tokens; 5 rows split 3 + 2
    over the ranks (unequal shares)."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 99, (rows, seq), generator=g)
    attention = torch.zeros(rows, seq, dtype=torch.long)
    response = torch.zeros(rows, seq)
    for b, n in enumerate([8, 3, 0, 5, 6][:rows]):
        attention[b, : 4 + n] = 1
        response[b, 4 : 4 + n] = 1
        ids[b, 4 + n :] = 0
    return ids, attention, response


def one_update(engine: Any, routes: torch.Tensor) -> dict[str, float]:
    """A REINFORCE-like loss on log π under R2 replay of `routes`, then `step`."""
    ids, attention, response = batch()
    logp, _, _ = engine.forward_logprobs(ids, attention, response, replay=routes)
    advantage = torch.tensor([1.0, -0.5, 0.3, -1.0, 0.7])[:, None]
    return engine.step(-(logp * advantage * response).sum() / response.sum())


def updates(engine: Any) -> dict[str, Any]:
    """θ_old pass (routes, entropy), an update, an lr scale, an update with the cosine
    probe; the state and the transformers view afterwards."""
    ids, attention, response = batch()
    with torch.no_grad():
        logp, entropy, routes = engine.forward_logprobs(
            ids, attention, response, record=True, with_entropy=True
        )
    first = one_update(engine, routes)
    engine.set_lr_scale(0.5)
    logp2, _, _ = engine.forward_logprobs(ids, attention, response, replay=routes)
    second, cosine = engine.step_with_grad_cosine(-(logp2 * response).sum(), logp2[:, 5:].sum())
    return {
        "logp": logp,
        "entropy": entropy,
        "routes": routes,
        "first": first,
        "second": second,
        "cosine": cosine,
        "state": engine.state_dict(),
        "hf": {k: v.clone() for k, v in engine.model.state_dict().items()},
    }


def main(ckpt: str, out: Path, ep: int) -> int:
    from trainer.engines.factory import make_training_engine
    from trainer.engines.megatron.parallel import MegatronRankZero

    torch.manual_seed(0)
    engine = make_training_engine(ckpt, config(ep), OPTIM)
    assert isinstance(engine, MegatronRankZero)
    torch.save(updates(engine), out / "two.pt")
    engine.load_state_dict(torch.load(out / "one.pt", weights_only=True))
    routes = torch.load(out / "two.pt", weights_only=True)["routes"]
    stats = one_update(engine, routes)
    torch.save({"stats": stats, "state": engine.state_dict()}, out / "two_resumed.pt")
    return 0


if __name__ == "__main__":
    from trainer.engines.distributed.rank_zero import serve

    ckpt_dir, out_dir, ep_size = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    distributed.run_ranks(lambda: main(ckpt_dir, out_dir, ep_size), serve)
