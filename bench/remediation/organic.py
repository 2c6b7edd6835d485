"""`minirl bench remediation --organic`: collapses nobody scripted, remediation off and on.

    minirl bench remediation --organic [--seeds 101 102 103 104] [--steps N] [--jobs 1]

Each config of `configs/lab/organic/` collapses from its configuration alone (off-policy
without clipping, lr too high, FP4 without IS), with no scripted incident; each (config,
seed) is trained with `train.remediation` false and true (existing runs are reused).
Per pair, from the runs' own `eval/acc`:
- collapsed: the eval collapse rule on the run without remediation (from the start too);
- rescued: collapsed without, and the run with remediation ends within 5 points of the
  peak the run without it reached before it collapsed;
- worse: the run with remediation ends more than 5 points lower than the run without it.
  Judged against chance: the share of worse pairs beside the share of do-nothing forks
  that end more than 5 points lower (`bench/results/remediation_noise.json`);
- the mean effect (with minus without) on collapsing pairs, with its 95 % interval
  (Student's t over the pairs).

One pooled table: bench/results/remediation_organic.md and .json.
"""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import REPO, RESULTS
from bench.detection import lab
from bench.remediation.results import report_pairs, write_page
from bench.remediation.verdicts import NOISE, TOLERANCE, noise_share
from monitor.analysis.collapse import MIN_POINTS, find_onset
from monitor.detectors.config import DetectorsConfig
from monitor.store.reader import RunReader

ORGANIC = REPO / "configs" / "lab" / "organic"


def configs() -> list[str]:
    return sorted(p.stem for p in ORGANIC.glob("*.yaml"))


@dataclass
class OrganicPair:
    config: str
    seed: int
    steps: int | None
    first: float | None
    peak_off: float | None
    final_off: float | None
    final_on: float | None
    collapsed_off: bool
    collapsed_on: bool
    rescued: bool | None
    worse: bool | None
    actions: list[str] = field(default_factory=list)
    forks: list[str] = field(default_factory=list)
    rollbacks: list[str] = field(default_factory=list)


