"""`minirl bench NAME [ARGS...]`: the stability lab and the benchmarks, by name.

The lab (`stability`, `detection`) and the toolkit benchmark (`speed`) are modules of
`trainer.lab`; the component benchmarks are scripts in the repository's `bench/` folder,
run as if by `python bench/<script>` from the repository root. Each writes its result
file under `bench/results/` with the command that produced it. Nothing here is part of
the default test suite (the quick modes are smoke-tested there).
"""

from __future__ import annotations

import importlib
import runpy
import sys
from pathlib import Path

from monitor.errors import UserError

REPO = Path(__file__).resolve().parents[1]
MODULES = {
    "stability": ("trainer.lab.stability", "the paper's matrix at small scale (resumable)"),
    "detection": ("trainer.lab.detection", "detector lead time, misses, false alarms vs rlwatch"),
    "speed": ("trainer.lab.speed", "diagnostics overhead, TRL comparison, engines, store"),
}
SCRIPTS = {
    "vllm": ("vllm_bench.py", "vLLM vs PyTorch engine: rollout speed and mismatch"),
    "store": ("store_bench.py", "run store write throughput and 100k-step load time"),
    "dashboard": ("dashboard_bench.py", "time to first render of a 100k-step run"),
    "coldstart": ("coldstart_bench.py", "cold start: time and held-out accuracy"),
}


def _usage() -> str:
    rows = {**MODULES, **SCRIPTS}
    width = max(map(len, rows))
    lines = ["usage: minirl bench NAME [ARGS...]", "", "benchmarks:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in rows.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name in MODULES:
        return int(importlib.import_module(MODULES[name][0]).main(rest) or 0)
    if name in SCRIPTS:
        script = REPO / "bench" / SCRIPTS[name][0]
        if not script.is_file():
            raise UserError(f"bench {name}: {script} is missing (run from a source checkout)")
        sys.argv = [str(script), *rest]
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as done:
            return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        return 0
    known = ", ".join({**MODULES, **SCRIPTS})
    raise UserError(f"unknown benchmark {name!r}; choose one of {known}")
