"""What every part of `minirl bench speed` shares: the repetitions, the warmed-up engines.

`make_setup` builds the run config's tiny model after its (cached) cold start, a training
engine, an inference engine and the policy snapshot every measured step starts from, so
that the parts compare like with like: the same θ, prompts and seeds on both sides.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Effort:
    """How many repetitions each part makes (full mode vs --quick).

    Attributes:
        pairs: diagnostics on/off step pairs, after `warmup` pairs that are not counted.
        trl_rounds: timed rounds of the trainer step vs TRL's GRPOTrainer, `trl_steps`
            steps each.
        engine_repeats: repeats of each rollout-engine measurement.
        write_steps: steps written by the run-store write benchmark, and `load_steps`
            those of the long store it reads back (a multiple of 1000).
    """

    pairs: int = 40
    warmup: int = 2
    trl_rounds: int = 5
    trl_steps: int = 3
    engine_repeats: int = 5
    write_steps: int = 2000
    load_steps: int = 100_000


QUICK = Effort(
    pairs=4,
    warmup=1,
    trl_rounds=1,
    trl_steps=2,
    engine_repeats=2,
    write_steps=200,
    load_steps=5000,
)


def say(text: str) -> None:
    print(f"[bench speed] {text}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Setup:
    """The warmed-up pieces every part shares."""

    cfg: Any
    ckpt: Path
    task: Any
    policy: Any
    engine: Any
    controls: Any
    snapshot: dict

    def examples(self, i: int) -> list:
        """Example set i: the same prompts for every arm and trainer that uses index i."""
        return self.task.sample_train(self.cfg.train.prompts_per_step, seed=f"speed:{i}")

    def rl_step(self, examples: list, i: int, engine: Any, diagnostics: bool) -> Any:
        """`rl_step` of the current policy on `examples` (seed i) through `engine`, with the
        run config's sampling, controls and advantage settings."""
        from trainer.step import rl_step

        tc = self.cfg.train
        return rl_step(
            examples,
            self.policy,
            engine,
            self.task,
            self.controls,
            self.cfg.sampling,
            seed=i,
            advantage_baseline=tc.advantage_baseline,
            advantage_std_norm=tc.advantage_std_norm,
            diagnostics=diagnostics,
        )


def make_setup(cfg: Any, threads: int) -> Setup:
    import torch

    from trainer.coldstart import cold_start
    from trainer.controls import Controls
    from trainer.engines.factory import make_inference_engine, make_training_engine
    from trainer.tasks import make_task

    torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)
    start = cold_start(cfg.model, cfg.task, cfg.cold_start, eval_cfg=cfg.eval, progress=True)
    policy = make_training_engine(start.path, cfg.engine, cfg.optim)
    engine = make_inference_engine(start.path, cfg.engine)
    controls = Controls(cfg.loss, cfg.train.mini_batches, cfg.train.routing_replay)
    snapshot = copy.deepcopy(policy.state_dict())
    return Setup(cfg, Path(start.path), make_task(cfg.task), policy, engine, controls, snapshot)


def timed_step(s: Setup, i: int, diagnostics: bool, mon: Any, step: int) -> dict[str, float]:
    """One `rl_step` on example set i (seed i) from the snapshot weights, logged to `mon`."""
    s.policy.load_state_dict(s.snapshot)
    examples = s.examples(i)
    c0, t0 = time.process_time(), time.perf_counter()
    result = s.rl_step(examples, i, s.engine, diagnostics)
    t1 = time.perf_counter()
    mon.log(step, result.scalars, result.distributions)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    sc = result.scalars
    return {
        "wall": wall,
        "cpu": cpu,
        "log": time.perf_counter() - t1,
        "rollout": sc["perf/rollout_s"],
        "train": sc["perf/train_s"],
        "diag": sc["perf/diag_s"],
        "len": sc["response/len_mean"],
        "scalars": float(len(sc)),
    }
