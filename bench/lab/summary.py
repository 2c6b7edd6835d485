"""What one lab run showed: accuracy, collapse onset, trends, first alert, read from its store.

Collapse onset is `monitor.analysis.collapse.find_onset` (defined there once: a running-median
outcome that lost at least half of its gain over zero, onset where a fifth of the fall
is done), applied to the training accuracy `reward/acc` with the monitor's
`reward_collapse` rule and to the held-out accuracy `eval/acc` with its `eval_collapse`
rule; the run's onset is the earlier of the two. Detectors play no part in it, so the
detection benchmark can score them against it.

Imports no torch (numpy and the monitor only): reports and tests run without it.
What it does not do: aggregate over seeds or draw anything (report.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from monitor.analysis.collapse import Onset, find_onset
from monitor.config import MonitorConfig
from monitor.store.reader import RunReader
from monitor.store.records import severity_rank

SERIES = (
    "eval/acc",
    "reward/acc",
    "reward/mean",
    "reward/std",
    "policy/entropy",
    "mismatch/kl_k1",
    "routing/mismatch_train_infer",
    "staleness/kl_k3",
    "staleness/mask_frac",
    "approx/seq_residual",
    "approx/grad_cosine",
    "mismatch/ess",
    "response/len_mean",
    "optim/loss",
    "optim/grad_norm",
    "optim/lr",
)
LATE_EVALS = 5
TREND_FRAC = 0.1
"""Trends compare the mean of the first and of the last 10 % of the RL steps."""


@dataclass
class RunSummary:
    """One run, reduced to the numbers the lab's tables show."""

    run_dir: str
    last_step: int | None
    steps_planned: int | None
    stopped: str | None
    """The last stop event's reason, or `crash at step N: error` after a crash."""
    eval0: float | None
    """Held-out accuracy after the cold start (step 0)."""
    peak_eval: float | None
    peak_step: int | None
    final_eval: float | None
    """The last evaluation's held-out accuracy."""
    late_eval: float | None
    """Mean held-out accuracy of the last LATE_EVALS evaluations after step 0: what the
    comparisons use, since an unstable policy swings widely between evaluations."""
    onset: Onset | None
    """The earlier collapse onset of reward/acc and eval/acc; None: no collapse."""
    entropy: tuple[float, float] | None
    """policy/entropy: mean of the first and of the last TREND_FRAC of the steps."""
    kl: tuple[float, float] | None
    """mismatch/kl_k1, the same way."""
    routing_flip: float | None
    """Mean routing/mismatch_train_infer over the run."""
    seq_residual: float | None
    len_mean: float | None
    first_alert: tuple[int, str] | None
    """(step, detector) of the first warning or critical alert stored live."""
    first_collapse_alert: tuple[int, str] | None
    """The same among the detectors whose critical alerts mean collapse to the
    remediation policy (entropy, grad norm, length, reward/eval drop, non-finite)."""
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        """The outcome is known: the run ran to its end or diverged, or it crashed after
        its collapse onset (the collapse is already on record)."""
        ended = self.stopped in ("completed", "non-finite", "stop action")
        return ended or (
            self.stopped is not None and self.stopped.startswith("crash") and self.onset is not None
        )

    @property
    def collapsed(self) -> bool:
        return self.onset is not None or self.stopped == "non-finite"

    @property
    def collapse_step(self) -> int | None:
        """The onset, or the non-finite step of a run that diverged without one."""
        if self.onset is not None:
            return self.onset.step
        return self.last_step if self.stopped == "non-finite" else None


def collapse_onset(
    series: dict[str, tuple[np.ndarray, np.ndarray]], config: MonitorConfig | None = None
) -> Onset | None:
    """The earlier onset of reward/acc and eval/acc (module docstring), or None."""
    rules = (config or MonitorConfig()).detectors
    found = []
    for name, rule in (("reward/acc", rules.reward_collapse), ("eval/acc", rules.eval_collapse)):
        if name in series and len(series[name][0]):
            onset = find_onset(*series[name], name, rule)
            if onset is not None:
                found.append(onset)
    return min(found, key=lambda o: o.step) if found else None


