"""Level detector: absolute levels plus robust change against the run's own baseline.

Most detectors of DESIGN.md are this one with a different `LevelRule` (mismatch KL,
ratio tails, χ², ESS, staleness, routing, residual, entropy, grad norm, lengths).
Non-finite values are skipped here (the non-finite detector reports them) and never
enter the baseline.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from monitor.config import LevelRule
from monitor.detectors.base import Gate, fmt, robust_z
from monitor.records import AlertDraft, Cleared, Severity, severity_rank


class LevelDetector:
    """One `LevelRule` on one metric; see config.LevelRule for the exact tests."""

    def __init__(self, name: str, rule: LevelRule) -> None:
        self.name, self.rule = name, rule
        self._base: deque[float] = deque(maxlen=rule.window)  # log values of healthy steps
        self._gate = Gate(rule.persist, rule.clear_after, rule.cooldown)

    def _level_severity(self, x: float) -> Severity | None:
        r, high = self.rule, self.rule.direction == "high"
        if r.crit_level is not None and (x >= r.crit_level if high else x <= r.crit_level):
            return "critical"
        if r.warn_level is not None and (x >= r.warn_level if high else x <= r.warn_level):
            return r.severity
        return None

    def _beyond_clear_level(self, x: float) -> bool:
        r = self.rule
        level = r.warn_level if r.warn_level is not None else r.crit_level
        if level is None:
            return False
        if r.direction == "high":
            return x >= level * r.level_clear_frac
        return x <= level / r.level_clear_frac

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r = self.rule
        x = scalars.get(r.metric)
        if x is None or not math.isfinite(x):
            return []
        lx = math.log(max(x, r.floor))
        sign = 1.0 if r.direction == "high" else -1.0
        z = fold = None
        base = float("nan")
        if r.z_warn is not None and len(self._base) >= max(r.warmup, 1):
            z_raw, med, _ = robust_z(lx, self._base, r.sigma_floor)
            z, fold, base = sign * z_raw, math.exp(sign * (lx - med)), math.exp(med)
        change: Severity | None = None
        if z is not None and fold >= r.min_fold:
            if r.z_crit is not None and z >= r.z_crit:
                change = "critical"
            elif z >= r.z_warn:
                change = r.severity
        level = self._level_severity(x)
        severity = max((s for s in (level, change) if s), key=severity_rank, default=None)

        out: list[AlertDraft | Cleared] = []
        if severity is not None:
            if self._gate.fire(step, severity):
                out.append(self._draft(x, base, z, fold, severity, by_level=(severity == level)))
            return out
        if not self._gate.open:
            self._gate.quiet()
            self._base.append(lx)
            return out
        calm = not self._beyond_clear_level(x) and (z is None or z < r.z_clear)
        if not calm:
            self._gate.not_calm()
        elif self._gate.calm(step):
            self._base.append(lx)
            out.append(Cleared(self.name, r.metric))
        return out

    def _draft(
        self,
        x: float,
        base: float,
        z: float | None,
        fold: float | None,
        sev: Severity,
        by_level: bool,
    ) -> AlertDraft:
        r = self.rule
        word = "above" if r.direction == "high" else "below"
        if by_level:
            level = r.crit_level if sev == "critical" else r.warn_level
            what = f"{r.metric} = {fmt(x)}, {word} the {sev} level {fmt(level or float('nan'))}"
        else:
            what = f"{r.metric} = {fmt(x)}"
        if z is not None and fold is not None:
            ratio = fold if r.direction == "high" else 1.0 / fold
            what += f" ({fmt(ratio)}× its baseline {fmt(base)}, robust z {z:.1f} on log scale"
            what += f" over {len(self._base)} steps)"
        return AlertDraft(
            detector=self.name,
            severity=sev,
            metric=r.metric,
            value=x,
            baseline=base,
            window=len(self._base) if z is not None else 0,
            factor=r.factor,
            message=what,
            remedy=r.remedy,
        )
