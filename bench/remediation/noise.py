"""`minirl bench remediation-noise`: how far apart two runs end when only chance separates them.

    minirl bench remediation-noise [--forks is_off@80 fp4_no_is@40] [--seeds 1 2 3]

The remediation benchmark calls a pair *worse* when the run with remediation ends more
than 5 points below the same run without it. Part of any gap is chance: once two runs
differ in one update, every later rollout differs. This measures that part: each run
without remediation (`<runs>/<config>/seed<k>`) is forked at a step (its checkpoint
there: weights, optimizer, RNG, data position), continued to the end with another seed
(other prompts and samples from the fork on; no action, nothing else changed), and the
two final accuracies are measured as the benchmark's verdicts measure them
(`bench.lab.final_eval`). Forks go to `<runs>-noise/<config>@<step>/seed<k>`; results
to bench/results/remediation_noise.md and .json.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sqlite3
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import RESULTS
from bench.detection import lab
from bench.lab import final_eval
from bench.remediation.results import write_page
from bench.remediation.verdicts import TOLERANCE
from core.errors import UserError

FORK_SEED = 1000
"""A fork of seed k continues with seed k + FORK_SEED."""


def fork(run: Path, fork_dir: Path, step: int) -> None:
    """A copy of `run` as it stood at its checkpoint at `step`, ready for `minirl train
    --resume`."""
    ckpt = run / "checkpoints" / f"step_{step:06d}.pt"
    if not ckpt.is_file():
        raise UserError(f"{run}: no checkpoint at step {step} to fork from")
    fork_dir.mkdir(parents=True, exist_ok=True)
    (fork_dir / "checkpoints").mkdir(exist_ok=True)
    shutil.copy2(ckpt, fork_dir / "checkpoints" / ckpt.name)
    shutil.copy2(run / "config.yaml", fork_dir / "config.yaml")
    with (
        sqlite3.connect(run / "store.sqlite") as src,
        sqlite3.connect(fork_dir / "store.sqlite") as dst,
    ):
        src.backup(dst)  # a consistent copy, WAL included
        # as it stood at `step`: what the run recorded later (its stop, first of all) goes;
        # the resume drops the later steps' metrics and alerts itself
        dst.execute("DELETE FROM events WHERE step > ?", (step,))
        dst.execute("DELETE FROM actions WHERE step > ?", (step,))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="minirl bench remediation-noise", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--forks",
        nargs="+",
        default=["is_off@80", "fp4_no_is@40"],
        help="CONFIG@STEP: fork that config's runs at that checkpoint",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", default="runs/incidents", help="runs without remediation")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=str(RESULTS / "remediation_noise.md"))
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    runs = Path(args.runs)
    out_dir = runs.with_name(runs.name + "-noise")
    rows = []
    for spec in args.forks:
        config, _, at = spec.partition("@")
        if config not in lab.configs() or not at.isdigit():
            raise UserError(f"--forks {spec!r}: expected CONFIG@STEP with a lab config")
        step, name = int(at), f"{config}@{at}"
        for seed in args.seeds:
            run, forked = runs / config / f"seed{seed}", out_dir / name / f"seed{seed}"
            if not lab.finished(run):
                continue
            if not (forked / "store.sqlite").exists():  # the store is copied last
                fork(run, forked, step)
            rows.append((name, seed, run, forked))

    def continue_fork(row: tuple[str, int, Path, Path]) -> tuple[str, int]:
        name, seed, _, forked = row
        config, overrides = name.split("@")[0], [f"seed={seed + FORK_SEED}"]
        return lab.run_one(config, seed, out_dir, overrides, run_dir=forked)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for run_dir, rc in pool.map(continue_fork, rows):
            print(f"{run_dir}: {'ok' if rc == 0 else f'exit {rc} (see its train.log)'}")
    done = [r for r in rows if lab.finished(r[3])]
    final_eval.measure([d for r in done for d in (r[2], r[3])])
    results = []
    for name, seed, run, forked in done:
        a, b = final_eval.final_accuracy(run), final_eval.final_accuracy(forked)
        if a is not None and b is not None:
            results.append({"fork": name, "seed": seed, "run": a[1], "forked": b[1]})
    if not results:
        raise UserError(f"no finished forks under {out_dir}")
    write(results, ("minirl bench remediation-noise " + shlex.join(argv)).strip(), Path(args.out))
    print(f"wrote {args.out}")
    return 0


def write(results: list[dict], command: str, out: Path) -> None:
    gaps = [r["forked"] - r["run"] for r in results]
    lower = sum(g < -TOLERANCE for g in gaps)
    lines = [
        "# How far apart two runs end when only chance separates them",
        "",
        f"Command: `{command}`. Each run without remediation, forked at a checkpoint and "
        f"continued with another seed (seed + {FORK_SEED}: other prompts and samples, no "
        "action); final accuracy of both measured as the remediation benchmark measures it "
        f"(μ at the last checkpoint, {final_eval.FINAL_SAMPLES} responses per held-out "
        "prompt).",
        "",
        f"- forks: {len(gaps)}; the fork ended more than {TOLERANCE * 100:g} points lower: "
        f"{lower} ({lower / len(gaps):.0%}); more than {TOLERANCE * 100:g} points apart "
        f"either way: {sum(abs(g) > TOLERANCE for g in gaps)}",
        f"- gap fork − run: mean {statistics.mean(gaps) * 100:+.1f} points, standard "
        f"deviation {statistics.pstdev(gaps) * 100:.1f}, range "
        f"{min(gaps) * 100:+.1f} to {max(gaps) * 100:+.1f}",
    ]
    for name in dict.fromkeys(r["fork"] for r in results):
        group = [r["forked"] - r["run"] for r in results if r["fork"] == name]
        lines.append(
            f"- {name}: {len(group)} forks, standard deviation "
            f"{statistics.pstdev(group) * 100:.1f} points; more than {TOLERANCE * 100:g} "
            f"lower {sum(g < -TOLERANCE for g in group)}, lowest {min(group) * 100:+.1f}"
        )
    lines += [
        "",
        "How to read it: the remediation benchmark calls a pair worse when the run with "
        f"remediation ends more than {TOLERANCE * 100:g} points below the run without it. "
        "A fork is that comparison with an action that does nothing: the share of forks "
        "ending that far below their run is how often a pair would be called worse by "
        "chance alone, from the step its arms part.",
        "",
        "| fork | seed | run final | fork final | gap (points) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['fork']} | {r['seed']} | {r['run']:.3f} | {r['forked']:.3f} | "
        f"{(r['forked'] - r['run']) * 100:+.1f} |"
        for r in results
    ]
    write_page(out, lines, command, forks=results)
