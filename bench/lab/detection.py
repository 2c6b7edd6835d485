"""`minirl bench detection`: do our detectors see collapse coming, and does rlwatch?

    minirl bench detection                       # score the lab's runs, write the report
    minirl bench detection --stress              # first make the runs built to collapse

The labelled set: every run of the given lab directories whose outcome is known. A run
collapsed when summary.py finds a collapse onset (monitor.analyze's definition, from
train and held-out accuracy only) or it diverged to non-finite values; a finished run
without one is stable; an unfinished run without one is left out. Both monitors are fed
the same stored metric streams, step by step, through their public APIs: our
`monitor.detectors.build_detectors` (exactly what `Monitor.log` runs live) and rlwatch's
`RLWatch.log_step` (the documented manual integration), with our names mapped to its.

Scores, per monitor configuration: on collapsing runs the lead time (onset − first alert
step; ≥ 0 is in time), late alerts (after the onset) and misses (no alert); on stable runs
the false alarms (any alert). Tuning picks, for each monitor alike, the subset of its
detectors, each at warning or at critical and at one of the threshold scales `SCALES`
(ours: absolute levels ×s, or ÷s on a low-side rule; rlwatch: its sigma multipliers ×s,
its entropy floor ÷s), that maximises Youden's J (share of collapses alerted in time minus
share of stable runs alarmed) on the tuning runs; the scores are reported on the other
runs. The split is fixed by a hash of the run's name (about half
each, `in_tuning_set`), so a partial lab already has both kinds of run on both sides.

What it does not do: change how a detector works (it replays each at other thresholds and
selects among them), or define collapse (summary.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import statistics
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from monitor.config import LevelRule, MonitorConfig
from monitor.detectors import build_detectors
from monitor.errors import UserError
from monitor.reader import RunReader
from monitor.records import AlertDraft, severity_rank
from bench.lab.report import hand_notes
from bench.lab.runner import RunSpec, detach, load_manifest, run_all, status_table
from bench.lab.summary import RunSummary, fmt, summarize_run

REPO = Path(__file__).resolve().parents[2]
OUTCOME_DETECTORS = ("reward_collapse", "eval_collapse")
"""Ours that watch the outcome itself (a fall from the peak), not a precursor."""
# our metric -> rlwatch.log_step keyword (rlwatch's TRL map accepts approx_kl as its KL)
RLWATCH_NAMES = {
    "policy/entropy": "entropy",
    "staleness/kl_k3": "kl_divergence",
    "reward/mean": "reward_mean",
    "reward/std": "reward_std",
    "optim/loss": "loss",
    "optim/lr": "learning_rate",
    "staleness/mask_frac": "clip_fraction",
    "optim/grad_norm": "grad_norm",
}
FirstAlerts = dict[str, int]
"""item -> first step it alerts; an item is `detector` (warning or worse) or
`detector!` (critical only)."""


@dataclass
class Labelled:
    key: str
    summary: RunSummary
    ours: FirstAlerts = field(default_factory=dict)
    rlwatch: FirstAlerts = field(default_factory=dict)
    live: FirstAlerts | None = None
    """Our first alerts as the live monitor stored them (a check of the replay)."""

    @property
    def onset(self) -> int | None:
        return self.summary.collapse_step

    @property
    def tuning(self) -> bool:
        return in_tuning_set(self.key)


def in_tuning_set(key: str) -> bool:
    """The fixed tuning/report split: even first byte of sha1(run name)."""
    return hashlib.sha1(key.encode()).digest()[0] % 2 == 0


# ---------------------------------------------------------------------------- streams


def step_stream(run_dir: str | Path) -> list[tuple[int, dict[str, float]]]:
    """Every logged step of a run with the scalars logged at it, in order (NaN kept)."""
    with RunReader(run_dir) as reader, reader.snapshot():
        series = reader.scalars(reader.metric_names())
    steps: dict[int, dict[str, float]] = {}
    for name, (s, v) in series.items():
        for step, value in zip(s.tolist(), v.tolist(), strict=True):
            steps.setdefault(step, {})[name] = value
    return sorted(steps.items())


def live_first_alerts(run_dir: str | Path) -> FirstAlerts:
    """First warning/critical step per detector among the alerts stored during the run."""
    first: FirstAlerts = {}
    with RunReader(run_dir) as reader:
        for alert in reader.alerts(min_severity="warning"):
            _record(first, alert.detector, alert.severity, alert.step)
    return first


def _record(first: FirstAlerts, detector: str, severity: str, step: int) -> None:
    first.setdefault(detector, step)
    if severity == "critical":
        first.setdefault(detector + "!", step)


def _default(first: FirstAlerts) -> FirstAlerts:
    """The items of the monitor as configured by default (no `~rel`, no `@x` scale)."""
    return {k: v for k, v in first.items() if REL not in k and "@x" not in k}


REL = "~rel"
"""Suffix of the items of `relative_config`: our rules without their absolute levels."""
SCALES = (2, 4, 8, 16, 32)
"""Threshold scales the tuning may pick per detector (items `detector@xS`): less
sensitive by S. Ours at scale 1 is the default; 32 takes the warning level of
mismatch/kl_k1 from 2e-2 to 0.64."""


def _scaled(level: float | None, factor: float) -> float | None:
    return None if level is None else level * factor


def scaled_config(scale: float) -> tuple[MonitorConfig, set[str]]:
    """Our detectors with every absolute level `scale` times less sensitive and their
    baseline-change rules off, and the names of the rules that have a level (the only
    ones the scale changes)."""
    base = MonitorConfig()
    rules, scaled = {}, set()
    for f in dataclasses.fields(base.detectors):
        rule = getattr(base.detectors, f.name)
        if isinstance(rule, LevelRule) and (rule.warn_level, rule.crit_level) != (None, None):
            k = scale if rule.direction == "high" else 1 / scale
            rule = dataclasses.replace(
                rule,
                warn_level=_scaled(rule.warn_level, k),
                crit_level=_scaled(rule.crit_level, k),
                z_warn=None,
                z_crit=None,
            )
            scaled.add(f.name)
        rules[f.name] = rule
    config = dataclasses.replace(base, detectors=dataclasses.replace(base.detectors, **rules))
    return config, scaled


def ours_scaled_first_alerts(stream: Sequence[tuple[int, dict[str, float]]]) -> FirstAlerts:
    """`detector@xS` items: our level rules replayed at every scale of SCALES."""
    out: FirstAlerts = {}
    for scale in SCALES:
        config, names = scaled_config(scale)
        for item, step in ours_first_alerts(stream, config).items():
            if item.rstrip("!") in names:
                out[_at(item, scale)] = step
    return out


def _at(item: str, scale: float) -> str:
    """`det!` at scale 4 -> `det@x4!` (the critical mark stays last)."""
    crit = item.endswith("!")
    return f"{item.rstrip('!')}@x{scale:g}" + ("!" if crit else "")


def relative_config() -> MonitorConfig:
    """Our detectors with every absolute level switched off, so only changes against the
    run's own baseline alert. Declared up front, not tuned: in a lab whose mismatch is
    induced on purpose, the absolute levels fire from step 1 on every run."""
    base = MonitorConfig()
    rules = {}
    for f in dataclasses.fields(base.detectors):
        rule = getattr(base.detectors, f.name)
        if isinstance(rule, LevelRule):
            rule = dataclasses.replace(rule, warn_level=None, crit_level=None)
        rules[f.name] = rule
    return dataclasses.replace(base, detectors=dataclasses.replace(base.detectors, **rules))


def ours_first_alerts(
    stream: Iterable[tuple[int, dict[str, float]]], config: MonitorConfig | None = None
) -> FirstAlerts:
    """First warning/critical step of each of our detectors on a replayed stream."""
    detectors = build_detectors((config or MonitorConfig()).detectors)
    first: FirstAlerts = {}
    for step, values in stream:
        for det in detectors:
            for change in det.update(step, values):
                if isinstance(change, AlertDraft) and severity_rank(change.severity) >= 1:
                    _record(first, change.detector, change.severity, step)
    return first


def rlwatch_first_alerts(
    stream: Iterable[tuple[int, dict[str, float]]], scale: float = 1.0
) -> FirstAlerts:
    """First alert step of each rlwatch detector, fed through `RLWatch.log_step`.

    rlwatch's defaults, except that its per-run alert budget is lifted (it caps delivered
    alerts at 50, which would hide later first alerts of other detectors) and its SQLite
    log goes to a temporary directory. Its console panels are swallowed. `scale` > 1 makes
    its thresholds that many times less sensitive (sigma and variance multipliers ×scale,
    minimum drift ×scale, entropy floor ÷scale); items are then named `detector@xS`.
    """
    from rlwatch import RLWatch, RLWatchConfig

    first: FirstAlerts = {}
    with tempfile.TemporaryDirectory(prefix="rlwatch-") as tmp:
        cfg = RLWatchConfig(run_id="lab", framework="manual")
        cfg.storage.log_dir = tmp
        cfg.alerts.max_alerts_per_run = 10**9
        if scale != 1:
            cfg.kl_explosion.sigma_multiplier *= scale
            cfg.gradient_norm_spike.sigma_multiplier *= scale
            cfg.advantage_variance.std_multiplier *= scale
            cfg.reward_hacking.variance_multiplier *= scale
            cfg.reward_mean_drift.min_drift_magnitude *= scale
            cfg.entropy_collapse.threshold /= scale
        mon = RLWatch(cfg)
        mon.start()
        sink = io.StringIO()
        try:
            with contextlib.redirect_stderr(sink):
                for step, values in stream:
                    kwargs = {
                        theirs: values[ours]
                        for ours, theirs in RLWATCH_NAMES.items()
                        if ours in values
                    }
                    if step == 0 or not kwargs:  # step 0 holds the cold-start eval only
                        continue
                    for alert in mon.log_step(step, **kwargs):
                        name = alert.detector if scale == 1 else _at(alert.detector, scale)
                        _record(first, name, alert.severity, step)
        finally:
            mon.stop()
    return first


# ---------------------------------------------------------------------------- scoring


@dataclass
class Score:
    collapsing: int
    stable: int
    in_time: list[int]
    """Lead times (onset − first alert ≥ 0) of the collapses alerted in time."""
    late: int
    missed: int
    false_alarms: int

    def line(self, name: str) -> str:
        lead = (
            "-"
            if not self.in_time
            else f"{statistics.median(self.in_time):.0f} ({min(self.in_time)}-{max(self.in_time)})"
        )
        return (
            f"| {name} | {len(self.in_time)}/{self.collapsing} | {lead} | {self.late} | "
            f"{self.missed} | {self.false_alarms}/{self.stable} |"
        )


def first_of(first: FirstAlerts, items: Iterable[str] | None) -> int | None:
    steps = [s for k, s in first.items() if items is None or k in items]
    return min(steps) if steps else None


def score(runs: Sequence[Labelled], which: str, items: Iterable[str] | None = None) -> Score:
    """Score one monitor ('ours' or 'rlwatch') restricted to `items` (None: all, warning+)."""
    items = None if items is None else set(items)
    sc = Score(0, 0, [], 0, 0, 0)
    for run in runs:
        alert = first_of(getattr(run, which), items)
        if run.onset is None:
            sc.stable += 1
            sc.false_alarms += alert is not None
            continue
        sc.collapsing += 1
        if alert is None:
            sc.missed += 1
        elif alert <= run.onset:
            sc.in_time.append(run.onset - alert)
        else:
            sc.late += 1
    return sc


def tune(runs: Sequence[Labelled], which: str) -> list[str]:
    """Greedy forward selection of detector items maximising Youden's J: the share of
    collapses alerted in time minus the share of stable runs alarmed. Balanced, so an
    alarm that fires on every run scores 0 however many runs collapse."""
    candidates = sorted({k for r in runs for k in getattr(r, which)})
    chosen: list[str] = []

    def value(items: list[str]) -> tuple[float, int]:
        s = score(runs, which, items)
        hit = len(s.in_time) / s.collapsing if s.collapsing else 0.0
        fa = s.false_alarms / s.stable if s.stable else 0.0
        return hit - fa, -len(items)

    best = value(chosen)
    while True:
        trials = [(value([*chosen, c]), c) for c in candidates if c not in chosen]
        if not trials:
            break
        top, c = max(trials)
        if top <= best:
            break
        chosen.append(c)
        best = top
    return chosen


# ---------------------------------------------------------------------------- the set


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


def _cell(first: FirstAlerts, items: Iterable[str] | None) -> str:
    items = None if items is None else set(items)
    hits = [(s, k) for k, s in first.items() if items is None or k in items]
    if not hits:
        return "none"
    step, name = min(hits)
    return f"{step} ({name})"


def write_detection_report(runs: Sequence[Labelled], out: Path, command: str) -> None:
    tune_set = [r for r in runs if r.tuning]
    report_set = [r for r in runs if not r.tuning]
    ours_all = sorted({k for r in runs for k in _default(r.ours)})
    precursors = [k for k in ours_all if k.rstrip("!") not in OUTCOME_DETECTORS]
    relative = sorted({k for r in runs for k in r.ours if k.endswith(REL)
                       and k[: -len(REL)].rstrip("!") not in OUTCOME_DETECTORS})  # fmt: skip
    rl_all = sorted({k for r in runs for k in _default(r.rlwatch)})
    ours_tuned = tune(tune_set, "ours")
    rl_tuned = tune(tune_set, "rlwatch")
    configs = [
        ("ours, every detector (defaults)", "ours", ours_all),
        ("ours, precursors only (no reward/eval drop detectors)", "ours", precursors),
        (f"ours, precursors, baseline-change rules only (`{REL}`)", "ours", relative),
        (f"ours, tuned: {', '.join(ours_tuned) or 'none'}", "ours", ours_tuned),
        ("rlwatch 0.5.1, every detector (defaults)", "rlwatch", rl_all),
        (f"rlwatch, tuned: {', '.join(rl_tuned) or 'none'}", "rlwatch", rl_tuned),
    ]
    head = [
        "| monitor | collapses alerted in time | lead, steps: median (range) | late | "
        "missed | false alarms on stable runs |",
        "|---|---|---|---|---|---|",
    ]
    n_c = sum(r.onset is not None for r in runs)
    same = sum(r.live == _default(r.ours) for r in runs if r.live is not None)
    lines = [
        "# Detection benchmark: lead time, misses and false alarms, ours vs rlwatch",
        "",
        f"Command: `{command}`. Labelled runs: {len(runs)} ({n_c} collapsing, "
        f"{len(runs) - n_c} stable), split once by a hash of the run name into a tuning set "
        f"({len(tune_set)} runs: {sum(r.onset is not None for r in tune_set)} collapsing) and "
        f"a disjoint report set ({len(report_set)} runs: "
        f"{sum(r.onset is not None for r in report_set)} collapsing); the per-run table says "
        "which run is in which.",
        "",
        "Labels come from the runs' accuracy only (monitor.analyze's collapse onset on "
        "`reward/acc` and `eval/acc`, or non-finite divergence), never from a detector. Both "
        "monitors read the same stored streams step by step: ours through "
        "`build_detectors` (what `Monitor.log` runs live), rlwatch through "
        "`RLWatch.log_step` with "
        + ", ".join(f"`{a}`→`{b}`" for a, b in RLWATCH_NAMES.items())
        + ". Not fed to rlwatch: per-sample rewards (not stored: its dip test idles) and "
        "advantage std (not logged by our trainer). A lead ≥ 0 means the first alert came at "
        "or before the onset; an alert on a stable run is a false alarm. The replay of our "
        f"detectors gives the same first alert per detector as the live run stored on {same} "
        f"of {sum(r.live is not None for r in runs)} runs.",
        "",
        "## Report set (runs not used for tuning)",
        "",
        *head,
        *[score(report_set, which, items).line(name) for name, which, items in configs],
        "",
        "## Tuning set (where the subsets and scales were chosen, so optimistic)",
        "",
        *head,
        *[score(tune_set, which, items).line(name) for name, which, items in configs],
        "",
        "## Per run",
        "",
        "| run | set | onset | our first alert | our first precursor alert | ours, baseline-change "
        "rules | rlwatch first alert |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.key} | {'tune' if r.tuning else 'report'} | "
            f"{r.onset if r.onset is not None else 'stable'} | {_cell(r.ours, ours_all)} | "
            f"{_cell(r.ours, precursors)} | {_cell(r.ours, relative)} | "
            f"{_cell(r.rlwatch, rl_all)} |"
        )
    lines += [
        "",
        "## Which detectors fire, and how early (all runs)",
        "",
        "Items: `detector` alerts at warning or worse, `detector!` at critical; `~rel`: our "
        "rule with its absolute levels off (baseline change only); `@xS`: thresholds S times "
        f"less sensitive (scales tried: {', '.join(f'{s:g}' for s in SCALES)}; only the "
        "tuned picks are listed).",
        "",
        "| monitor | detector | runs alerted: collapsing | stable | median first step |",
        "|---|---|---|---|---|",
    ]
    chosen = {"ours": set(ours_tuned), "rlwatch": set(rl_tuned)}
    for which in ("ours", "rlwatch"):
        items = sorted(
            {k for r in runs for k in getattr(r, which) if "@x" not in k or k in chosen[which]}
        )
        for item in items:
            hit_c = [r for r in runs if item in getattr(r, which) and r.onset is not None]
            hit_s = [r for r in runs if item in getattr(r, which) and r.onset is None]
            steps = [getattr(r, which)[item] for r in runs if item in getattr(r, which)]
            lines.append(
                f"| {which} | {item} | {len(hit_c)}/{n_c} | {len(hit_s)}/"
                f"{len(runs) - n_c} | {fmt(float(np.median(steps)), 0)} |"
            )
    lines += ["", *hand_notes(out)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines).rstrip("\n") + "\n")


# ---------------------------------------------------------------------------- stress runs

STRESS_SETTINGS = ("stress_lr_ramp", "stress_offpolicy8x_noclip_lr_ramp", "stress_no_is_lr_ramp")


def stress_specs(lab_dir: Path, seeds: int, steps: int | None, extra: list[str]) -> list[RunSpec]:
    from bench.lab.stability import CONFIG_DIR, lab_specs

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
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "detection.md"))
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
            Path(args.stress_dir), ["detection", *argv],
            f"minirl bench detection --status --stress-dir {args.stress_dir}",
        )  # fmt: skip
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
