"""`minirl bench stability`: the paper's matrix at small scale, run resumably, then reported.

    minirl bench stability --quick                 # 4 settings x 1 seed x 40 steps, < 20 min
    minirl bench stability --background            # the full matrix, hours, detached
    minirl bench stability --status                # where the background lab stands
    minirl bench stability --report-only           # tables + charts from what has finished

What this module does not do: define the matrix (settings.py), run a training step
(minirl train does, in a subprocess), schedule or resume runs (runner.py), or compute
the tables (report.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench import RESULTS
from bench.lab.runner import detach, run_all, status_table
from bench.lab.settings import (
    BY_NAME,
    FULL_SEEDS,
    FULL_STEPS,
    QUICK_SEEDS,
    QUICK_SETTINGS,
    QUICK_STEPS,
    SETTINGS,
    lab_specs,
)
from core.errors import UserError
from core.typed_config import add_set_option


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl bench stability", description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{len(QUICK_SETTINGS)} settings, {QUICK_SEEDS} seed, {QUICK_STEPS} steps",
    )
    p.add_argument("--settings", help="comma-separated settings (default: the whole matrix)")
    p.add_argument("--seeds", type=int, help=f"seeds per setting (full: {FULL_SEEDS})")
    p.add_argument("--steps", type=int, help=f"RL steps per run (full: {FULL_STEPS})")
    add_set_option(p, "extra", "override a config key in every run (repeatable)")
    p.add_argument("--lab-dir", help="where the runs go (default runs/lab or runs/lab-quick)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1: 2 cores)")
    p.add_argument(
        "--out",
        help="report file (default bench/results/stability.md; quick: <lab-dir>/stability.md)",
    )
    p.add_argument(
        "--background",
        action="store_true",
        help="detach: run in the background, logging to <lab-dir>/runner.log",
    )
    p.add_argument("--status", action="store_true", help="print the lab's progress and exit")
    p.add_argument("--report-only", action="store_true", help="report the runs there are, run none")
    p.add_argument(
        "--policy-eval",
        action="store_true",
        help="with --report-only: first measure the trained policy's own held-out accuracy "
        "(fp32, at each kept checkpoint) of finished runs not yet measured; a lab run does "
        "this by itself when it ends",
    )
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    quick = args.quick
    lab_dir = Path(args.lab_dir or ("runs/lab-quick" if quick else "runs/lab"))
    if args.status:
        print(status_table(lab_dir))
        return 0
    names = (
        args.settings.split(",")
        if args.settings
        else (list(QUICK_SETTINGS) if quick else [s.name for s in SETTINGS])
    )
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UserError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    seeds = args.seeds or (QUICK_SEEDS if quick else FULL_SEEDS)
    steps = args.steps or (QUICK_STEPS if quick else None)  # full: the recipe's own steps
    if seeds < 1 or (steps is not None and steps < 1):
        raise UserError("--seeds and --steps must be >= 1")
    out = (
        Path(args.out)
        if args.out
        else (lab_dir / "stability.md" if quick else RESULTS / "stability.md")
    )
    specs = lab_specs(lab_dir, names, seeds, steps, args.extra)
    command = "minirl bench stability " + " ".join(argv)

    if args.background:
        return detach(
            lab_dir, ["stability", *argv], f"minirl bench stability --status --lab-dir {lab_dir}"
        )
    if not args.report_only:
        t0 = time.monotonic()
        run_all(lab_dir, specs, jobs=args.jobs, meta={"command": command.strip()})
        print(f"lab finished in {(time.monotonic() - t0) / 60:.1f} min")
    if not args.report_only or args.policy_eval:
        from bench.lab.policy_eval import run_policy_evals

        print("held-out accuracy of the trained policy π (fp32) at the kept checkpoints:")
        run_policy_evals(lab_dir, specs)
    from bench.lab.report import write_stability_report

    write_stability_report(lab_dir, out, specs=specs, command=command.strip())
    print(f"report: {out}")
    return 0
