"""Change detector: a metric moving against the run's own baseline — the precursor test.

What precedes a collapse, in our lab and in public logs of other trainers, is change: the
effective sample size falling, ratio tails and clip fractions rising, the gradient norm
climbing, entropy sliding, the mismatch growing against the run's own earlier level. A
constant level, however large, is not change. The baseline is robust (median/MAD) and
learned after warm-up, it lags the present by `gap` points so a rise is not absorbed as it
happens, and it freezes while the rule holds, so a breakdown cannot become its own
reference. See `ChangeRule` for the exact test.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from monitor.detectors.base import Gate, fmt, median, reading, robust_z, step_noise
from monitor.detectors.rules import ChangeRule
from monitor.store.records import AlertDraft, Cleared

MAX_STRIDE = 10
"""A gap longer than this (a resumed run) is not the logging stride."""
MIN_BASELINE_POINTS = 5
"""A baseline is never shorter than this many logged points, however sparse the log."""


def carries_no_scale(rule: ChangeRule, x: float) -> bool:
    """A value at or below the floor of a `skip_floor` rule: it neither teaches the
    baseline nor scores (live here; left out of `minirl analyze`'s precursor test too)."""
    return rule.skip_floor and x <= rule.floor


class ChangeDetector:
    """One `ChangeRule` on one metric."""

    def __init__(self, name: str, rule: ChangeRule) -> None:
        self.name, self.rule = name, rule
        self._n = 0  # finite points seen
        self._history: deque[float] = deque(maxlen=rule.window + rule.gap)
        self._recent: deque[float] = deque(maxlen=rule.recent)
        self._gate = Gate(rule.persist, rule.clear_after, rule.cooldown)
        self._open_for = 0  # points since the open alert fired
        self._span: tuple[int, int] | None = None  # anchored: steps of its first and last points
        self._prev_step: int | None = None
        self._stride = 1  # steps between the last two points (a log every k steps)

    def _points(self, steps: int, least: int) -> int:
        """A count of steps (warm-up, baseline, gap) in logged points at this run's
        logging stride, never fewer than `least` (the same count when every step logs)."""
        return max(least, math.ceil(steps / self._stride)) if steps else 0

    def _read(self, x: float) -> float:
        r = self.rule
        return math.log(max(x, r.floor)) if r.scale == "log" else x

    def _unread(self, v: float) -> float:
        return math.exp(v) if self.rule.scale == "log" else v

    def score(self) -> tuple[float, float, float, int] | None:
        """(z, change, baseline median, points) of the recent level, or None while the
        baseline is too short. change: a factor (log scale) or a difference (linear),
        positive in the rule's direction."""
        r = self.rule
        base = list(self._history)[: max(0, len(self._history) - self._points(r.gap, 1))]
        if len(base) < self._points(r.min_baseline, MIN_BASELINE_POINTS):
            return None
        sign = 1.0 if r.direction == "up" else -1.0
        recent = median(list(self._recent))
        if r.anchored:  # the early level's noise from its step-to-step changes: one learned
            # while the metric was already climbing would take the climb for its noise
            med = median(base)
            z = (recent - med) / max(step_noise(base), r.sigma_floor)
        else:
            z, med, _ = robust_z(recent, base, r.sigma_floor)
        moved = sign * (recent - med)
        change = math.exp(moved) if r.scale == "log" else moved
        return sign * z, change, med, len(base)

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r = self.rule
        x = reading(scalars, r.metric)
        if x is None or (carries_no_scale(r, x) and not self._gate.open):
            return []
        self._n += 1
        if self._prev_step is not None:
            self._stride = max(1, min(step - self._prev_step, MAX_STRIDE))
        self._prev_step = step
        v = self._read(x)
        self._recent.append(v)
        s = self.score()
        holds = s is not None and s[0] >= r.z and s[1] >= r.min_change
        out: list[AlertDraft | Cleared] = []
        if self._gate.open:
            self._open_for += 1
            if self._open_for >= r.rebase_after:  # a new level that held: the new normal
                self._gate.calm_now(step)
                self._history.clear()
                self._n = r.warmup
                return [Cleared(self.name, r.metric)]
        if holds:
            assert s is not None
            if self._gate.fire(step, "warning"):
                self._open_for = 0
                out.append(self._draft(step, x, *s))
            return out  # a holding value never enters the baseline
        if self._gate.open:
            if s is not None and s[0] < r.z_clear:
                if self._gate.calm(step):
                    out.append(Cleared(self.name, r.metric))
            else:
                self._gate.not_calm()
            return out  # nor does a value seen while the alert is open
        self._gate.quiet()
        anchor_full = r.anchored and len(self._history) >= r.window
        if (
            self._n > self._points(r.warmup, 1)
            and (s is None or s[0] < r.admit_z)
            and not anchor_full
        ):
            if r.anchored:  # where the early level was learned, for the message
                self._span = (self._span[0] if self._history and self._span else step, step)
            self._history.append(v)  # only unremarkable values teach the baseline
        return out

    def _draft(
        self, step: int, x: float, z: float, change: float, med: float, n: int
    ) -> AlertDraft:
        r = self.rule
        base = self._unread(med)
        recent = self._unread(median(list(self._recent)))
        verb = "rose" if r.direction == "up" else "fell"
        floored = r.scale == "log" and recent <= r.floor * (1 + 1e-9)
        if floored:  # a fold against the floor is the floor's, not the metric's
            size = f"at or below the rule's floor {fmt(r.floor)}, from"
        elif r.scale == "log":
            size = f"{fmt(change)}× {'above' if r.direction == 'up' else 'below'}"
        else:
            size = f"{fmt(change)} {'above' if r.direction == 'up' else 'below'}"
        if len(self._recent) == 1:
            now = fmt(x if floored else recent)
        else:
            now = f"{fmt(recent)} (median of the last {len(self._recent)}; now {fmt(x)})"
        held = f" for {r.persist} steps" if r.persist > 1 else ""
        if r.anchored:
            first, last = self._span or (step, step)
            where = f"its level over steps {first}-{last} ({fmt(base)}, median of {n} points)"
        else:
            where = f"its baseline {fmt(base)} (median of {n} steps before step {step - r.gap})"
        return AlertDraft(
            detector=self.name,
            severity="warning",
            metric=r.metric,
            value=x,
            baseline=base,
            window=n,
            factor=r.factor,
            message=(
                f"{r.metric} {verb} to {now}, {size} {where}; robust z {z:.1f} ≥ {fmt(r.z)}{held}"
            ),
            remedy=r.remedy,
        )
