"""Benchmark: the real cold start of a run config, timed, with held-out accuracies.

    minirl bench coldstart [CONFIG.yaml] [--set cold_start.steps=600 ...]

Trains into a fresh temporary cache (never reuses one), so the time is the full cost:
build the tiny model, SFT, evaluate greedy and sampled on the held-out set. Prints one
JSON line, with wall and CPU seconds (on a busy shared machine the CPU time, with
--threads 1, is the better estimate of the cost on an idle one). Not part of the test
suite (minutes, not seconds).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from core.typed_config import add_set_option


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="minirl bench coldstart", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "config", nargs="?", default=None, help="run config YAML (default: built-in defaults)"
    )
    add_set_option(parser, "set")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args(argv)

    import torch

    from trainer.coldstart import cold_start
    from trainer.config import load_config

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        cfg = load_config(args.config, [*args.set, f"cold_start.cache_dir={cache}"])
        t0, c0 = time.monotonic(), time.process_time()
        result = cold_start(cfg.model, cfg.task, cfg.cold_start, eval_cfg=cfg.eval)
        total, cpu = time.monotonic() - t0, time.process_time() - c0
    row = {
        "task": f"{cfg.task.kind} digits={cfg.task.digits}",
        "model": f"{cfg.model.arch} h{cfg.model.hidden_size} L{cfg.model.num_layers}",
        "steps": cfg.cold_start.steps,
        "batch": cfg.cold_start.batch_size,
        "lr": cfg.cold_start.lr,
        "threads": args.threads,
        **{k: round(v, 4) for k, v in result.metrics.items()},
        "total_seconds": round(total, 1),
        "cpu_seconds": round(cpu, 1),  # on a shared machine, closer to the idle cost
        "heldout": cfg.task.heldout_size,
        "eval_samples": cfg.eval.samples,
    }
    print(json.dumps(row))
    return 0