def _evals(run_dir: Path) -> tuple[list[int], list[float]]:
    with RunReader(run_dir) as reader:
        steps, values = reader.scalars("eval/acc")["eval/acc"]
    keep = [(int(s), float(v)) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
    return [s for s, _ in keep], [v for _, v in keep]


def _collapsed(run_dir: Path) -> bool:
    """The monitor's eval collapse rule on the whole series: the analysis onset where the
    run has enough evaluations for it, else the same drop on the raw evaluations (the
    final level: the median of the last 3) from the best, the first one included."""
    import numpy as np

    steps, values = _evals(run_dir)
    rule = DetectorsConfig().eval_collapse
    if len(values) >= MIN_POINTS:
        return find_onset(np.array(steps), np.array(values), "eval/acc", rule) is not None
    if len(values) < 3:
        return False
    peak, final = max(values), statistics.median(values[-3:])
    gain = peak - min(rule.zero, min(values))
    return gain >= rule.min_peak_gain and (peak - final) / gain >= rule.crit_drop


def read_pair(config: str, seed: int, off: Path, on: Path) -> OrganicPair:
    _, v_off = _evals(off)
    s_on, v_on = _evals(on)
    collapsed = _collapsed(off)
    peak = max(v_off) if v_off else None
    final_off, final_on = (v_off[-1] if v_off else None), (v_on[-1] if v_on else None)
    both = final_on is not None and final_off is not None
    with RunReader(on) as reader:
        actions = [
            f"{a.step}: {a.kind} {a.params}" for a in reader.actions() if a.status == "applied"
        ]
        forks = [
            f"{e.step}: from {e.detail.get('from_step')}, chose {e.detail.get('chosen')} "
            f"({e.detail.get('cost_steps')} steps)"
            for e in reader.events("fork_experiment")
        ]
        rollbacks = [
            f"{e.step} → {e.detail.get('to_step')} "
            f"({(e.detail.get('healthy') or {}).get('reason', 'no verdict')})"
            for e in reader.events("rollback")
        ]
    return OrganicPair(
        config,
        seed,
        s_on[-1] if s_on else None,
        v_off[0] if v_off else None,
        peak,
        final_off,
        final_on,
        collapsed,
        _collapsed(on),
        (collapsed and final_on >= peak - TOLERANCE) if both and peak is not None else None,
        (final_on < final_off - TOLERANCE) if both else None,
        actions,
        forks,
        rollbacks,
    )


def chance_share() -> float | None:
    """The share of do-nothing forks that end more than 5 points lower than their run."""
    if not NOISE.is_file():
        return None
    lower, forks = noise_share(NOISE)
    return lower / forks if forks else None


def mean_interval(xs: list[float]) -> tuple[float, float, float] | None:
    """(mean, low, high) of the 95 % Student-t interval; None for fewer than 2 values."""
    if len(xs) < 2:
        return (xs[0], math.nan, math.nan) if xs else None
    m, sd = statistics.fmean(xs), statistics.stdev(xs)
    from scipy.stats import t  # the bench extra's (rlwatch needs scipy)

    half = float(t.ppf(0.975, len(xs) - 1)) * sd / math.sqrt(len(xs))
    return m, m - half, m + half


def stopped(run_dir: Path) -> str:
    """Why a run that exists did not finish: its log's last error line, else 'unfinished'."""
    log = run_dir / "train.log"
    errors = [ln for ln in log.read_text().splitlines() if "error:" in ln] if log.is_file() else []
    return errors[-1].strip().replace("|", "\\|") if errors else "unfinished"


def write(
    pairs: list[OrganicPair], command: str, out: Path, failed: list[tuple[str, int, str]] = ()
) -> None:
    """The pooled table; `failed`: (config, seed, why) of pairs whose run with remediation
    stopped before its end, its run without collapsing: counted as collapses not rescued."""
    collapsing = [p for p in pairs if p.collapsed_off]
    rescued = [p for p in collapsing if p.rescued]
    n_collapsing = len(collapsing) + len(failed)
    worse = [p for p in pairs if p.worse]
    chance = chance_share()
    effect = mean_interval(
        [
            p.final_on - p.final_off
            for p in collapsing
            if p.final_on is not None and p.final_off is not None
        ]
    )
    share = len(worse) / len(pairs) if pairs else 0.0
    verdict_worse = "n/a" if chance is None else ("pass" if share <= chance else "FAIL")
    lines = [
        "# Remediation on organic collapses (no scripted incident)",
        "",
        f"Made by `{command}`. Held-out accuracy is each run's own last `eval/acc`.",
        "",
        f"- pairs: {len(pairs)}; collapsed without remediation: {len(collapsing)}; "
        f"rescued: {len(rescued)}/{n_collapsing} (needs ≥ 2/3; a run with remediation that "
        "stopped before its end counts as not rescued)",
        f"- worse (> {TOLERANCE * 100:.0f} points lower with remediation): "
        f"{len(worse)}/{len(pairs)} "
        f"= {share:.0%}; chance (do-nothing forks): "
        + ("unknown" if chance is None else f"{chance:.0%}")
        + f" → {verdict_worse}",
        "- mean effect on collapsing pairs (with − without): "
        + (
            "none"
            if effect is None
            else f"{effect[0]:+.3f} (95 % interval {effect[1]:+.3f} … {effect[2]:+.3f})"
        ),
        "",
        "| config | seed | steps | first | peak off | final off | final on | collapsed off/on "
        "| rescued | worse | rollbacks (judged healthy) | fork experiments | actions |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c} | {seed} | – | – | – | – | stopped | True/– | False | – | {why} | | |"
        for c, seed, why in failed
    ]
    for p in pairs:
        lines.append(
            f"| {p.config} | {p.seed} | {p.steps} | {_f(p.first)} | {_f(p.peak_off)} | "
            f"{_f(p.final_off)} | {_f(p.final_on)} | {p.collapsed_off}/{p.collapsed_on} | "
            f"{p.rescued} | {p.worse} | {'<br>'.join(p.rollbacks)} | {'<br>'.join(p.forks)} | "
            f"{'<br>'.join(p.actions)} |"
        )
    write_page(
        out,
        lines,
        command,
        chance_worse_share=chance,
        worse_share=share,
        rescued=len(rescued),
        collapsing=n_collapsing,
        stopped=[{"config": c, "seed": seed, "why": why} for c, seed, why in failed],
        mean_effect=effect,
        pairs=[asdict(p) for p in pairs],
    )


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minirl bench remediation --organic")
    p.add_argument("--seeds", type=int, nargs="+", default=[101, 102, 103, 104])
    p.add_argument("--configs", nargs="+", choices=configs(), help="default: all")
    p.add_argument("--steps", type=int, help="train.steps (default: each config's)")
    p.add_argument("--runs", default="runs/organic")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--no-train", action="store_true", help="only report the runs that exist")
    p.add_argument("--out", default=str(RESULTS / "remediation_organic.md"))
    args = p.parse_args(argv)
    names = args.configs or configs()
    off_dir = Path(args.runs)
    on_dir = off_dir.with_name(off_dir.name + "-remediation")
    steps = [f"train.steps={args.steps}"] if args.steps else []
    todo = [f"../organic/{n}" for n in names]  # lab.run_one reads configs/lab/incidents/
    if not args.no_train:
        for seed in args.seeds:
            for name, config in zip(names, todo, strict=True):
                for out, rem in ((off_dir, "false"), (on_dir, "true")):
                    run_dir = out / name / f"seed{seed}"
                    lab.run_one(config, seed, out, [*steps, f"train.remediation={rem}"], run_dir)
    pairs, failed = [], []
    for s in args.seeds:
        for n in names:
            off, on = off_dir / n / f"seed{s}", on_dir / n / f"seed{s}"
            if lab.finished(off) and lab.finished(on):
                pairs.append(read_pair(n, s, off, on))
            elif lab.finished(off) and on.is_dir() and _collapsed(off):
                failed.append((n, s, stopped(on)))
    command = "minirl bench remediation --organic " + shlex.join(argv)
    return report_pairs(
        pairs,
        lambda ps, cmd, out: write(ps, cmd, out, failed),
        command,
        args.out,
        f"{off_dir} and {on_dir}",
    )
