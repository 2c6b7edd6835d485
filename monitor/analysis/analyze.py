"""Post-hoc analysis of a run: collapse onset, precursors ranked by lead, the factor first broken.

What `minirl analyze` reports, read from a run store: the outcome and its collapse onset
or divergence (`collapse.py`, where each is defined), the precursors that led it
(`precursors.py`), the factor of the first IS-factor precursor, the stored alerts and
the detectors' replay of the stream (`replay.py`), and whether the held-out score
recovered after the last episode (`recovery.py`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.analysis.collapse import (
    MIN_POINTS,
    OUTCOME_METRICS,
    Onset,
    diverged_at,
    find_onset,
)
from monitor.analysis.precursors import Precursor, baseline_steps, find_precursors
from monitor.analysis.recovery import recovery_of
from monitor.analysis.replay import DISAGREES, UNREADABLE, agrees, replay
from monitor.config import MonitorConfig
from monitor.store.reader import RunReader

IS_FACTORS = ("train_inference", "staleness", "routing")
"""The factors of the IS weight: the first precursor among their metrics is the one broken."""


@dataclass
class Analysis:
    run: str
    run_id: str
    first_step: int | None
    last_step: int | None
    outcome: str | None
    onset: Onset | None
    precursors: list[Precursor] = field(default_factory=list)
    first_factor: str | None = None
    baseline_start: int | None = None
    baseline_end: int | None = None
    """Precursor baselines use the steps from `baseline_start` up to this one."""
    diverged: int | None = None
    """First step of a divergence (`diverged_at`), or None."""
    alerts: list[Any] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replayed: list[dict[str, Any]] = field(default_factory=list)
    """The warning and critical alerts the detectors raise when the stored stream is
    replayed through them (the same `DetectorSet` `Monitor.log` runs live)."""
    replay_agrees: bool | None = None
    """Whether the replay opens the same (step, detector) alerts as were stored live
    (None: nothing was stored live, e.g. a run recorded without detectors)."""
    recovery: dict[str, Any] | None = None
    """Whether the last held-out accuracy is back within noise of the best before the
    run's last episode (`recovery_of`); None without an episode or evals."""
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    """Every scalar of the run, for the report's charts."""

    @property
    def collapse_step(self) -> int | None:
        """The onset of the outcome's fall, else of a divergence: what precursors lead."""
        return self.onset.step if self.onset is not None else self.diverged

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (NaN and inf as strings), without the raw series."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return str(value)
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [clean(v) for v in value]
            return value

        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "series"}
        out["collapsed"] = self.collapse_step is not None
        return clean(out)


def analyze_run(
    run: str, outcome: str | None = None, config: MonitorConfig | None = None
) -> Analysis:
    """Read a run store and analyse it (see the module docstring)."""
    config = config or MonitorConfig()
    with RunReader(run) as reader, reader.snapshot():
        meta = reader.meta()
        names = reader.metric_names()
        series = reader.scalars(names)
        steps = reader.steps()
        result = Analysis(
            run=str(run),
            run_id=meta.run_id,
            first_step=int(steps[0]) if len(steps) else None,
            last_step=int(steps[-1]) if len(steps) else None,
            outcome=None,
            onset=None,
            alerts=[dataclasses.asdict(a) for a in reader.alerts()],
            actions=[dataclasses.asdict(a) for a in reader.actions()],
            events=[dataclasses.asdict(e) for e in reader.events()],
            series=series,
        )
    live_config = meta.config.get("monitor") if isinstance(meta.config, dict) else None
    result.replayed, read = replay(series, live_config)
    result.notes += [] if read else [UNREADABLE]
    if result.alerts:
        result.replay_agrees = agrees(result.alerts, result.replayed)
        result.notes += [] if result.replay_agrees else [DISAGREES]
    if "eval/acc" in series:
        result.recovery = recovery_of(series["eval/acc"], result.alerts)
    if outcome is not None and outcome not in series:
        from core.errors import UserError

        raise UserError(f"metric {outcome!r} is not in {run}; it has: {', '.join(names)}")
    candidates = [outcome] if outcome else list(OUTCOME_METRICS)
    for name in candidates:
        if name in series and np.isfinite(series[name][1]).sum() >= MIN_POINTS:
            result.outcome = name
            break
    result.diverged = diverged_at(steps, series)
    if result.outcome is None:
        result.notes.append(
            f"no outcome metric with ≥ {MIN_POINTS} values ({', '.join(candidates)}): "
            "collapse onset not assessed"
        )
    else:
        drops = config.detectors
        rule = drops.eval_collapse if result.outcome == "eval/acc" else drops.reward_collapse
        result.onset = find_onset(*series[result.outcome], result.outcome, rule)
        if result.onset is None:
            result.notes.append(f"no collapse: {result.outcome} kept at least half of its gain")
    onset = result.collapse_step
    if onset is None:
        return result
    outcome_name = result.outcome or OUTCOME_METRICS[0]
    found = find_precursors(series, onset, outcome_name, config)
    if found is None:
        pre, since = baseline_steps(series, onset, outcome_name)
        learned = "" if since is None else f" from where the run had learned (step {since})"
        result.notes.append(f"only {len(pre)} steps{learned} to the onset: too few for a baseline")
        return result
    result.baseline_start, result.baseline_end, result.precursors = found
    first = next((p for p in result.precursors if p.factor in IS_FACTORS), None)
    result.first_factor = first.factor if first else None
    return result
