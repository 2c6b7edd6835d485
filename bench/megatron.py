"""Benchmark: the Megatron training engine against the transformers one, same run.

    minirl bench megatron [--steps 30] [--eval-every 5] [--runs runs/megatron-compare]
        [--out bench/results/megatron.md]

Three `minirl train configs/demo.yaml` runs, identical but for the training engine
(torch; megatron; megatron with expert parallel 2 on two processes, `--nproc 2 --set
engine.megatron.expert_model_parallel_size=2`, one torch thread each): the demo's tiny
Qwen3-MoE after its cached cold start, vLLM bf16 rollouts, R3 (`train.routing_replay=R3`:
vLLM's routes replayed in the θ_old pass and the update), the same seed, --steps steps,
without the demo's scripted incident and with remediation off (so that nothing but the
engine differs). Reports the held-out accuracy of the inference engine (`eval/acc`) at
every evaluation side by side, the median step time and its training part
(`perf/train_s`: the θ_old pass and the update; the rollout and the evaluations are
vLLM's in all), the mean training-inference mismatch and the gradient norms. Writes --out
(Markdown, with the command) and the numbers as JSON beside it. Not part of the test
suite (about 12 minutes on 2 CPU cores); existing finished runs are reused. Because a
shared machine makes per-step times noisy, the training part of the two one-process
engines is also timed alone on one fixed batch, interleaved.
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
from pathlib import Path

from bench import REPO, RESULTS

CONFIG = "configs/demo.yaml"
ENGINES = ("torch", "megatron")
ARMS = {  # run name -> (engine.training, processes; > 1: expert parallel over them)
    "torch": ("torch", 1),
    "megatron": ("megatron", 1),
    "megatron_ep2": ("megatron", 2),
}
STEP = ("perf/step_s", "perf/train_s", "perf/rollout_s")
MEANS = ("mismatch/kl_k1", "routing/mismatch_train_infer")
NORM = "optim/grad_norm"


def _train(run_dir: Path, arm: str, args: argparse.Namespace) -> None:
    if (run_dir / "DONE").exists():
        return
    engine, nproc = ARMS[arm]
    threads = max(1, args.threads // nproc)
    sets = {
        "engine.training": engine,
        "train.routing_replay": "R3",
        "train.steps": args.steps,
        "train.incidents": "[]",
        "train.remediation": "false",
        "eval.every": args.eval_every,
        "threads": threads,
    }
    if nproc > 1:
        sets["engine.megatron.expert_model_parallel_size"] = nproc
    cmd = [sys.executable, "-m", "app.cli", "train", CONFIG, "--run-dir", str(run_dir), "--quiet"]
    cmd += ["--nproc", str(nproc)] if nproc > 1 else []
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    print(f"training {arm}: {shlex.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    (run_dir / "DONE").write_text("")


def _read(run_dir: Path) -> dict:
    from monitor import RunReader

    with RunReader(run_dir) as reader, reader.snapshot():
        series = reader.scalars(["eval/acc", *STEP, *MEANS, NORM])
    steps, acc = series["eval/acc"]
    out: dict = {"eval": dict(zip(steps.tolist(), acc.tolist(), strict=True))}
    for name in STEP:  # the first step pays one-time costs (warm-up)
        out[name] = statistics.median(series[name][1].tolist()[1:])
    for name in MEANS:
        out[name] = statistics.fmean(series[name][1].tolist())
    norms = series[NORM][1].tolist()  # one outlier would move a mean: median and max
    out[f"{NORM}_median"], out[f"{NORM}_max"] = statistics.median(norms), max(norms)
    return out


def _time_engines(args: argparse.Namespace, tmp: Path) -> dict:
    """The training part alone, on a fixed demo-sized batch (32 prompts x 8 responses,
    a 12-token prompt, 40 response tokens) of the demo's model shape: per repeat, each
    engine runs a θ_old pass (no grad, routes recorded, R3 replay) and one update
    (forward under R3, backward, AdamW), the engines interleaved so that the machine's
    load hits both alike; one torch thread. Median and minimum wall seconds, and CPU
    seconds (the least load-sensitive of the three)."""
    import time

    import torch

    from trainer.engines.config import EngineConfig, OptimConfig
    from trainer.engines.factory import make_training_engine
    from trainer.models import ModelConfig, build_tiny_checkpoint

    torch.set_num_threads(1)  # CPU seconds then measure work, not OpenMP spin-waits
    ckpt = build_tiny_checkpoint(ModelConfig(), tmp / "model")
    engines = {
        e: make_training_engine(ckpt, EngineConfig(training=e), OptimConfig(lr=1e-5))
        for e in ENGINES
    }
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 99, (256, 52), generator=gen)
    attn, mask = torch.ones_like(ids), torch.zeros(256, 52)
    mask[:, 12:] = 1
    adv = torch.linspace(-1, 1, 256)
    with torch.no_grad():
        _, _, replay = engines["torch"].forward_logprobs(ids, attn, mask, record=True)
    times: dict[str, dict[str, list[float]]] = {e: {"wall": [], "cpu": []} for e in ENGINES}
    for _ in range(args.repeats + 1):  # the first is a warm-up
        for name, eng in engines.items():
            w0, c0 = time.perf_counter(), time.process_time()
            with torch.no_grad():
                eng.forward_logprobs(ids, attn, mask, replay=replay, record=True)
            logp, _, _ = eng.forward_logprobs(ids, attn, mask, replay=replay, record=True)
            eng.step(-(adv[:, None] * logp * mask).sum() / 256)
            times[name]["wall"].append(time.perf_counter() - w0)
            times[name]["cpu"].append(time.process_time() - c0)
    return {
        name: {
            "wall_median_s": statistics.median(t["wall"][1:]),
            "wall_min_s": min(t["wall"][1:]),
            "cpu_median_s": statistics.median(t["cpu"][1:]),
        }
        for name, t in times.items()
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minirl bench megatron", description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=str(REPO / "runs" / "megatron-compare"), help="run dirs")
    p.add_argument("--out", default=str(RESULTS / "megatron.md"), help="Markdown output")
    p.add_argument("--steps", type=int, default=30, help="RL steps per run")
    p.add_argument("--eval-every", type=int, default=5, help="steps between evaluations")
    p.add_argument("--threads", type=int, default=2, help="torch threads of each run")
    p.add_argument("--repeats", type=int, default=7, help="timed training parts per engine")
    args = p.parse_args(argv)
    runs = Path(args.runs)
    result: dict = {"command": shlex.join(["minirl", "bench", "megatron", *argv])}
    for arm in ARMS:
        _train(runs / arm, arm, args)
        result[arm] = _read(runs / arm)
    with tempfile.TemporaryDirectory(prefix="minirl-megatron-") as tmp:
        result["engine_timing"] = _time_engines(args, Path(tmp))
    result["load_avg_end"] = round(os.getloadavg()[0], 1)
    out = Path(args.out)
    out.write_text(_markdown(result, args))
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    print(out.read_text())
    return 0


TITLES = {"torch": "transformers", "megatron": "Megatron", "megatron_ep2": "Megatron EP 2, 2 procs"}


def _row(label: str, cells: list[str]) -> str:
    return f"| {label} | " + " | ".join(cells) + " |"


def _markdown(r: dict, args: argparse.Namespace) -> str:
    arms = [a for a in ARMS if a in r]
    titles = [TITLES[a] for a in arms]
    rule = _row("---", ["---:"] * len(arms))
    lines = [
        "# Megatron vs transformers training engine: the demo with vLLM rollouts and R3",
        "",
        f"Command: `{r['command']}`: it trains the runs below unless --runs holds them"
        " finished (then reused), and times the engines on each call.",
        "",
        f"`minirl train {CONFIG}` three times, {args.steps} steps, seed 0,"
        " `train.routing_replay=R3`, the scripted incident and remediation off:"
        " `--set engine.training=torch`, `--set engine.training=megatron`, and Megatron on"
        " two processes with expert parallel 2 (`--nproc 2 --set"
        " engine.megatron.expert_model_parallel_size=2`: each process holds 4 of the 8"
        " experts of every MoE layer, data parallel 2 for the rest, rank 0 also runs vLLM);"
        f" {args.threads} torch threads per run (split over its processes) on a 2-core CPU"
        f" shared with other jobs (load average {r['load_avg_end']} at the end). Same seed,"
        " same cold start: the runs differ only by float rounding in the training engine,"
        " which changes some samples later on.",
        "",
        "## Held-out accuracy (`eval/acc`, vLLM bf16)",
        "",
        _row("step", titles),
        rule,
    ]
    steps = sorted({s for a in arms for s in r[a]["eval"]}, key=int)
    for step in steps:
        vals = [r[a]["eval"].get(step) for a in arms]
        lines.append(_row(str(step), ["-" if x is None else f"{x:.3f}" for x in vals]))
    lines += [
        "",
        "## Step time and mismatch",
        "",
        "Medians over the steps after the first; training = θ_old pass + update (the part"
        " the engines differ in), rollout = vLLM. Means over all steps for the mismatch.",
        "",
        _row("", titles),
        rule,
    ]
    rows = [
        ("training s/step (`perf/train_s`)", "perf/train_s", ".3f"),
        ("whole step s (`perf/step_s`)", "perf/step_s", ".3f"),
        ("rollout s/step (`perf/rollout_s`)", "perf/rollout_s", ".3f"),
        ("mean `mismatch/kl_k1`", "mismatch/kl_k1", ".2e"),
        ("mean `routing/mismatch_train_infer`", "routing/mismatch_train_infer", ".4f"),
        ("median `optim/grad_norm`", f"{NORM}_median", ".2f"),
        ("max `optim/grad_norm`", f"{NORM}_max", ".1f"),
    ]
    for label, key, fmt in rows:
        lines.append(_row(label, [format(r[a][key], fmt) for a in arms]))
    et = r["engine_timing"]
    lines += [
        "",
        "The machine's load makes the per-step times of the runs noisy (each step also"
        " trains on different samples; the two-process run has one thread per process)."
        " The training part alone, on one fixed demo-sized batch (256 rows of 52 tokens,"
        " R3 replay), the one-process engines interleaved,"
        f" {args.repeats} repeats after a warm-up (θ_old pass + one update), one torch thread:",
        "",
        _row("", [TITLES[e] for e in ENGINES]),
        _row("---", ["---:"] * len(ENGINES)),
    ]
    for label, key in (
        ("wall s, median", "wall_median_s"),
        ("wall s, minimum", "wall_min_s"),
        ("CPU s, median", "cpu_median_s"),
    ):
        lines.append(_row(label, [f"{et[e][key]:.3f}" for e in ENGINES]))
    lines += ["", "Notes on these runs (checked by hand): `megatron_notes.md`."]
    return "\n".join(lines) + "\n"
