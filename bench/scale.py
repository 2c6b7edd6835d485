"""Benchmark: data-parallel training on 1 and 2 processes of this machine, in one run.

    minirl bench scale [--steps 10] [--updates 4] [--out bench/results/scale.md]

1. The RL step, end to end: `minirl train configs/demo_2proc.yaml` (the demo's tiny
   Qwen3-MoE, vLLM rollouts on rank 0) for --steps steps, three ways back to back: one
   process with 1 torch thread, one process with 2 threads, and `--nproc 2` (two ranks
   of 1 thread, FSDP2). Per step (median over the steps after the first): wall time,
   its training part (θ_old pass + updates: what the ranks share), the rollout (rank
   0's alone), and tokens per second.
2. The training engine alone, on a policy large enough for its state to matter
   (hidden 512, 8 layers, 8 experts): --updates timed updates (forward + backward +
   AdamW) on a fixed batch, and the bytes of weights and AdamW state each rank holds,
   sharded over 2 ranks vs unsharded in one process, with each process's peak RSS.

Writes --out (Markdown, with the command) and the same numbers as JSON beside it. Not
part of the test suite (minutes): the 2-process tests are tests/test_distributed.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.errors import UserError

CONFIG = "configs/demo_2proc.yaml"
STEP_METRICS = ("perf/step_s", "perf/train_s", "perf/rollout_s", "perf/tokens_per_s")
ROLLOUT = ("1 process, 1 thread", "1 process, 2 threads", "2 processes, 1 thread each")
BIG = dict(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4, head_dim=64)
BIG.update(num_experts=8, top_k=2, expert_intermediate_size=512, intermediate_size=1024)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minirl bench scale", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="RL steps per run (part 1)")
    p.add_argument("--updates", type=int, default=4, help="timed engine updates (part 2)")
    p.add_argument("--rows", type=int, default=32, help="rows of the engine batch (part 2)")
    p.add_argument("--seq", type=int, default=128, help="tokens per row (part 2)")
    p.add_argument("--out", default="bench/results/scale.md", help="Markdown output")
    p.add_argument("--engine-job", help=argparse.SUPPRESS)  # part 2, inside each process
    p.add_argument("--ckpt", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.engine_job:
        return _engine_job(args)
    if args.steps < 2 or args.updates < 2:
        # medians are over the steps (updates) after the first, which pays one-time costs
        raise UserError(f"--steps {args.steps} --updates {args.updates}: each must be >= 2")

    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="minirl-scale-") as tmp:
        steps = [_rl_run(Path(tmp) / f"run{i}", i, args.steps) for i in range(3)]
        engine = _engine_runs(Path(tmp), args)
    result = {
        "command": shlex.join(["minirl", "bench", "scale", *argv]),
        "cpus": os.cpu_count(),
        "load_avg_start": round(load0, 1),
        "load_avg_end": round(os.getloadavg()[0], 1),
        "rl_step": dict(zip(ROLLOUT, steps, strict=True)),
        "engine": engine,
    }
    out = Path(args.out)
    out.write_text(_markdown(result, args))
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    print(out.read_text())
    return 0


# --------------------------------------------------------------------------- part 1


def _rl_run(run_dir: Path, variant: int, steps: int) -> dict[str, float]:
    """One `minirl train` of the 2-process demo config; medians of its per-step perf/*."""
    from monitor import RunReader

    threads = 2 if variant == 1 else 1
    cmd = [sys.executable, "-m", "app.cli", "train", CONFIG, "--run-dir", str(run_dir)]
    cmd += ["--quiet", "--set", f"train.steps={steps}", "--set", f"threads={threads}"]
    cmd += ["--set", "eval.every=0", "--set", "checkpoint_every=0"]
    if variant == 2:
        cmd += ["--nproc", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    series = RunReader(run_dir).scalars(list(STEP_METRICS))
    row = {name: statistics.median(series[name][1].tolist()[1:]) for name in STEP_METRICS}
    return {**row, "command_s": wall}


# --------------------------------------------------------------------------- part 2


def _engine_runs(tmp: Path, args: argparse.Namespace) -> dict[str, dict]:
    """The engine job unsharded (one process) and sharded (2 ranks), each in fresh
    processes so that peak RSS compares like with like."""
    from trainer.launch import launch
    from trainer.models import ModelConfig, build_tiny_checkpoint

    ckpt = build_tiny_checkpoint(ModelConfig(**BIG), tmp / "big")
    job = ["bench", "scale", "--ckpt", str(ckpt), "--updates", str(args.updates)]
    job += ["--rows", str(args.rows), "--seq", str(args.seq)]
    out = {}
    for label, nproc in (("unsharded, 1 process", 1), ("sharded, 2 processes", 2)):
        path = tmp / f"engine{nproc}.json"
        command = [*job, "--engine-job", str(path)]
        if nproc == 1:
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            subprocess.run([sys.executable, "-m", "app.cli", *command], check=True, env=env)
        elif launch(command, nproc) != 0:
            raise RuntimeError("the sharded engine job failed")
        out[label] = json.loads(path.read_text())
    return out


def _engine_job(args: argparse.Namespace) -> int:
    """Inside the job's process(es): time updates of the training engine, report memory."""
    from trainer import distributed

    if distributed.launched():
        from trainer.engines.distributed.rank_zero import serve

        return distributed.run_ranks(lambda: _time_updates(args), serve)
    return _time_updates(args)


def _time_updates(args: argparse.Namespace) -> int:
    import torch

    from trainer.engines.config import EngineConfig, OptimConfig
    from trainer.engines.distributed.rank_zero import usage_of
    from trainer.engines.factory import make_training_engine

    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = make_training_engine(args.ckpt, EngineConfig(), OptimConfig(lr=1e-5))
    ids = torch.randint(3, 99, (args.rows, args.seq))
    attn = torch.ones_like(ids)
    mask = torch.zeros(args.rows, args.seq)
    mask[:, 8:] = 1  # an 8-token prompt, then the response
    adv = torch.linspace(-1, 1, args.rows)
    per_rank = getattr(policy, "usage_per_rank", None)

    def usage() -> list[dict[str, float]]:
        return per_rank() if per_rank else [usage_of(policy.model, policy.optimizer)]

    seconds, before = [], None
    for i in range(args.updates + 1):  # the first is a warm-up
        if i == 1:
            before = usage()
        t0 = time.perf_counter()
        logp, _, _ = policy.forward_logprobs(ids, attn, mask)
        policy.step(-(adv[:, None] * logp * mask).sum() / args.rows)
        seconds.append(time.perf_counter() - t0)
    memory = usage()
    for m, b in zip(memory, before, strict=True):  # CPU seconds per update, per rank
        m["cpu_s"] = (m["cpu_s"] - b["cpu_s"]) / args.updates
    update_s = statistics.median(seconds[1:])
    params = sum(p.numel() for p in policy.model.parameters())
    result = {"params": params, "update_s": update_s, "memory": memory}
    result["tokens_per_s"] = float(attn.sum()) / update_s
    Path(args.engine_job).write_text(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- report


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f}"


def _markdown(r: dict, args: argparse.Namespace) -> str:
    lines = [
        "# Data-parallel scaling: 1 vs 2 processes",
        "",
        f"Command: `{r['command']}` (all numbers below from this one run).",
        "",
        f"Machine: {r['cpus']} CPUs shared with other jobs (load average {r['load_avg_start']}"
        f" at the start, {r['load_avg_end']} at the end), torch CPU, gloo.",
        "",
        f"## The RL step: `{CONFIG}`, {args.steps} steps per run",
        "",
        "Medians over the steps after the first. The training part (θ_old pass + updates)"
        " is what the ranks share; the rollout (vLLM) runs on rank 0 alone.",
        "",
        "| processes | step s | training s | rollout s | tokens/s | whole command s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, row in r["rl_step"].items():
        lines.append(
            f"| {label} | {row['perf/step_s']:.2f} | {row['perf/train_s']:.2f} | "
            f"{row['perf/rollout_s']:.2f} | {row['perf/tokens_per_s']:.0f} | "
            f"{row['command_s']:.0f} |"
        )
    base = r["rl_step"][ROLLOUT[0]]
    two = r["rl_step"][ROLLOUT[2]]
    lines += [
        "",
        f"Ratio, 2 processes over 1 process of 1 thread: step time "
        f"{two['perf/step_s'] / base['perf/step_s']:.2f}x, training part "
        f"{two['perf/train_s'] / base['perf/train_s']:.2f}x, tokens/s "
        f"{two['perf/tokens_per_s'] / base['perf/tokens_per_s']:.2f}x.",
        "",
    ]
    eng = r["engine"]
    one, sharded = eng["unsharded, 1 process"], eng["sharded, 2 processes"]
    lines += [
        f"## The training engine alone: {one['params'] / 1e6:.1f} M parameters "
        f"(hidden {BIG['hidden_size']}, {BIG['num_layers']} layers, {BIG['num_experts']} "
        f"experts), fp32, AdamW",
        "",
        f"{args.rows} rows x {args.seq} tokens per update; median of {args.updates} updates"
        " after a warm-up. Memory in MiB: weights and AdamW state this process holds"
        " (tensor bytes), and its peak RSS (the Python + torch runtime included).",
        "",
        "| engine | rank | update s (wall) | CPU s per update | tokens/s | weights |"
        " AdamW state | peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in eng.items():
        for rank, m in enumerate(row["memory"]):
            lines.append(
                f"| {label} | {rank} | {row['update_s']:.2f} | {m['cpu_s']:.2f} | "
                f"{row['tokens_per_s']:.0f} | {_mb(m['params'])} | {_mb(m['optimizer'])} | "
                f"{_mb(m['max_rss'])} |"
            )
    held = [m["params"] + m["optimizer"] for m in sharded["memory"]]
    whole = one["memory"][0]["params"] + one["memory"][0]["optimizer"]
    cpu = " + ".join(f"{m['cpu_s']:.2f}" for m in sharded["memory"])
    busiest = max(m["cpu_s"] for m in sharded["memory"])
    lines += [
        "",
        f"Weights + AdamW state per rank: {_mb(max(held))} MiB sharded vs {_mb(whole)} MiB "
        f"unsharded ({max(held) / whole:.2f}x). Update time, 2 ranks over 1 process: "
        f"{sharded['update_s'] / one['update_s']:.2f}x; CPU seconds per update "
        f"{cpu} on 2 ranks vs "
        f"{one['memory'][0]['cpu_s']:.2f} in one process (on a shared machine wall time"
        " includes waiting for a core; CPU time is what each core spends): the busier rank"
        f" spends {busiest / one['memory'][0]['cpu_s']:.0%} of one process's CPU per update"
        " (50 % would be a perfect split; the rest is FSDP's all-gathers and"
        " reduce-scatters over gloo). Rank 0 also keeps an unsharded copy of the weights"
        " (for the weight sync into the inference engine), not counted here: gradients and"
        " AdamW state, the larger part, stay sharded.",
        "",
    ]
    return "\n".join(lines)
