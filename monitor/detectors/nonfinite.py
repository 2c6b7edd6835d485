"""Non-finite detector: NaN or ±inf in any scalar, the last stage of a collapse.

One open alert per metric, from its first non-finite value until it is finite again.
The factor is read from the metric's namespace (mismatch/ → train_inference, ...). A
`skippable` metric (the gradient norm) is a warning at its first non-finite value and
critical at its second in a row (`NonFiniteRule.skippable`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from monitor.detectors.rules import NonFiniteRule
from monitor.store.records import AlertDraft, Cleared, Factor, Severity

_FACTOR_BY_PREFIX: dict[str, Factor] = {
    "mismatch/": "train_inference",
    "is/": "train_inference",
    "staleness/": "staleness",
    "routing/": "routing",
    "approx/": "approximation",
    "reward/": "outcome",
    "eval/": "outcome",
    "response/": "outcome",
}
_REMEDY = (
    "roll back to the last healthy checkpoint and lower the learning rate (×0.5); check "
    "the IS weights (cap them) and the loss for divisions by zero or overflow"
)


def factor_of(metric: str) -> Factor:
    """The IS-weight factor a metric belongs to, by its canonical namespace."""
    for prefix, factor in _FACTOR_BY_PREFIX.items():
        if metric.startswith(prefix):
            return factor
    return "optimisation"


class NonFiniteDetector:
    """Fires once per metric that turns NaN/inf; clears when it is finite again."""

    def __init__(self, name: str, rule: NonFiniteRule) -> None:
        self.name, self.rule = name, rule
        self._open: dict[str, int] = {}  # metric -> the step it turned non-finite
        self._escalated: set[str] = set()  # skippable metrics critical since their second

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        out: list[AlertDraft | Cleared] = []
        for metric, x in scalars.items():
            if math.isfinite(x):
                if metric in self._open:
                    del self._open[metric]
                    self._escalated.discard(metric)
                    out.append(Cleared(self.name, metric))
                continue
            critical = metric.startswith(self.rule.critical_prefixes)
            deferred = critical and metric in self.rule.skippable  # critical at its second
            if metric in self._open:
                if deferred and metric not in self._escalated:
                    self._escalated.add(metric)
                    since = f", non-finite since step {self._open[metric]}: a divergence"
                    out.append(self._draft(step, metric, x, "critical", since))
                continue
            self._open[metric] = step
            if deferred:
                why = (
                    ": a step the optimizer skipped (mixed-precision overflow) if the next "
                    "is finite, a divergence if it is not"
                )
                out.append(self._draft(step, metric, x, "warning", why))
            else:
                out.append(self._draft(step, metric, x, "critical" if critical else "warning", ""))
        return out

    def _draft(self, step: int, metric: str, x: float, severity: Severity, why: str) -> AlertDraft:
        return AlertDraft(
            detector=self.name,
            severity=severity,
            metric=metric,
            value=x,
            baseline=float("nan"),
            window=0,
            factor=factor_of(metric),
            message=f"{metric} is {x} at step {step}{why}",
            remedy=_REMEDY,
        )
