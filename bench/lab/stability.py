"""`minirl bench stability`: the paper's matrix at small scale, run resumably, then reported.

    minirl bench stability --quick                 # 4 settings x 1 seed x 40 steps, < 20 min
    minirl bench stability --background            # the full matrix, hours, detached
    minirl bench stability --status                # where the background lab stands
    minirl bench stability --report-only           # tables + charts from what has finished

The matrix (arXiv 2512.01374, section 5): on-policy MiniRL, without IS correction, with
length normalisation, +R3; off-policy 2x, 4x, 8x with MiniRL without clipping, +R2 without
clipping, +R2, +R3. One recipe file per setting in configs/lab/ (base.yaml plus the keys
it changes); every setting shares the base's induced training-inference mismatch. Seeds
vary the RL loop (prompt order, sampling); the cold start is shared, as the paper's runs
share their base model. Runs go seed-major, so a partial lab covers every setting.

What this module does not do: run a training step (minirl train does, in a subprocess),
schedule or resume runs (runner.py), or compute the tables (report.py).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from monitor.errors import UserError
from bench.lab.runner import RunSpec, detach, run_all, status_table

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "configs" / "lab"


@dataclass(frozen=True)
class Setting:
    """One cell of the paper's matrix: a recipe file and where it sits in the tables."""

    name: str
    """The recipe's file stem in configs/lab/ and its folder under the lab directory."""
    group: str
    """on-policy, off-policy 2x, 4x or 8x: the rows compared in one chart."""
    label: str


SETTINGS: tuple[Setting, ...] = (
    Setting("onpolicy_minirl", "on-policy", "MiniRL"),
    Setting("onpolicy_no_is", "on-policy", "MiniRL w/o IS correction"),
    Setting("onpolicy_length_norm", "on-policy", "MiniRL + length norm"),
    Setting("onpolicy_r3", "on-policy", "MiniRL + R3"),
    *(
        Setting(f"offpolicy{n}x_{variant}", f"off-policy {n}x", label)
        for n in (2, 4, 8)
        for variant, label in (
            ("noclip", "MiniRL w/o clipping"),
            ("r2_noclip", "MiniRL + R2 w/o clipping"),
            ("r2", "MiniRL + R2"),
            ("r3", "MiniRL + R3"),
        )
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
QUICK_SETTINGS = ("onpolicy_minirl", "onpolicy_no_is", "offpolicy8x_noclip", "offpolicy8x_r3")
QUICK_STEPS, QUICK_SEEDS = 40, 1
FULL_STEPS, FULL_SEEDS = 200, 3


def lab_specs(
    lab_dir: Path,
    settings: list[str],
    seeds: int,
    steps: int | None,
    extra: list[str],
    config_dir: Path = CONFIG_DIR,
) -> list[RunSpec]:
    """Every run of the lab, seed-major: seed 0 of every setting first."""
    specs = []
    for seed in range(seeds):
        for name in settings:
            config = (config_dir / f"{name}.yaml").resolve()
            if not config.is_file():
                raise UserError(f"setting {name}: no recipe {config}")
            overrides = [f"seed={seed}", f"name={name}_s{seed}"]
            if steps is not None:
                overrides.append(f"train.steps={steps}")
            specs.append(
                RunSpec(
                    key=f"{name}/seed{seed}",
                    config=str(config),
                    overrides=(*overrides, *extra),
                    run_dir=str((lab_dir / name / f"seed{seed}").resolve()),
                )
            )
    return specs


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
    p.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key in every run (repeatable)",
    )
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
    p.add_argument(
        "--report-only",
        action="store_true",
        help="write the report from the runs that exist, run nothing",
    )
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
        else (lab_dir / "stability.md" if quick else REPO / "bench" / "results" / "stability.md")
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
