"""Breakdown detector: the critical alert, raised on joint evidence, blaming what moved first.

One precursor is a warning: a single signal moves in healthy runs too. A breakdown is
several signals moving at once, or a precursor followed by the outcome falling. This
detector reads the other detectors' alert changes (not the raw stream), so it cannot
disagree with them: it keeps the precursor alerts that are open, and when they add up it
raises one critical alert naming the factor to blame — the factor the remediation policy
fixes — with the numbers of each signal: a setting that moved (a rising learning rate),
else the factor of the IS weight (ρ, r, routing) that moved first, else the first-order
residual, else the optimisation's symptoms (see `blame_rank`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from monitor.detectors.base import Gate, fmt
from monitor.detectors.remedies import R_COLLAPSE
from monitor.detectors.rules import BreakdownRule
from monitor.store.records import AlertDraft, Cleared


class BreakdownDetector:
    """`BreakdownRule` over the precursor alerts of the other detectors."""

    name = "breakdown"

    def __init__(self, rule: BreakdownRule) -> None:
        self.rule = rule
        self.open: dict[tuple[str, str], tuple[int, AlertDraft]] = {}
        """(detector, metric) -> (step opened, alert) of every open precursor."""
        self._gate = Gate()

    def update(
        self, step: int, changes: Sequence[AlertDraft | Cleared], outcome_drop: float
    ) -> list[AlertDraft | Cleared]:
        """This step's alert changes of the other detectors, and the largest share of
        gain the outcome metrics have lost (0 when not falling)."""
        r = self.rule
        for c in changes:
            key = (c.detector, c.metric)
            if isinstance(c, Cleared):
                self.open.pop(key, None)
            elif c.severity == "warning" and c.factor != "outcome" and key not in self.open:
                self.open[key] = (step, c)
        recent = sorted(
            ((opened, a) for opened, a in self.open.values() if step - opened < r.horizon),
            key=lambda pair: pair[0],
        )
        signals = {_quantity(a.metric) for _, a in recent}
        worse = r.extreme <= 0 or any(
            a.metric in r.causes or _fold(a) >= r.extreme for _, a in recent
        )
        joint = len(signals) >= r.min_signals and worse
        falling = len(signals) >= 1 and outcome_drop >= r.outcome_drop
        if joint or falling:
            if self._gate.fire(step, "critical"):
                return [self._draft(recent, outcome_drop, joint)]
            return []
        if self._gate.open and not self.open and self._gate.calm(step):
            return [Cleared(self.name, "precursors")]
        return []

    def _draft(self, recent: list[tuple[int, AlertDraft]], drop: float, joint: bool) -> AlertDraft:
        causes = self.rule.causes
        first_step, first = min(
            recent, key=lambda pair: (blame_rank(pair[1].metric, pair[1].factor, causes), pair[0])
        )
        signals = "; ".join(
            f"{a.metric} {fmt(a.value)} vs baseline {fmt(a.baseline)} (step {s})" for s, a in recent
        )
        blame = "is the cause" if first.metric in causes else "moved first"
        why = f"{len(recent)} precursors open"
        if joint:  # the evidence that the run is getting worse, not merely changing
            why += f", {self._worse(recent)}"
        if drop >= self.rule.outcome_drop:
            why += f" and the outcome has lost {drop:.0%} of its gain"
        return AlertDraft(
            detector=self.name,
            severity="critical",
            metric="precursors",
            value=float(len(recent)),
            baseline=first.baseline,
            window=first.window,
            factor=first.factor,
            message=(
                f"breakdown under way: {why}; {first.factor} {blame} ({first.detector} "
                f"at step {first_step}). Signals: {signals}"
            ),
            remedy=R_COLLAPSE,
        )

    def _worse(self, recent: list[tuple[int, AlertDraft]]) -> str:
        """What made joint precursors a breakdown: the setting that moved among them, else
        the largest jump (a page on a run whose outcome holds must name it)."""
        setting = next((a for _, a in recent if a.metric in self.rule.causes), None)
        if setting is not None:
            return f"among them a setting ({setting.metric})"
        top = max((a for _, a in recent), key=_fold)
        if self.rule.extreme <= 0 or _fold(top) < self.rule.extreme:
            return "at once"
        return f"{top.metric} at {fmt(_fold(top))}× its baseline, a jump of orders of magnitude"


_SPECIFIC = ("train_inference", "staleness", "routing")


def blame_rank(metric: str, factor: str, causes: Sequence[str]) -> int:
    """Which open precursor to blame (lowest first): a setting that moved (the lr), then a
    factor of the IS weight (ρ, r, routing), then the first-order residual (a function of
    the whole weight w = ρ·r, so it cannot say which factor broke), then the
    optimisation's symptoms (gradient norm, entropy, lengths); the earliest within."""
    if metric in causes:
        return 0
    if factor in _SPECIFIC:
        return 1
    return 2 if factor == "approximation" else 3


def _quantity(metric: str) -> str:
    """One signal per quantity: k1 and k3 estimates of the same KL are one piece of
    evidence, not two."""
    for suffix in ("_k1", "_k2", "_k3"):
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


def _fold(a: AlertDraft) -> float:
    """How many times its baseline a precursor's value is, either way (1 when unknown)."""
    v, b = abs(a.value), abs(a.baseline)
    if not (v > 0 and b > 0) or v != v or b != b:
        return 1.0
    return max(v / b, b / v)


def outcome_drop(drops: Mapping[str, float], outcome: Sequence[str]) -> float:
    """The largest lost share of gain among the outcome metrics."""
    return max((drops.get(m, 0.0) for m in outcome), default=0.0)
