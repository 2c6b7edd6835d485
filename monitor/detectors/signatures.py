"""Signatures of bugs users have reported: a pattern in the logged numbers that one known
bug leaves, named after it, as its own alert family.

Not precursors (the breakdown rule does not count them): a logged number that cannot be
right, and the reported bug that makes it so.
- `kept_mass` (TRL issue 6789): for a correct token IS ratio ρ = π/μ on tokens sampled
  from μ, E_μ[ρ] = Σ π over μ's support = 1. When the rollout engine renormalises its
  log-probs over a top-p/top-k truncated support and the trainer does not, every ratio
  is scaled by the kept mass S, so the ratio's mean sits steadily at S < 1.
- `r3_routing_leak` (verl PR 5037): under rollout routing replay (R3) the training pass
  routes through the experts the rollout chose, so the routing mismatch is exactly 0; a
  non-zero one means the replay lands on the wrong routers (a shifted layer index).
- `twin_is_metrics` (slime issue 1907): ρ and r differ; logged identical, step after
  step, one of them is the other's number.
- `prob_precision` (verl's documentation): a mean |π_old − μ_old| of the sampled tokens'
  probabilities above 0.01 is a precision problem of the engines, not noise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from monitor.detectors.base import Gate, fmt, median, reading
from monitor.detectors.remedies import R_IS, R_ROUTING
from monitor.store.records import AlertDraft, Cleared, Factor

ROUTING_REPLAY = "routing/replay"
"""The routing replay mode a trainer logs as a number: 0 none, 2 R2, 3 R3."""


@dataclass(frozen=True)
class KeptMassRule:
    """The IS-ratio mean held at S < 1 (TRL issue 6789): the median of the last `window`
    values at most 1 − `margin`, every one of them within `spread` of it (the bias is a
    constant factor, not noise). When `setting` (the sampling's top-p) is logged below 1,
    the message says whether the mean matches it."""

    metric: str = "mismatch/ratio_mean"
    """The canonical metric the signature is read on."""
    setting: str = "sampling/top_p"
    window: int = 10
    margin: float = 0.02
    spread: float = 0.01
    enabled: bool = True
    """false: the rule never fires."""


@dataclass(frozen=True)
class ReplayLeakRule:
    """A routing mismatch above `tol` for `persist` steps while `mode` logs R3 (verl PR
    5037)."""

    metric: str = "routing/mismatch_train_infer"
    """The canonical metric the signature is read on."""
    mode: str = ROUTING_REPLAY
    r3: float = 3.0
    """The value of `mode` that means R3 (the trainer logs 0, 2 or 3)."""
    tol: float = 0.0
    persist: int = 3
    enabled: bool = True
    """false: the rule never fires."""


@dataclass(frozen=True)
class TwinRule:
    """Two metrics that must differ logged equal (to `rel_tol`) for `persist` consecutive
    steps while they vary (slime issue 1907). Each pair is (training-inference, staleness)."""

    pairs: tuple[tuple[str, str], ...] = (
        ("mismatch/ratio_mean", "staleness/ratio_mean"),
        ("mismatch/kl_k1", "staleness/kl_k1"),
        ("train/tis", "train/ois"),
    )
    """(training-inference, staleness) metric pairs that must differ."""
    persist: int = 10
    rel_tol: float = 1e-9
    min_spread: float = 1e-5
    """Relative range the pair must span over those steps: two ratios equal to 1 up to
    float rounding (an exact on-policy run with bit-equal engines) are not a bug."""
    enabled: bool = True
    """false: the rule never fires."""


@dataclass(frozen=True)
class PrecisionRule:
    """Mean |π_old − μ_old| above `level` for `persist` steps (verl's documentation:
    `training/rollout_probs_diff_mean` above 0.01 is a precision problem)."""

    metric: str = "mismatch/prob_abs_diff"
    """The canonical metric the signature is read on."""
    level: float = 0.01
    persist: int = 5
    enabled: bool = True
    """false: the rule never fires."""


def _alert(
    name: str, metric: str, value: float, base: float, factor: Factor, msg: str, remedy: str
) -> AlertDraft:
    return AlertDraft(name, "warning", metric, value, base, 0, factor, msg, remedy)


class _OneMetric:
    """A signature read on the rule's one metric behind one `Gate`: a warning once it has
    held for the gate's persistence, cleared once it has not held for its calm period."""

    def __init__(self, name: str, metric: str, gate: Gate) -> None:
        self.name, self.metric, self._gate = name, metric, gate

    def _gated(
        self, step: int, holds: bool, draft: Callable[[], AlertDraft]
    ) -> list[AlertDraft | Cleared]:
        """This step's output; `draft` builds the alert, only when one is emitted."""
        if holds:
            return [draft()] if self._gate.fire(step, "warning") else []
        if not self._gate.open:
            self._gate.quiet()
        elif self._gate.calm(step):
            return [Cleared(self.name, self.metric)]
        return []


class KeptMassDetector(_OneMetric):
    def __init__(self, name: str, rule: KeptMassRule) -> None:
        super().__init__(name, rule.metric, Gate(clear_after=rule.window))
        self.rule = rule
        self._recent: deque[float] = deque(maxlen=rule.window)
        self._setting: float | None = None

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r = self.rule
        s = reading(scalars, r.setting)
        if s is not None:
            self._setting = s
        x = reading(scalars, r.metric)
        if x is None:
            return []
        self._recent.append(x)
        if len(self._recent) < r.window:
            return []
        med = median(list(self._recent))
        steady = all(abs(v - med) <= r.spread for v in self._recent)
        return self._gated(step, steady and med <= 1.0 - r.margin, lambda: self._draft(x, med))

    def _draft(self, x: float, med: float) -> AlertDraft:
        r, top_p, match = self.rule, self._setting, ""
        if top_p is not None and top_p < 1.0:
            near = abs(med - top_p) <= r.margin
            match = f"; top-p is {fmt(top_p)}: {'the mean is' if near else 'not'} its mass"
        msg = (
            f"the IS-ratio mean has held at {fmt(med)} (±{fmt(r.spread)}) for {r.window} steps,"
            f" where a correct ratio averages 1: the probability mass a top-p/top-k"
            f" truncation keeps (TRL issue 6789: the rollout's log-probs renormalised over"
            f" the truncated support, the trainer's over the full vocabulary){match}"
        )
        fix = (
            "recompute the trainer's log-probs on the rollout's truncated support "
            "(or sample without top-p/top-k), then compare the ratio mean with 1"
        )
        return _alert(self.name, r.metric, x, 1.0, "train_inference", msg, fix)


class ReplayLeakDetector(_OneMetric):
    def __init__(self, name: str, rule: ReplayLeakRule) -> None:
        super().__init__(name, rule.metric, Gate(persist=rule.persist, clear_after=rule.persist))
        self.rule = rule

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r = self.rule
        mode, x = reading(scalars, r.mode), reading(scalars, r.metric)
        if mode is None or x is None:
            return []
        return self._gated(step, mode == r.r3 and x > r.tol, lambda: self._draft(x))

    def _draft(self, x: float) -> AlertDraft:
        r = self.rule
        msg = (
            f"{r.metric} = {fmt(x)} under R3 for {r.persist} steps, where replaying the"
            f" rollout's experts makes it exactly 0: the replay lands on the wrong routers"
            f" (verl PR 5037: a layer index shifted by the dense layers before the MoE ones)"
        )
        fix = (
            "check the replay's layer mapping (global layer number, not list position) "
            "against the rollout's routed-experts tensor; " + R_ROUTING
        )
        return _alert(self.name, r.metric, x, 0.0, "routing", msg, fix)


class TwinDetector:
    def __init__(self, name: str, rule: TwinRule) -> None:
        self.name, self.rule = name, rule
        self._runs = {pair: deque(maxlen=rule.persist) for pair in rule.pairs}
        self._gates = {pair: Gate() for pair in rule.pairs}

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        r, out = self.rule, []
        for pair, run in self._runs.items():
            a, b = reading(scalars, pair[0]), reading(scalars, pair[1])
            if a is None or b is None:
                continue
            gate = self._gates[pair]
            if abs(a - b) <= r.rel_tol * max(abs(a), abs(b), 1e-300):
                run.append(a)
            else:
                run.clear()
                if gate.open and gate.calm(step):
                    out.append(Cleared(self.name, pair[1]))
                continue
            varies = len(run) == r.persist and max(run) - min(run) > r.min_spread * abs(run[-1])
            if varies and gate.fire(step, "warning"):
                out.append(
                    _alert(
                        self.name,
                        pair[1],
                        b,
                        a,
                        "train_inference",
                        f"{pair[0]} and {pair[1]} have been logged identical for {r.persist} steps"
                        f" (now {fmt(a)}), as they vary: the training-inference ratio and the"
                        f" staleness ratio are different quantities, so one is the other's number"
                        f" (slime issue 1907)",
                        "check which log-probs each ratio is computed from (rollout, θ_old, θ); "
                        + R_IS,
                    )
                )
        return out


class PrecisionDetector(_OneMetric):
    def __init__(self, name: str, rule: PrecisionRule) -> None:
        super().__init__(name, rule.metric, Gate(persist=rule.persist, clear_after=rule.persist))
        self.rule = rule

    def update(self, step: int, scalars: Mapping[str, float]) -> list[AlertDraft | Cleared]:
        x = reading(scalars, self.rule.metric)
        if x is None:
            return []
        return self._gated(step, x > self.rule.level, lambda: self._draft(x))

    def _draft(self, x: float) -> AlertDraft:
        r = self.rule
        msg = (
            f"{r.metric} = {fmt(x)} > {fmt(r.level)} for {r.persist} steps: the training"
            f" and rollout engines' probabilities differ by more than the 0.01 verl's"
            f" documentation calls a precision problem"
        )
        fix = (
            "align the engines' numerics (dtype of the lm_head and logits, kernels, "
            "weight sync) before correcting with IS; " + R_IS
        )
        return _alert(self.name, r.metric, x, r.level, "train_inference", msg, fix)


SIGNATURES: dict[type, type] = {
    KeptMassRule: KeptMassDetector,
    ReplayLeakRule: ReplayLeakDetector,
    TwinRule: TwinDetector,
    PrecisionRule: PrecisionDetector,
}
"""Rule type -> detector: the signature family (the breakdown rule ignores it)."""
