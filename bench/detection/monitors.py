"""Both monitors replayed on a run's stream, step by step: every alert each one opens.

Ours through `monitor.detectors.DetectorSet` (exactly what `Monitor.log` runs live and
what `minirl analyze` replays), rlwatch through `RLWatch.log_step` (its documented manual
integration) with our canonical names mapped to its keywords. Each alert is reduced to
(step, severity, detector, factor); rlwatch's detectors are given the factor they watch.
Nothing here changes how either monitor works.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from dataclasses import dataclass

from bench.detection.corpus import Stream
from monitor.detectors import DetectorSet
from monitor.detectors.config import DetectorsConfig
from monitor.detectors.rules import SETTINGS
from monitor.store.records import AlertDraft

# our metric -> rlwatch.log_step keyword (rlwatch's TRL map accepts approx_kl as its KL)
RLWATCH_NAMES = {
    "policy/entropy": "entropy",
    "staleness/kl_k3": "kl_divergence",
    "staleness/kl_k1": "kl_divergence",
    "reward/mean": "reward_mean",
    "reward/std": "reward_std",
    "optim/loss": "loss",
    "optim/lr": "learning_rate",
    "staleness/mask_frac": "clip_fraction",
    "optim/grad_norm": "grad_norm",
}
UNLOGGED = frozenset(SETTINGS) - {"optim/lr"}
"""Settings of a run that other trainers' logs do not carry (the learning rate they do)."""
RLWATCH_FACTORS = {
    "entropy_collapse": "optimisation",
    "kl_explosion": "staleness",
    "gradient_norm_spike": "optimisation",
    "advantage_variance": "optimisation",
    "reward_hacking": "outcome",
    "reward_mean_drift": "outcome",
}


@dataclass(frozen=True)
class Fired:
    step: int
    severity: str
    detector: str
    factor: str
    metric: str = ""


def ours(stream: Stream, config: DetectorsConfig | None = None) -> list[Fired]:
    """Every warning or critical alert our detectors open on the stream, in order."""
    detectors = DetectorSet(config or DetectorsConfig())
    out = []
    for step, values in stream:
        for change in detectors.update(step, values):
            if isinstance(change, AlertDraft) and change.severity != "info":
                out.append(
                    Fired(step, change.severity, change.detector, change.factor, change.metric)
                )
    return out


def without_settings(stream: Stream) -> Stream:
    """The stream as a log of another trainer reads: none of the run's settings
    (`SETTINGS`) that trainers do not log (policy updates per rollout, rollout precision,
    clip mask, length normalisation), only what the run measured and its learning rate
    (verl's actor/lr, TRL's learning_rate). rlwatch's detectors use none of them."""
    return [(step, {k: v for k, v in vals.items() if k not in UNLOGGED}) for step, vals in stream]


def rlwatch(stream: Stream) -> list[Fired]:
    """Every alert rlwatch 0.5.1 raises with its defaults (its per-run alert budget lifted,
    which would otherwise hide later alerts; its SQLite log in a temporary folder; its
    console panels swallowed)."""
    from rlwatch import RLWatch, RLWatchConfig

    out = []
    with tempfile.TemporaryDirectory(prefix="rlwatch-") as tmp:
        cfg = RLWatchConfig(run_id="bench", framework="manual")
        cfg.storage.log_dir = tmp
        cfg.alerts.max_alerts_per_run = 10**9
        mon = RLWatch(cfg)
        mon.start()
        try:
            with (
                contextlib.redirect_stderr(io.StringIO()),
                contextlib.redirect_stdout(io.StringIO()),
            ):
                for step, values in stream:
                    kwargs = {
                        theirs: values[mine]
                        for mine, theirs in RLWATCH_NAMES.items()
                        if mine in values
                    }
                    if step == 0 or not kwargs:  # step 0 of our runs is the cold-start eval
                        continue
                    for alert in mon.log_step(step, **kwargs):
                        factor = RLWATCH_FACTORS.get(alert.detector, "optimisation")
                        out.append(Fired(step, alert.severity, alert.detector, factor))
        finally:
            mon.stop()
    return out
