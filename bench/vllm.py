"""Benchmark: the vLLM engine against the PyTorch engine, speed and mismatch, in one run.

    minirl bench vllm [CONFIG.yaml] [--set key=value ...] [--prompts 64]
        [--repeats 5] [--threads 2] [--vllm-threads 1] [--out bench/results/vllm.md]

On the run config's tiny model after its (cached) cold start, and the same prompts:

- rollout throughput (response tokens per second, wall and per CPU-second) of each
  inference engine: PyTorch fp32/bf16 and vLLM fp32/bf16 (plus vLLM bf16 with weights
  rounded through FP8 e4m3); the median of --repeats timed calls after one warm-up;
- engine start and one verified weight sync, in seconds;
- the training-inference mismatch of each against the fp32 training engine on the
  rollout's own tokens: `mismatch/kl_k1` (minirl.mismatch_metrics), max |Δ log π| and
  `routing/mismatch_train_infer` (minirl.routing_metrics).

Writes a Markdown table with the command that produced it (--out), and prints it.
Not part of the test suite (about a minute).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import time
from pathlib import Path

from core.typed_config import add_set_option

# (label, backend, inference_dtype, weight_quant, torch threads: None = --threads)
VARIANTS = [
    ("PyTorch fp32", "torch", "fp32", "none", None),
    ("PyTorch fp32, 1 thread", "torch", "fp32", "none", 1),
    ("PyTorch bf16", "torch", "bf16", "none", None),
    ("vLLM fp32", "vllm", "fp32", "none", None),
    ("vLLM bf16", "vllm", "bf16", "none", None),
    ("vLLM bf16 + fp8_e4m3 weights", "vllm", "bf16", "fp8_e4m3", None),
]


def measure(label, backend, dtype, wq, threads, ckpt, prompts, params, trainer, args) -> dict:
    import torch

    from minirl.mismatch import mismatch_metrics
    from minirl.routing import routing_metrics
    from trainer.engines.config import EngineConfig
    from trainer.engines.factory import make_inference_engine
    from trainer.engines.placement import Placement
    from trainer.engines.vllm.inference import VLLMEngine

    cfg = EngineConfig(inference=backend, inference_dtype=dtype, weight_quant=wq)
    torch.set_num_threads(threads or args.threads)  # vLLM sets its own during its calls
    t0 = time.perf_counter()
    if backend == "vllm":
        engine = VLLMEngine(
            ckpt, Placement(dtype=dtype), weight_quant=wq, num_threads=args.vllm_threads
        )
    else:
        engine = make_inference_engine(ckpt, cfg)
    start_s = time.perf_counter() - t0
    try:
        engine.generate(prompts[:4], params, seed=999)  # warm-up
        walls, cpus = [], []
        for r in range(args.repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            ro = engine.generate(prompts, params, seed=r)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        tokens = int(ro.response_mask.sum())
        t0 = time.perf_counter()
        engine.update_weights(trainer.model)
        sync_s = time.perf_counter() - t0
    finally:
        engine.close()
    logp, _, routed = trainer.forward_logprobs(
        ro.input_ids, ro.attention_mask, ro.response_mask, record=trainer.is_moe
    )
    mask = ro.response_mask > 0
    logp = logp.detach()
    row = {
        "engine": label,
        "tokens": tokens,
        "tok_per_s": tokens / statistics.median(walls),
        "tok_per_cpu_s": tokens / statistics.median(cpus),
        "start_s": start_s,
        "sync_s": sync_s,
        "kl_k1": mismatch_metrics(logp, ro.logp, mask)["mismatch/kl_k1"],
        "max_abs": float((logp - ro.logp)[mask].abs().max()),
        "mean_abs": float((logp - ro.logp)[mask].abs().mean()),
        "routing": float("nan"),
    }
    if routed is not None and ro.routing is not None:
        experts = trainer.model.config.num_experts
        pair = routing_metrics(routed, ro.routing, mask, experts, "mismatch_train_infer")
        row["routing"] = pair["routing/mismatch_train_infer"]
    torch.set_num_threads(args.threads)
    return row


def table(rows: list[dict]) -> str:
    head = (
        "| inference engine | response tokens | tokens/s (wall) | tokens/CPU-s | start s "
        "| sync s | mismatch/kl_k1 | max \\|Δ log π\\| | mean \\|Δ log π\\| "
        "| routing/mismatch_train_infer |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        routing = "—" if r["routing"] != r["routing"] else f"{r['routing']:.4f}"
        lines.append(
            f"| {r['engine']} | {r['tokens']} | {r['tok_per_s']:.0f} | {r['tok_per_cpu_s']:.0f} "
            f"| {r['start_s']:.1f} | {r['sync_s']:.2f} | {r['kl_k1']:.2e} | {r['max_abs']:.2e} "
            f"| {r['mean_abs']:.2e} | {routing} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="minirl bench vllm", description=__doc__.split("\n")[0])
    parser.add_argument("config", nargs="?", help="run config YAML")
    add_set_option(parser, "set")
    parser.add_argument("--prompts", type=int, default=64, help="prompts per rollout")
    parser.add_argument("--repeats", type=int, default=5, help="timed rollouts per engine")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (PyTorch side)")
    parser.add_argument("--vllm-threads", type=int, default=1, help="torch threads in vLLM")
    parser.add_argument("--out", default="bench/results/vllm.md", help="Markdown output")
    args = parser.parse_args(argv)

    import torch

    from trainer.coldstart import cold_start
    from trainer.config import load_config
    from trainer.engines.placement import Placement
    from trainer.engines.torch.training import TorchTrainingEngine
    from trainer.engines.update import UpdateSettings
    from trainer.engines.vllm.inference import import_vllm
    from trainer.evaluate import encode_prompts
    from trainer.tasks import make_task

    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.set)
    ckpt = cold_start(cfg.model, cfg.task, cfg.cold_start).path
    trainer = TorchTrainingEngine(ckpt, UpdateSettings(), Placement(dtype="fp32"))
    task = make_task(cfg.task)
    examples = task.sample_train(args.prompts, seed="vllm-bench")
    prompts = encode_prompts(trainer.tokenizer, [ex.prompt for ex in examples])
    params = cfg.sampling
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    import_vllm()
    import_s = time.perf_counter() - t0
    rows = [measure(*v, ckpt, prompts, params, trainer, args) for v in VARIANTS]
    load1 = os.getloadavg()[0]

    command = "minirl bench vllm " + " ".join(shlex.quote(a) for a in argv)
    m = cfg.model
    text = "\n".join(
        [
            "# vLLM engine vs PyTorch engine: rollout speed and training-inference mismatch",
            "",
            f"Command: `{command.strip()}`",
            "",
            f"Model: {m.arch} hidden {m.hidden_size}, {m.num_layers} layers, "
            f"{m.num_experts} experts top-{m.top_k}, after the run config's cold start "
            f"({cfg.task.kind}, digits={cfg.task.digits}). Rollout: {len(prompts)} prompts x "
            f"n={params.n}, max_new_tokens={params.max_new_tokens}, temperature "
            f"{params.temperature}, top_p {params.top_p}. Reference: the fp32 transformers "
            "training engine on the rollout's own tokens (routing recorded by its router hooks).",
            "",
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other jobs "
            f"(load average {load0:.1f} at start, {load1:.1f} at end); PyTorch engine "
            f"{args.threads} torch threads, vLLM in-process with {args.vllm_threads} "
            f"thread(s). tokens/s: median of {args.repeats} rollouts after a warm-up; "
            "tokens/CPU-s is less sensitive to the other jobs. start s: engine start "
            f"(importing vLLM took {import_s:.1f} s more, once per process); sync s: one "
            "weight sync including its verification on the probe batch.",
            "",
            table(rows),
            "",
        ]
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0