def trend(steps: np.ndarray, values: np.ndarray) -> tuple[float, float] | None:
    """(mean of the first, mean of the last) TREND_FRAC of the finite RL-step values."""
    ok = np.isfinite(values) & (steps > 0)
    v = values[ok]
    if len(v) == 0:
        return None
    k = max(1, round(TREND_FRAC * len(v)))
    return float(np.mean(v[:k])), float(np.mean(v[-k:]))


def _mean(series: dict, name: str) -> float | None:
    v = series.get(name, (None, np.empty(0)))[1]
    v = v[np.isfinite(v)]
    return float(np.mean(v)) if len(v) else None


def window_mean(
    series: dict[str, tuple[np.ndarray, np.ndarray]], name: str, first: int, last: int
) -> float | None:
    """Mean of the finite values of `name` logged at steps first..last (inclusive)."""
    steps, values = series.get(name, (np.empty(0), np.empty(0)))
    v = values[(steps >= first) & (steps <= last) & np.isfinite(values)]
    return float(np.mean(v)) if len(v) else None


def summarize_run(run_dir: str | Path, config: MonitorConfig | None = None) -> RunSummary | None:
    """The summary of a run directory, None if it has no store yet."""
    run_dir = Path(run_dir)
    if not (run_dir / "store.sqlite").is_file():
        return None
    with RunReader(run_dir) as reader, reader.snapshot():
        meta = reader.meta()
        series = reader.scalars(SERIES)
        alerts = [a for a in reader.alerts() if severity_rank(a.severity) >= 1]
        stops = reader.events("stop")
        crashes = reader.events("crash")
        last_step = reader.last_step()
    planned = (meta.config or {}).get("train", {}).get("steps")
    es, ev = series["eval/acc"]
    finite = np.isfinite(ev)
    es, ev = es[finite], ev[finite]
    peak = int(np.argmax(ev)) if len(ev) else None
    entropy = trend(*series["policy/entropy"])
    kl = trend(*series["mismatch/kl_k1"])
    stopped = str(stops[-1].detail.get("reason")) if stops else None
    if crashes and (not stops or crashes[-1].id > stops[-1].id):
        stopped = f"crash at step {crashes[-1].step}: {crashes[-1].detail.get('error', '')}"
    first = min(alerts, key=lambda a: (a.step, a.id)) if alerts else None
    watch = (config or MonitorConfig()).remediation.collapse_detectors
    collapse_alerts = [a for a in alerts if a.detector in watch]
    first_c = min(collapse_alerts, key=lambda a: (a.step, a.id)) if collapse_alerts else None
    return RunSummary(
        run_dir=str(run_dir),
        last_step=last_step,
        steps_planned=int(planned) if planned is not None else None,
        stopped=stopped,
        eval0=float(ev[0]) if len(ev) and es[0] == 0 else None,
        peak_eval=float(ev[peak]) if peak is not None else None,
        peak_step=int(es[peak]) if peak is not None else None,
        final_eval=float(ev[-1]) if len(ev) else None,
        late_eval=float(np.mean(ev[es > 0][-LATE_EVALS:])) if (es > 0).any() else None,
        onset=collapse_onset(series, config),
        entropy=entropy,
        kl=kl,
        routing_flip=_mean(series, "routing/mismatch_train_infer"),
        seq_residual=_mean(series, "approx/seq_residual"),
        len_mean=_mean(series, "response/len_mean"),
        first_alert=(first.step, first.detector) if first else None,
        first_collapse_alert=(first_c.step, first_c.detector) if first_c else None,
        series=series,
    )


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for a table cell; '-' when missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e4):
        return f"{x:.2e}"
    return f"{x:.{digits}f}"
