"""`minirl bench NAME [ARGS...]`: the stability lab and the benchmarks, by name.

Each benchmark is a module with `main(argv) -> int`, imported only when it runs, that
writes its result file under `bench/results/` with the command that produced it. None is
part of the default test suite (their quick modes are smoke-tested there).
"""

from __future__ import annotations

import importlib

from core.commands import usage
from core.errors import UserError

# name -> (module, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "stability": ("bench.lab.stability", "the paper's matrix at small scale (resumable)"),
    "detection": ("bench.detection.cli", "detector lead time, misses, false alarms vs rlwatch"),
    "remediation": ("bench.remediation.cli", "closed loop: runs with remediation off and on"),
    "remediation-noise": (
        "bench.remediation.noise",
        "how far apart runs end when only chance separates them (forks)",
    ),
    "remediation-pool": (
        "bench.remediation.pool",
        "remediation tables pooled, beside the bound no policy beats",
    ),
    "trl-remediation": (
        "bench.trl_remediation",
        "a real TRL GRPOTrainer, callback remediation off and on, in pairs",
    ),
    "speed": ("bench.speed.cli", "diagnostics overhead, TRL comparison, engines, store"),
    "vllm": ("bench.vllm", "vLLM vs PyTorch engine: rollout speed and mismatch"),
    "store": ("bench.store", "run store write throughput and 100k-step load time"),
    "dashboard": ("bench.dashboard", "time to first render of a 100k-step run"),
    "coldstart": ("bench.coldstart", "cold start: time and held-out accuracy"),
    "reliability": ("bench.reliability.cli", "fault injection and fuzzing of every parser"),
    "scale": ("bench.scale", "data-parallel training: 1 vs 2 processes, memory per rank"),
    "megatron": ("bench.megatron", "Megatron vs transformers engine: accuracy, step time"),
    "watch": ("bench.watch", "minirl watch: lag and CPU cost following a live run"),
}


def _usage() -> str:
    return usage("minirl bench", "NAME", "benchmark", BENCHMARKS)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        raise UserError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")
    return int(importlib.import_module(BENCHMARKS[name][0]).main(rest) or 0)
