"""μ's held-out accuracy at the end of a run, measured precisely enough to compare runs.

A run's `eval/acc` samples 2 responses per held-out prompt (400 responses): a standard
error of about 2.5 points, so two runs whose last evaluations differ by 5 points may
not differ at all. This module measures the same quantity, the inference engine's
sampled held-out accuracy at the run's last checkpoint, with `FINAL_SAMPLES` responses
per prompt and a seed of its own: the run's engine settings, its rollout precision at
that checkpoint (the controls it saved) and its evaluation settings otherwise. The result
is cached in the run directory (`CACHE`), keyed by the checkpoint's step.

    python -m bench.lab.final_eval RUN_DIR [RUN_DIR ...]

One vLLM engine serves every run of a call (the lab's runs share a model shape): each
checkpoint is synced into it, verified, and sampled. It does not train or change a run.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from bench.lab.policy_eval import load_run, read_cache, write_cache

CACHE = "final_eval.json"
FINAL_SAMPLES = 32
"""Responses per held-out prompt (200 prompts: 6400 responses, a standard error of ≈ 0.6
points at an accuracy of 0.4)."""
FINAL_SEED = 4321
"""Not the in-run evaluation's seed: an independent measurement of the same weights."""


def final_accuracy(
    run_dir: Path, samples: int = FINAL_SAMPLES, seed: int = FINAL_SEED
) -> tuple[int, float] | None:
    """(step, accuracy) measured for the run's last checkpoint with `samples` and `seed`,
    or None when not measured (or measured for a checkpoint that is no longer its last)."""
    from trainer.checkpoints import list_checkpoints

    steps = list_checkpoints(run_dir)
    cached = read_cache(Path(run_dir) / CACHE)
    measured = tuple(cached.get(k) for k in ("step", "samples", "seed"))
    if not steps or measured != (max(steps), samples, seed):
        return None
    return int(cached["step"]), float(cached["acc"])


def measure(
    run_dirs: list[Path],
    samples: int = FINAL_SAMPLES,
    seed: int = FINAL_SEED,
    say: Any = print,
) -> None:
    """Measure every run in `run_dirs` whose last checkpoint is not measured yet (with
    `samples` responses per prompt and `seed`) and cache the result in its directory."""
    import torch

    from trainer.checkpoints import controls_from_data, list_checkpoints, load_checkpoint
    from trainer.engines.factory import make_inference_engine
    from trainer.evaluate import evaluate
    from trainer.incidents import apply_rollout_quant
    from trainer.tasks import make_task

    engine = None
    try:
        for run_dir in map(Path, run_dirs):
            steps = list_checkpoints(run_dir)
            if not steps or final_accuracy(run_dir, samples, seed) is not None:
                continue
            cfg, start, model, tokenizer = load_run(run_dir)
            step = max(steps)
            payload = load_checkpoint(steps[step])
            model.load_state_dict(payload["policy"]["model"])
            quant = controls_from_data(payload["controls"], cfg.engine.weight_quant).rollout_quant
            if engine is None:
                engine_cfg = dataclasses.replace(cfg.engine, weight_quant=quant)
                engine = make_inference_engine(start, engine_cfg)
            apply_rollout_quant(engine, model, quant)  # synced and verified
            eval_cfg = dataclasses.replace(cfg.eval, mode="sampled", samples=samples)
            with torch.no_grad():
                acc = evaluate(
                    engine,
                    tokenizer,
                    make_task(cfg.task),
                    eval_cfg,
                    max_new_tokens=cfg.sampling.max_new_tokens,
                    seed=seed,
                )["eval/acc"]
            write_cache(
                run_dir / CACHE,
                {"step": step, "acc": acc, "samples": samples, "seed": seed},
            )
            say(f"  {run_dir}: μ at step {step} ({quant}), {samples} per prompt: {acc:.4f}")
    finally:
        if engine is not None:
            engine.close()


if __name__ == "__main__":
    measure([Path(a) for a in sys.argv[1:]])
