"""Drop detector: an outcome (reward, held-out accuracy) falling from its peak.

Reward is noisy per step, so it is smoothed by an EWMA first; the peak is the running
maximum of that EWMA after warm-up (and the first value, for a rule `from_start`), and
the drop is measured as the share of the gain over a know-nothing policy (`zero`, or the
EWMA's lowest level before the peak when the outcome's scale goes below it: +1/−1
rewards) that has been lost. Higher is assumed better.

Warm-up counts training steps (`DropRule.unit`): a trainer that logs every k steps ends
its warm-up after as many steps, not k times later; the EWMA smooths per logged point.
The run's starting level counts as a peak, so a run that dies from the start has lost
its gain even though the warm-up never saw it rise. Both the fall and the gain must
exceed the smoothed outcome's noise (`DropDetector.noise_k` σ_e): a shaped reward
wandering around 0 has a smoothed peak a little above it by chance, and a fall below 0
from there is no collapse.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from monitor.detectors.base import Gate, fmt, reading
from monitor.detectors.rules import DropRule
from monitor.store.records import AlertDraft, Cleared, Severity

NOISE_POINTS = 3
"""Step-to-step changes of the raw outcome needed to estimate its noise (taken one
standard error high, `noise`); until then no fall is judged: an unknown noise is not a
zero one."""


class DropDetector:
    """One `DropRule` on one metric; updates only on steps where the metric is logged."""

    def __init__(self, name: str, rule: DropRule) -> None:
        self.name, self.rule = name, rule
        self._n = 0
        self._steps_seen = 0  # training steps the points cover (`unit`)
        self._after = 0  # points since the warm-up ended
        self._prev_step: int | None = None
        self._start: list[float] = []  # the first `min_warmup` raw values
        self._from_start = 0.0  # the share of the starting level's gain lost
        self._ewma: float | None = None  # None until the first point
        self._peak = -math.inf
        self._peak_step = 0
        self._level_step: int | None = None  # the last step the EWMA stood at its peak level
        self._lowest = math.inf  # the EWMA's lowest value so far
        self._low = rule.zero  # the gain's origin: min(zero, the lowest before the peak)
        self._gate = Gate(cooldown=rule.cooldown)
        self._last: float | None = None
        self._steps: deque[float] = deque(maxlen=100)  # |x_t − x_{t−1}| while no alert is open
        self._change: float | None = None  # this point's change, noise from the next point
        self.drop = 0.0
        """The share of the gain lost so far (0 before the peak is tracked): the outcome
        evidence the breakdown rule reads."""

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r = self.rule
        x = reading(scalars, r.metric)
        if x is None:
            return []
        k = self._span(step)
        a = r.ewma_alpha
        self._ewma = x if self._ewma is None else a * x + (1 - a) * self._ewma
        self._lowest = min(self._lowest, self._ewma)
        if self._change is not None:  # the noise judging a point is the one before it
            self._steps.append(self._change)
        self._change = abs(x - self._last) if self._last is not None else None
        if self._gate.open:  # a change while the alert is open is not noise
            self._change = None
        self._last = x
        self._n += 1
        if r.from_start and self._n == 1:  # the starting level counts as a peak
            self._peak, self._peak_step = self._ewma, step
            self._low = min(r.zero, self._lowest)
        self._steps_seen += k
        if len(self._start) < r.min_warmup:
            self._start.append(x)
        warm = self._n <= r.warmup and self._steps_seen <= r.warmup
        if warm or self._n <= r.min_warmup:
            return []
        self._after += 1
        if self._ewma > self._peak:
            self._peak, self._peak_step = self._ewma, step
            self._low = min(r.zero, self._lowest)
        if self._peak - self._ewma <= self.noise():  # within σ_e of the peak: no fall yet
            self._level_step = step
        # the guard decides whether a fall is one; an open alert clears on the fall itself
        drop = self._lost(self._peak, self._low, self.noise())
        by_start = None  # the starting level, when it sets the drop
        if r.unit == "step" and self._start:  # where the run began is a reference too
            start = sorted(self._start)[len(self._start) // 2]
            self._from_start = self._lost(start, r.zero, self.noise(True))
            if self._from_start > drop:
                drop, by_start = self._from_start, start
        if self._peak - self._low < r.min_peak_gain and not self._from_start:
            return []
        self.drop = drop
        severity: Severity | None = None
        if drop >= r.crit_drop:
            severity = "critical"
        elif r.warn_drop is not None and drop >= r.warn_drop:
            severity = "warning"
        if severity is not None:
            fire = self._gate.fire(step, severity)
            return [self._draft(x, drop, severity, by_start)] if fire else []
        if self._gate.open and drop < r.clear_drop and self._gate.calm(step):
            return [Cleared(self.name, r.metric)]
        return []

    def _lost(self, peak: float, low: float, noise: float) -> float:
        """The share of the gain from `low` to `peak` lost, 0 within the noise guard."""
        gain, fall = peak - low, peak - self._ewma
        if gain < self.rule.min_peak_gain or self._ewma is None:
            return 0.0
        if self._gate.open:  # an open alert clears on the fall itself
            return fall / gain
        if not self._noise_known():
            return 0.0  # an unknown noise is not a zero one: no fall is judged yet
        guard = self.noise_k() * noise  # a gain within it is no gain to lose either
        return fall / gain if fall >= guard and gain >= guard else 0.0

    def _span(self, step: int) -> int:
        """Steps this point stands for: 1 per point (`unit` point, or the first point),
        else the steps since the last one, at most the warm-up (a resumed run's gap)."""
        prev, self._prev_step = self._prev_step, step
        if self.rule.unit == "point" or prev is None:
            return 1
        return max(1, min(step - prev, self.rule.warmup))

    def noise(self, from_start: bool = False) -> float:
        """σ_e: the standard deviation the EWMA would have on a flat outcome with the raw
        outcome's step-to-step noise (i.i.d. noise of SD σ gives E|Δx| = 2σ/√π), 0 until
        NOISE_POINTS changes have been seen. σ is estimated from k changes, so it is taken
        one standard error high: |Δx| has a coefficient of variation √(π/2 − 1) ≈ 0.76,
        the mean of k of them 0.76/√k (+44 % at k = 3, +8 % at 100): early in a run, when
        few changes are known, an underestimate would let noise page. `from_start`: the
        peak is the starting level, whose own error adds."""
        if not self._noise_known():
            return 0.0
        a, k = self.rule.ewma_alpha, len(self._steps)
        sigma = math.sqrt(math.pi / 4) * sum(self._steps) / k
        sigma *= 1 + math.sqrt(math.pi / 2 - 1) / math.sqrt(k)
        ewma = sigma * math.sqrt(a / (2 - a))
        if not from_start:
            return ewma
        # a fall from the starting level: that median of a few raw values has its own
        # error (√(π/2)·σ/√n for a median of n), added to the EWMA's
        start = sigma * math.sqrt(math.pi / 2 / len(self._start))
        return math.hypot(ewma, start)

    def noise_k(self) -> float:
        """How many σ_e a fall must exceed: the expected peak-to-trough range of a flat
        EWMA over the m effectively independent values since warm-up (2·√(2 ln m), the
        running peak as far above the level as the trough below; m = steps·α/(2 − α),
        the EWMA's correlation time being (2 − α)/α steps), plus `drawdown_margin`, and
        never less than `noise_z`. It grows with the run, slowly: 4 (`noise_z`) for ~30
        steps after warm-up, 6.2 after 200 steps of α = 0.1, 7.2 after 600, 8.1 after 2000."""
        r = self.rule
        a = r.ewma_alpha
        m = max(self._after * a / (2 - a), 1.0)
        return max(r.noise_z, r.drawdown_margin + 2 * math.sqrt(2 * math.log(m)))

    def _noise_known(self) -> bool:
        return len(self._steps) >= NOISE_POINTS

    def _draft(self, x: float, drop: float, severity: Severity, start: float | None) -> AlertDraft:
        """The alert; `start`: the starting level, when the drop is measured from it."""
        r = self.rule
        origin = fmt(self._low) + ("" if self._low == r.zero else ", its lowest before it")
        if start is None:
            ref = f"peak {fmt(self._peak)} at step {self._peak_step}"
        else:
            origin = fmt(r.zero)
            n = len(self._start)
            ref = f"its starting level {fmt(start)} (median of the first {n})"
        return AlertDraft(
            detector=self.name,
            severity=severity,
            metric=r.metric,
            value=x,
            baseline=self._peak if start is None else start,
            window=self._n,
            factor="outcome",
            message=(
                f"{r.metric} has lost {drop:.0%} of its gain: smoothed {fmt(self._ewma)} "
                f"vs {ref} (now {fmt(x)}), gained from {origin}; the smoothed value's own "
                f"noise is ±{fmt(self.noise(start is not None))} "
                f"(a fall counts beyond {self.noise_k():.1f}× that)"
            ),
            remedy=r.remedy,
            since=self._level_step,
        )
