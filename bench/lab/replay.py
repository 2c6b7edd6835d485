"""Both monitors replayed on a run's stored metric streams: their first alert per detector.

Ours through `monitor.detectors.build_detectors` (exactly what `Monitor.log` runs live),
rlwatch through `RLWatch.log_step` (its documented manual integration) with our names
mapped to its. Besides each monitor's defaults, every threshold-bearing rule is replayed
at the scales `SCALES` (items `detector@xS`) and ours also without absolute levels
(items `detector~rel`), so that the tuning (scoring.py) can select among them.

What it does not do: change how a detector works (it replays each at other thresholds).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from monitor.config import LevelRule, MonitorConfig
from monitor.detectors import build_detectors
from monitor.reader import RunReader
from monitor.records import AlertDraft, severity_rank

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
            record(first, alert.detector, alert.severity, alert.step)
    return first


def record(first: FirstAlerts, detector: str, severity: str, step: int) -> None:
    first.setdefault(detector, step)
    if severity == "critical":
        first.setdefault(detector + "!", step)


def default_items(first: FirstAlerts) -> FirstAlerts:
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
                    record(first, change.detector, change.severity, step)
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
                        record(first, name, alert.severity, step)
        finally:
            mon.stop()
    return first
