"""`minirl bench speed`: what the toolkit costs, measured side by side in one run.

    minirl bench speed [CONFIG] [--set key=value ...] [--quick] [--skip PART ...]
    minirl bench speed --setup-trl        # once: TRL in its own venv, bench/.venv-trl

On the run config's tiny model after its (cached) cold start (default: configs/demo.yaml),
one process measures, in this order, with the load average noted at start and end:

1. diagnostics overhead: `rl_step` + `Monitor.log` with `train.diagnostics` on and off,
   in pairs on the same weights, prompts and seeds (`diagnostics.py`);
2. trainer step vs TRL's GRPOTrainer (`vs_trl.py`, `trl_step.py`, bench/.venv-trl): the
   same checkpoint, prompts, group size, max new tokens and updates per rollout, rounds
   of TRL then ours back to back, each round from the cold-start weights;
3. rollout throughput, vLLM vs PyTorch engine, and 4. run-store write throughput and
   long-run load time (`components.py`, with the measurement code of `bench/vllm.py`
   and `bench/store.py`).

Writes Markdown (--out) with the exact command and machine facts, and every raw timing
beside it (same name, .json), through `report.py`. It does not tune anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import REPO, RESULTS
from bench.speed.components import engine_throughput, store_speed
from bench.speed.diagnostics import diagnostics_overhead
from bench.speed.fixture import QUICK, Effort, make_setup, say
from bench.speed.report import machine_facts, render
from bench.speed.vs_trl import setup_trl_venv, trl_comparison, trl_python
from core.errors import UserError
from core.typed_config import add_set_option

PARTS = ("diagnostics", "trl", "vllm", "store")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl bench speed", description=__doc__.split("\n")[0])
    p.add_argument("config", nargs="?", default=str(REPO / "configs" / "demo.yaml"))
    add_set_option(p, "set")
    p.add_argument("--quick", action="store_true", help="a minute or two: few repetitions")
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=PARTS,
        help="leave a part out (vllm: the vLLM rows of part 3)",
    )
    p.add_argument("--pairs", type=int, help="diagnostics on/off pairs (default 40, quick 4)")
    p.add_argument("--trl-rounds", type=int, help="TRL/ours rounds (default 5, quick 1)")
    p.add_argument("--trl-steps", type=int, help="timed rollouts per round (default 3)")
    p.add_argument("--load-steps", type=int, help="steps of the long store (default 100000)")
    p.add_argument(
        "--threads",
        type=int,
        help="torch threads, training side and TRL (default: the run config's threads)",
    )
    p.add_argument("--vllm-threads", type=int, default=1, help="torch threads inside vLLM")
    p.add_argument("--trl-python", help="Python of TRL's environment (bench/.venv-trl)")
    p.add_argument("--setup-trl", action="store_true", help="create bench/.venv-trl and exit")
    p.add_argument(
        "--out",
        help="Markdown output (default bench/results/speed.md; quick: "
        "bench/results/speed-quick.md)",
    )
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.setup_trl:
        return setup_trl_venv()
    effort = QUICK if args.quick else Effort()
    overrides = {
        k: v
        for k, v in (
            ("pairs", args.pairs),
            ("trl_rounds", args.trl_rounds),
            ("trl_steps", args.trl_steps),
            ("load_steps", args.load_steps),
        )
        if v is not None
    }
    effort = dataclasses.replace(effort, **overrides)
    if min(effort.pairs, effort.trl_rounds, effort.trl_steps) < 1:
        raise UserError("--pairs, --trl-rounds and --trl-steps must be >= 1")
    if effort.load_steps < 1000 or effort.load_steps % 1000:
        raise UserError(
            f"--load-steps {effort.load_steps}: a positive multiple of 1000 "
            "(the long store is written in 1000-step transactions)"
        )
    if "trl" not in args.skip:
        trl_python(args.trl_python)  # fail before the long parts, not after them
    default_out = "speed-quick.md" if args.quick else "speed.md"
    out = Path(args.out) if args.out else RESULTS / default_out

    from trainer.config import load_config

    cfg = load_config(args.config, args.set)
    args.threads = args.threads or cfg.threads or os.cpu_count() or 1
    load0, t_start = os.getloadavg(), time.perf_counter()
    results: dict[str, Any] = {}
    s = make_setup(cfg, args.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="minirl-speed-") as tmp:
            root = Path(tmp)
            if "diagnostics" not in args.skip:
                results["diagnostics"] = diagnostics_overhead(s, effort, root)
            if "trl" not in args.skip:
                results["trl"] = trl_comparison(s, effort, args.trl_python, args.threads, root)
            results["engines"] = engine_throughput(s, effort, args)
            if "store" not in args.skip:
                results["store"] = store_speed(effort, root)
    finally:
        s.engine.close()
    argv_text = " ".join(shlex.quote(a) for a in argv)
    facts = machine_facts(load0, os.getloadavg(), time.perf_counter() - t_start, args)
    text = render(cfg, effort, results, facts, f"minirl bench speed {argv_text}".strip())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = {
        "command": f"minirl bench speed {argv_text}".strip(),
        "machine": facts,
        "effort": dataclasses.asdict(effort),
        "results": results,
    }
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    print(text)
    say(f"-> {out} (every timing: {out.with_suffix('.json').name})")
    return 0
