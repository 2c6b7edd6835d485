"""`minirl bench detection`: do our detectors see collapse coming, and does rlwatch?

    minirl bench detection                       # score the lab's runs, write the report
    minirl bench detection --stress              # first make the runs built to collapse

The labelled set: every run of the given lab directories whose outcome is known. A run
collapsed when summary.py finds a collapse onset (monitor.analyze's definition, from
train and held-out accuracy only) or it diverged to non-finite values; a finished run
without one is stable; an unfinished run without one is left out. Both monitors are fed
the same stored metric streams, step by step, through their public APIs (replay.py): our
`monitor.detectors.build_detectors` (exactly what `Monitor.log` runs live) and rlwatch's
`RLWatch.log_step` (the documented manual integration), with our names mapped to its.

Scores, per monitor configuration (scoring.py): lead time, late alerts and misses on
collapsing runs, false alarms on stable ones. Tuning picks, for each monitor alike, the
subset of its detectors, each at warning or at critical and at one of the threshold
scales `SCALES` (ours: absolute levels ×s, or ÷s on a low-side rule; rlwatch: its sigma
multipliers ×s, its entropy floor ÷s), that maximises Youden's J (share of collapses
alerted in time minus share of stable runs alarmed) on the tuning runs; the scores are
reported on the other runs (detection_report.py).

What it does not do: change how a detector works (it replays each at other thresholds and
selects among them), or define collapse (summary.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import RESULTS
from bench.lab.detection_report import write_detection_report
from bench.lab.manifest import RunSpec, load_manifest
from bench.lab.replay import (
    REL,
    SCALES,
    live_first_alerts,
    ours_first_alerts,
    ours_scaled_first_alerts,
    relative_config,
    rlwatch_first_alerts,
    step_stream,
)
from bench.lab.runner import detach, run_all, status_table
from bench.lab.scoring import Labelled, first_of
from bench.lab.settings import CONFIG_DIR, lab_specs
from bench.lab.summary import summarize_run
from monitor.errors import UserError


def labelled_runs(lab_dirs: Sequence[Path], say: Callable[[str], None] = print) -> list[Labelled]:
    """Every run of the labs with a known outcome, fed to both monitors."""
    out = []
    for lab_dir in lab_dirs:
        manifest = load_manifest(lab_dir)
        for key, spec in manifest.specs.items():
            summary = summarize_run(spec.run_dir)
            if summary is None or (summary.collapse_step is None and not summary.finished):
                continue
            stream = step_stream(spec.run_dir)
            run = Labelled(f"{Path(lab_dir).name}/{key}", summary)
            rel = ours_first_alerts(stream, relative_config())
            run.ours = {
                **ours_first_alerts(stream),
                **{k + REL: v for k, v in rel.items()},
                **ours_scaled_first_alerts(stream),
            }
            run.rlwatch = {}
            for scale in (1, *SCALES):
                run.rlwatch.update(rlwatch_first_alerts(stream, scale))
            run.live = live_first_alerts(spec.run_dir)
            say(
                f"  {run.key}: onset {run.onset}, ours {first_of(run.ours, None)}, "
                f"rlwatch {first_of(run.rlwatch, None)}"
            )
            out.append(run)
    return out


STRESS_SETTINGS = ("stress_lr_ramp", "stress_offpolicy8x_noclip_lr_ramp", "stress_no_is_lr_ramp")


def stress_specs(lab_dir: Path, seeds: int, steps: int | None, extra: list[str]) -> list[RunSpec]:
    return lab_specs(lab_dir, list(STRESS_SETTINGS), seeds, steps, extra, CONFIG_DIR)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl bench detection", description=__doc__.splitlines()[0])
    p.add_argument(
        "--labs",
        default="runs/lab,runs/lab-stress",
        help="comma-separated lab directories to score (default runs/lab,runs/lab-stress)",
    )
    p.add_argument(
        "--stress",
        action="store_true",
        help=f"first run the collapse-prone settings ({', '.join(STRESS_SETTINGS)})",
    )
    p.add_argument("--stress-dir", default="runs/lab-stress")
    p.add_argument(
        "--background",
        action="store_true",
        help="with --stress: detach, logging to <stress-dir>/runner.log",
    )
    p.add_argument("--status", action="store_true", help="print the stress runs' progress")
    p.add_argument("--seeds", type=int, default=3, help="seeds per stress setting")
    p.add_argument("--steps", type=int, help="RL steps per stress run (default: the recipe's)")
    p.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default=str(RESULTS / "detection.md"))
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.status:
        print(status_table(Path(args.stress_dir)))
        return 0
    if args.background:
        if not args.stress:
            raise UserError("--background needs --stress (scoring takes seconds)")
        return detach(
            Path(args.stress_dir),
            ["detection", *argv],
            f"minirl bench detection --status --stress-dir {args.stress_dir}",
        )
    if args.stress:
        run_all(
            Path(args.stress_dir),
            stress_specs(Path(args.stress_dir), args.seeds, args.steps, args.extra),
        )
    labs = [Path(p) for p in args.labs.split(",") if p]
    missing = [str(p) for p in labs if not (p / "manifest.json").is_file()]
    labs = [p for p in labs if (p / "manifest.json").is_file()]
    if not labs:
        raise UserError(
            f"no lab manifest in {', '.join(missing)}; run `minirl bench stability` "
            "(and --stress here) first"
        )
    for m in missing:
        print(f"skipping {m}: no manifest")
    runs = labelled_runs(labs)
    if not runs:
        raise UserError("no run with a known outcome yet (finished, or collapsed)")
    write_detection_report(runs, Path(args.out), "minirl bench detection " + " ".join(argv))
    print(f"report: {args.out}")
    return 0
