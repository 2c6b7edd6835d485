"""Non-finite detector: NaN or ±inf in any scalar, the last stage of a collapse.

One open alert per metric, from its first non-finite value until it is finite again.
The factor is read from the metric's namespace (mismatch/ → train_inference, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from monitor.detectors.rules import NonFiniteRule
from monitor.store.records import AlertDraft, Cleared, Factor

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
        self._open: set[str] = set()

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        out: list[AlertDraft | Cleared] = []
        for metric, x in scalars.items():
            if math.isfinite(x):
                if metric in self._open:
                    self._open.discard(metric)
                    out.append(Cleared(self.name, metric))
                continue
            if metric in self._open:
                continue
            self._open.add(metric)
            critical = metric.startswith(self.rule.critical_prefixes)
            out.append(
                AlertDraft(
                    detector=self.name,
                    severity="critical" if critical else "warning",
                    metric=metric,
                    value=x,
                    baseline=float("nan"),
                    window=0,
                    factor=factor_of(metric),
                    message=f"{metric} is {x} at step {step}",
                    remedy=_REMEDY,
                )
            )
        return out
