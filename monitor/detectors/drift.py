"""Drift detector: a slow creep above the run's starting level, by CUSUM on z-scores.

The level detector compares with a rolling baseline, which follows a slow drift and so
never sees it; this one compares with a reference frozen at the start of the run, and
accumulates evidence (one-sided CUSUM, Page 1954) so that a sustained 2σ shift fires in
about eight steps while single spikes (z clipped) do not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from monitor.config import DriftRule
from monitor.detectors.base import Gate, fmt, robust_z
from monitor.records import AlertDraft, Cleared


class DriftDetector:
    """One `DriftRule` on one metric (upward drift only)."""

    def __init__(self, name: str, rule: DriftRule) -> None:
        self.name, self.rule = name, rule
        self._ref: list[float] = []
        self._med = self._scale = 0.0
        self._s = 0.0  # CUSUM statistic, σ·steps
        self._ewma: float | None = None  # of log values
        self._gate = Gate(cooldown=rule.cooldown)

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r = self.rule
        x = scalars.get(r.metric)
        if x is None or not math.isfinite(x):
            return []
        lx = math.log(max(x, r.floor))
        self._ewma = (
            lx if self._ewma is None else r.ewma_alpha * lx + (1 - r.ewma_alpha) * self._ewma
        )
        if len(self._ref) < r.reference:
            self._ref.append(lx)
            if len(self._ref) == r.reference:
                _, self._med, self._scale = robust_z(0.0, self._ref, r.sigma_floor)
            return []
        z = min((lx - self._med) / self._scale, r.z_clip)
        self._s = min(r.cap * r.h, max(0.0, self._s + z - r.k))  # CUSUM, Page 1954
        fold = math.exp(self._ewma - self._med)
        if self._s >= r.h and fold >= r.min_fold:
            if self._gate.fire(step, r.severity):
                return [self._draft(x, fold)]
            return []
        back = self._s < r.h / 4 or fold < math.sqrt(r.min_fold)
        if self._gate.open and back and self._gate.calm(step):
            self._s = 0.0
            return [Cleared(self.name, r.metric)]
        if not self._gate.open:
            self._gate.quiet()
        return []

    def _draft(self, x: float, fold: float) -> AlertDraft:
        r, base = self.rule, math.exp(self._med)
        return AlertDraft(
            detector=self.name,
            severity=r.severity,
            metric=r.metric,
            value=x,
            baseline=base,
            window=r.reference,
            factor=r.factor,
            message=(
                f"{r.metric} has drifted up: smoothed level {fmt(fold)}× its reference "
                f"{fmt(base)} (first {r.reference} steps), now {fmt(x)}; CUSUM {self._s:.1f}σ"
                f" ≥ {fmt(r.h)}"
            ),
            remedy=r.remedy,
        )
