"""The detector protocol and the small pieces of state the detectors share.

A detector reads one step's scalars and returns what changed: new alerts (`AlertDraft`)
and alerts that are over (`Cleared`). It keeps its own baseline; it never touches the
store, the clock or other detectors. `Gate` is the open/cleared/cooldown bookkeeping
(hysteresis) that every detector would otherwise repeat.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Protocol

from monitor.store.records import AlertDraft, Cleared, Severity, severity_rank

MAD_TO_SIGMA = 1.4826  # σ = 1.4826·MAD for a normal distribution


class Detector(Protocol):
    """Anything with a name that turns a step's scalars into alert changes."""

    name: str

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        """Alerts that fire (or escalate) and alerts that clear at this step."""
        ...


def median(values: list[float]) -> float:
    """The median of a non-empty list (plain Python: fast on the short windows here)."""
    s, n = sorted(values), len(values)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def robust_z(x: float, history: Iterable[float], sigma_floor: float) -> tuple[float, float, float]:
    """(z, median, scale) of `x` against `history`: (x − median) / max(1.4826·MAD, floor).

    Plain Python: on windows this small it is much faster than np.median per call, and
    it runs for every rule at every step."""
    values = list(history)
    med = median(values)
    mad = median([abs(v - med) for v in values])
    scale = max(MAD_TO_SIGMA * mad, sigma_floor)
    return (x - med) / scale, med, scale


def step_noise(values: list[float]) -> float:
    """σ of a series from its step-to-step changes: median |x_i+1 − x_i| / 0.954 (for
    i.i.d. noise of SD σ the changes have SD √2·σ, so their median |Δ| is 0.954σ). Unlike
    the MAD about the median, a steady trend through the values adds little to it."""
    return median([abs(b - a) for a, b in itertools.pairwise(values)]) / 0.954


def reading(scalars: Mapping[str, float], metric: str) -> float | None:
    """`metric`'s value at this step, or None when it is not logged or not finite (a NaN
    or an inf is the non-finite detector's business, not a level, a change or a drop)."""
    x = scalars.get(metric)
    return x if x is not None and math.isfinite(x) else None


def fmt(value: float) -> str:
    """Numbers in messages: 3 significant digits, readable for 1e-5 and 1e5 alike."""
    return f"{value:.3g}" if math.isfinite(value) else str(value)


class Gate:
    """Open/escalate/clear/cooldown state of one alert stream (one detector × metric).

    `fire(step, severity)` says whether to emit an alert now: when closed and out of
    cooldown after `persist` consecutive calls, or when open and the severity rises.
    `calm(step)` counts steps that passed the clear test and closes after `clear_after`.
    """

    def __init__(self, persist: int = 1, clear_after: int = 1, cooldown: int = 0) -> None:
        self.persist, self.clear_after, self.cooldown = persist, clear_after, cooldown
        self.open = False
        self.severity: Severity | None = None
        self._streak = 0
        self._calm = 0
        self._cleared_at: int | None = None

    def fire(self, step: int, severity: Severity) -> bool:
        self._calm = 0
        if self.open:
            if severity_rank(severity) > severity_rank(self.severity or "info"):
                self.severity = severity
                return True
            return False
        self._streak += 1
        cooling = self._cleared_at is not None and step - self._cleared_at < self.cooldown
        if self._streak < self.persist or cooling:
            return False
        self.open, self.severity, self._streak = True, severity, 0
        return True

    def quiet(self) -> None:
        """A step without the firing condition while closed: reset the persistence streak."""
        self._streak = 0

    def calm(self, step: int) -> bool:
        """A step that passed the clear test while open; True when the alert clears."""
        self._calm += 1
        if self._calm < self.clear_after:
            return False
        self.open, self.severity, self._calm, self._cleared_at = False, None, 0, step
        return True

    def calm_now(self, step: int) -> None:
        """Close at once (the detector decided the alert is over), cooldown from here."""
        self.open, self.severity, self._calm, self._cleared_at = False, None, 0, step

    def not_calm(self) -> None:
        self._calm = 0
