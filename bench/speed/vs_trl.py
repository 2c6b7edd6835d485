"""Part 2 of `minirl bench speed`: our trainer's step against TRL's GRPOTrainer.

TRL runs in its own virtual environment (bench/.venv-trl: TRL pins its own transformers,
accelerate and datasets), as a subprocess (`python -m bench.speed.trl_step`) that receives what
to match in a JSON spec. Rounds alternate TRL and our loop's per-step work on the same
checkpoint and example sets, each round from the cold-start weights. This module does
not install anything unless asked (`setup_trl_venv`, `minirl bench speed --setup-trl`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import REPO
from bench.speed.fixture import Effort, Setup, say
from bench.speed.stats import median_ratio_ci
from core.errors import UserError

TRL_VENV = REPO / "bench" / ".venv-trl"
TRL_PINS = ("trl==1.16.0", "transformers==5.19.0")  # the transformers our checkpoints load in
TORCH_PIN = "torch==2.13.0"  # in every pip command: never let TRL's deps pull a CUDA torch


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows) if rows else float("nan")


def trl_python(path: str | None) -> Path:
    py = Path(path) if path else TRL_VENV / "bin" / "python"
    if not py.is_file():
        raise UserError(
            f"TRL's Python {py} is missing; create it once with `minirl bench speed "
            "--setup-trl`, or pass --trl-python, or --skip trl"
        )
    return py


def setup_trl_venv() -> int:
    """Create bench/.venv-trl with TRL and the pinned CPU torch (TRL pins its own deps)."""
    py = TRL_VENV / "bin" / "python"
    if not py.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(TRL_VENV)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH_PIN], check=True)  # first, so nothing pulls a CUDA build
    subprocess.run([*pip, TORCH_PIN, *TRL_PINS], check=True)
    subprocess.run(
        [str(py), "-c", "import torch, trl; assert '+cpu' in torch.__version__"], check=True
    )
    print(f"TRL environment ready: {TRL_VENV}")
    return 0


def _trl_round(s: Setup, py: Path, steps: int, threads: int, root: Path) -> dict[str, Any]:
    """TRL's trainer for `steps` rollouts on the example sets 0..steps-1, in a subprocess."""
    from trainer.config import config_to_dict

    cfg, sp = s.cfg, s.cfg.sampling
    examples = [ex for i in range(steps) for ex in s.examples(i)]
    spec = {
        "checkpoint": str(s.ckpt),
        "task": config_to_dict(cfg)["task"],
        "prompts": [ex.prompt for ex in examples],
        "answers": [ex.answer for ex in examples],
        "prompts_per_step": cfg.train.prompts_per_step,
        "n": sp.n,
        "steps": steps,
        "mini_batches": cfg.train.mini_batches,
        "max_new_tokens": sp.max_new_tokens,
        "temperature": sp.temperature,
        "top_p": sp.top_p,
        "top_k": sp.top_k,
        "eps_low": cfg.loss.eps_low,
        "eps_high": cfg.loss.eps_high,
        "optim": dataclasses.asdict(cfg.optim),
        "threads": threads,
        "seed": cfg.seed,
    }
    spec_path, out_path, log_path = root / "trl_spec.json", root / "trl_out.json", root / "trl.log"
    spec_path.write_text(json.dumps(spec))
    # our task's verifier is imported from the checkout, a user's `module:function` one
    # from the folders it was found in here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *_user_paths()])}
    cmd = [str(py), "-m", "bench.speed.trl_step", str(spec_path), str(out_path)]
    with log_path.open("w") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-15:])
        raise RuntimeError(f"TRL subprocess failed (exit {done.returncode}):\n{tail}")
    out = json.loads(out_path.read_text())
    n = cfg.train.mini_batches  # TRL counts one optimiser update as a step
    for key in ("step_wall_s", "step_cpu_s"):
        per = out[key]
        out[key] = [sum(per[k * n : (k + 1) * n]) for k in range(len(per) // n)]
    return out


def _user_paths() -> list[str]:
    """This process's import folders that are not an installation (no stdlib, no
    site-packages), so a `module:function` verifier imports the same in TRL's process."""
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = []
    for entry in sys.path:
        path = Path(entry or os.getcwd()).resolve()
        installed = any(path == p or p in path.parents for p in prefixes)
        if path.is_dir() and not installed and "site-packages" not in path.parts:
            out.append(str(path))
    return list(dict.fromkeys(out))


def _ours_round(s: Setup, engine: Any, steps: int, mon: Any, first: int) -> list[dict]:
    """Our loop's per-step work (rl_step, verified weight sync, Monitor.log) for `steps`
    rollouts from the cold-start weights, on TRL's example sets 0..steps-1."""
    s.policy.load_state_dict(s.snapshot)
    engine.update_weights(s.policy.model)
    rows = []
    for i in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        result = s.rl_step(s.examples(i), i, engine, s.cfg.train.diagnostics)
        t1 = time.perf_counter()
        engine.update_weights(s.policy.model)
        t2 = time.perf_counter()
        result.scalars["perf/sync_s"] = t2 - t1
        mon.log(first + i, result.scalars, result.distributions)
        sc = result.scalars
        rows.append(
            {
                "wall": time.perf_counter() - t0,
                "cpu": time.process_time() - c0,
                "step": t1 - t0,
                "sync": t2 - t1,
                "len": sc["response/len_mean"],
                "reward": sc["reward/mean"],
            }
        )
    return rows


def trl_comparison(
    s: Setup, effort: Effort, trl_python_path: str | None, threads: int, root: Path
) -> dict:
    """Rounds of [TRL, ours with the configured engine, ours with the PyTorch fp32 engine]."""
    from monitor import Monitor
    from trainer.engines.factory import make_inference_engine

    py = trl_python(trl_python_path)
    steps = effort.warmup + effort.trl_steps
    engines = {_engine_label(s.cfg.engine): s.engine}
    torch_fp32 = dataclasses.replace(
        s.cfg.engine,
        inference="torch",
        inference_dtype="fp32",
        weight_quant="none",
        activation_quant="none",
    )
    if _engine_label(torch_fp32) not in engines:
        engines[_engine_label(torch_fp32)] = make_inference_engine(s.ckpt, torch_fp32)
    trl_rows: list[dict] = []
    ours: dict[str, list[dict]] = {k: [] for k in engines}
    info: dict[str, Any] = {}
    mon = Monitor(root / "vs_trl")
    logged = 0
    try:
        for r in range(effort.trl_rounds):
            out = _trl_round(s, py, steps, threads, root)
            info = {"versions": out["versions"], "setup_s": out["setup_s"]}
            lens, rewards = out["completion_len"], out["reward"]
            for k in range(effort.warmup, steps):
                trl_rows.append(
                    {
                        "wall": out["step_wall_s"][k],
                        "cpu": out["step_cpu_s"][k],
                        "len": lens[k],
                        "reward": rewards[k],
                    }
                )
            for label, engine in engines.items():
                rows = _ours_round(s, engine, steps, mon, first=logged + 1)
                logged += steps  # one store for all rounds: its steps only move forward
                ours[label] += rows[effort.warmup :]
            mine = ", ".join(f"{k} {_med(v, 'wall'):.2f} s" for k, v in ours.items())
            trl_s = _med(trl_rows, "wall")
            say(f"TRL round {r + 1}/{effort.trl_rounds}: TRL {trl_s:.2f} s/rollout, ours {mine}")
    finally:
        mon.close()
        for engine in engines.values():
            if engine is not s.engine:
                engine.close()
    # TRL ÷ ours per rollout: step k of round r used the same prompts on both sides
    speedup = {
        key: {
            k: median_ratio_ci([t[key] for t in trl_rows], [o[key] for o in v])
            for k, v in ours.items()
        }
        for key in ("wall", "cpu")
    }
    return {"trl": trl_rows, "ours": ours, "speedup": speedup, **info}


def _engine_label(e: Any) -> str:
    name = {"torch": "PyTorch", "vllm": "vLLM"}[e.inference]
    quant = "" if e.weight_quant == "none" else f" + {e.weight_quant} weights"
    return f"{name} {e.inference_dtype}{quant}"
