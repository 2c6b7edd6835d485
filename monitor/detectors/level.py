"""Level detector: an absolute level held for a few steps (info unless the rule says).

Levels inform; they do not say that anything is breaking. A mismatch KL of 0.03 that has
been there since step 1 is a property of the run's engines, shown on the dashboard and in
`minirl analyze`, never paged and never acted on (remediation ignores info). The few
levels with a meaning of their own (the share of tokens past the IS cap) warn.
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.detectors.base import Gate, fmt, reading
from monitor.detectors.rules import LevelRule
from monitor.store.records import AlertDraft, Cleared


class LevelDetector:
    """One `LevelRule` on one metric."""

    def __init__(self, name: str, rule: LevelRule) -> None:
        self.name, self.rule = name, rule
        self._gate = Gate(rule.persist, rule.clear_after)

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r = self.rule
        x = reading(scalars, r.metric)
        if x is None:
            return []
        high = r.direction == "high"
        if x >= r.level if high else x <= r.level:
            return [self._draft(x)] if self._gate.fire(step, r.severity) else []
        if not self._gate.open:
            self._gate.quiet()
            return []
        back = x < r.level * r.clear_frac if high else x > r.level / r.clear_frac
        if not back:
            self._gate.not_calm()
        elif self._gate.calm(step):
            return [Cleared(self.name, r.metric)]
        return []

    def _draft(self, x: float) -> AlertDraft:
        r = self.rule
        word = "≥" if r.direction == "high" else "≤"
        return AlertDraft(
            detector=self.name,
            severity=r.severity,
            metric=r.metric,
            value=x,
            baseline=float("nan"),
            window=0,
            factor=r.factor,
            message=f"{r.metric} = {fmt(x)} {word} {fmt(r.level)} for {r.persist} steps",
            remedy=r.remedy,
        )
