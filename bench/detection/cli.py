"""`minirl bench detection`: our default detectors and rlwatch's, on labelled runs.

    minirl bench detection                       # score the committed corpus (≈ 3 min)
    minirl bench detection --run-lab --jobs 2    # first (re)run the lab's incident configs
        [--seeds 0 1 2 3] [--runs runs/incidents] # (hours), export them to bench/data/lab
    minirl bench detection --tune                # the threshold grid, on the tuning set

The corpus (bench/data/lab, bench/data/real) and the split are described in corpus.py,
the scores in score.py, the two swapped folds of the public runs in folds.py. Writes
bench/results/detection.md and detection.json.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from bench import REPO, RESULTS
from bench.detection import corpus, folds, lab, monitors, real_table, report
from bench.detection.score import RunScore, score_run
from core.errors import UserError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl bench detection", description=__doc__.split("\n")[0])
    p.add_argument("--run-lab", action="store_true", help="run the incident configs first")
    p.add_argument("--runs", default="runs/incidents", help="where lab runs are written")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--configs", nargs="+", help="incident configs (default all)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--export-only", action="store_true", help="export --runs, do not score")
    p.add_argument(
        "--tune", action="store_true", help="score the threshold grid on the tuning set only"
    )
    p.add_argument("--out", default=str(RESULTS / "detection.md"))
    return p


def export(runs: Path, names: list[str], seeds: list[int]) -> int:
    n = 0
    for name in names:
        for seed in seeds:
            run_dir = runs / name / f"seed{seed}"
            if lab.finished(run_dir):
                out = corpus.DATA / "lab" / name / f"seed{seed}.jsonl.gz"
                corpus.export_lab_run(run_dir, out, name, seed)
                n += 1
    return n


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    names = args.configs or lab.configs()
    runs = Path(args.runs)
    if args.run_lab:
        lab.run_lab(names, args.seeds, runs, args.jobs)
    if args.run_lab or args.export_only:
        print(f"exported {export(runs, names, args.seeds)} runs to {corpus.DATA / 'lab'}")
        if args.export_only:
            return 0
    labelled = corpus.lab_runs() + corpus.real_runs()
    if not labelled:
        raise UserError(f"no runs under {corpus.DATA}: run with --run-lab first")
    if args.tune:
        from bench.detection.tune import table, tune

        print("\n".join(table(tune(labelled))))
        return 0
    scores: dict[str, list] = {m: [] for m in report.MONITORS}
    public: dict[str, list[dict]] = {m: [] for m in report.MONITORS}
    hidden: list[RunScore] = []  # ours on the lab runs, their settings hidden
    for run in labelled:
        for m, fired in (
            ("ours", monitors.ours(run.stream)),
            ("rlwatch", monitors.rlwatch(run.stream)),
        ):
            scores[m].append(score_run(run, fired))
            if run.group == "real":
                public[m].append(real_table.judge(run, fired))
        if run.group == "lab":
            hidden.append(score_run(run, monitors.ours(monitors.without_settings(run.stream))))
    swapped = folds.cross(labelled)
    lines, totals = real_table.section(public, swapped, folds.lines(swapped))
    command = "minirl bench detection " + shlex.join(argv)
    out = Path(args.out)
    report.write(scores, command.strip(), out, (lines, totals, public), hidden)
    print(f"wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 0
