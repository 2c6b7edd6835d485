"""Held-out accuracy of the trained weights themselves (π, fp32), beside the lab's eval/acc.

The lab's `eval/acc` samples from the inference engine, i.e. from μ: vLLM with MXFP4-
rounded weights. That is what a deployment of these weights would serve, but it is not
the policy the trainer optimises, and a variant can look better on μ while π is not (the
no-IS-correction gradient pushes π towards μ's samples). This module samples the same
held-out prompts from the training engine's model at each checkpoint a run kept, and at
its cold start, with the run's evaluation settings, and caches the results per run and
checkpoint steps in `<lab-dir>/policy_eval.json`; the report puts π beside μ.

What it does not do: train, or change any run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.lab.manifest import RunSpec

CACHE = "policy_eval.json"
PI_CACHE = "pi_eval.json"
"""Per run directory (outside the lab: `minirl bench remediation`'s runs): π's held-out
accuracy at each kept checkpoint."""


def read_cache(path: Path) -> dict[str, Any]:
    """A JSON cache of measurements ({} if missing, torn or not a mapping: a torn cache is
    remeasured, not trusted)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(path: Path, data: dict[str, Any]) -> None:
    """Replace the cache at once (a reader never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def load_policy_evals(lab_dir: Path) -> dict[str, dict[str, Any]]:
    """{run key: {"steps": [...], "pi": [...], "pi0": x}} measured so far ({} if none)."""
    return read_cache(Path(lab_dir) / CACHE)


def load_run(run_dir: Path) -> tuple[Any, Path, Any, Any]:
    """A run's own resolved config, its cold-start checkpoint and the policy model and
    tokenizer loaded from that checkpoint (the weights a run's checkpoints replace).
    The config is read less its monitor section: measuring a run does not read it, and
    runs of older revisions name detectors this one no longer has."""
    from core.safe_yaml import read_yaml_mapping
    from trainer.coldstart import cold_start
    from trainer.config import config_from_dict
    from trainer.models import load_policy
    from trainer.run import CONFIG_FILE

    data = read_yaml_mapping(Path(run_dir) / CONFIG_FILE, "config")
    data.pop("monitor", None)
    cfg = config_from_dict(data)
    start = cold_start(cfg.model, cfg.task, cfg.cold_start, eval_cfg=cfg.eval, progress=False)
    model, tokenizer = load_policy(start.path, cfg.engine.train_dtype)
    return cfg, start.path, model, tokenizer


def eval_policy_at(run_dir: Path, steps: list[int | None]) -> list[float]:
    """Sampled held-out accuracy of π at each checkpoint step (None: the cold start),
    loading the run's model once."""
    import torch  # here, so that the report (which reads the cache) needs no torch

    from trainer.checkpoints import list_checkpoints, load_checkpoint
    from trainer.evaluate import policy_accuracy
    from trainer.tasks import make_task

    cfg, _, model, tokenizer = load_run(run_dir)
    cold = {k: v.clone() for k, v in model.state_dict().items()}
    task, ckpts, out = make_task(cfg.task), list_checkpoints(run_dir), []
    for step in steps:
        weights = cold if step is None else load_checkpoint(ckpts[step])["policy"]["model"]
        model.load_state_dict(weights)
        with torch.no_grad():
            out.append(
                policy_accuracy(
                    model, tokenizer, task, cfg.eval, max_new_tokens=cfg.sampling.max_new_tokens
                )
            )
    return out


def pi_at_checkpoints(run_dir: Path, measure: bool = True) -> list[tuple[int, float]]:
    """(step, π's held-out accuracy) at every checkpoint the run kept, cached in the run
    directory (`PI_CACHE`, remeasured when the kept checkpoints change; with `measure`
    False, [] instead)."""
    from trainer.checkpoints import list_checkpoints

    steps = sorted(list_checkpoints(run_dir))
    cached = read_cache(run_dir / PI_CACHE)
    if cached.get("steps") != steps:
        if not measure:
            return []
        pis = eval_policy_at(run_dir, list(steps)) if steps else []
        cached = {"steps": steps, "pi": pis}
        write_cache(run_dir / PI_CACHE, cached)
    return list(zip(cached["steps"], cached["pi"], strict=True))


def run_policy_evals(lab_dir: Path, specs: list[RunSpec], say: Any = print) -> dict:
    """Measure π at every kept checkpoint (the last three: 150, 175, 200 in the full lab)
    of every finished run not measured at those steps, and π at its cold start."""
    from bench.lab.summary import summarize_run
    from trainer.checkpoints import list_checkpoints

    lab_dir = Path(lab_dir)
    done = load_policy_evals(lab_dir)
    pi0: dict[str, float] = {}  # per recipe: every seed starts from the same cold start
    for spec in specs:
        summary = summarize_run(spec.run_dir)
        run_dir = Path(spec.run_dir)
        steps = sorted(list_checkpoints(run_dir))
        if summary is None or not summary.finished or not steps:
            continue
        if done.get(spec.key, {}).get("steps") == steps:
            continue
        setting = spec.key.split("/")[0]
        cold = [] if setting in pi0 else [None]
        pis = eval_policy_at(run_dir, [*cold, *steps])
        if cold:
            pi0[setting], pis = pis[0], pis[1:]
        done[spec.key] = {"steps": steps, "pi": pis, "pi0": pi0[setting]}
        say(f"  {spec.key}: π at steps {steps}: {', '.join(f'{x:.3f}' for x in pis)}")
        write_cache(lab_dir / CACHE, done)
    return done
