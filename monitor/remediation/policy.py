"""The automatic remediation policy: act on breakdowns, not on levels.

Two tiers, from the paper's recipes (arXiv 2512.01374):

- A precursor (warning) moves the run back to a recommended setting it is not in, and
  nothing else: the rollout precision back to its format before it dropped (held: a
  cause is fixed at the cause, not by changing the loss), clipping on when it is off,
  routing replay when an off-policy MoE run has none, length normalisation off. A run
  already in the recommended setting is left alone on a warning; an info alert (a level,
  e.g. a mismatch constant since step 1) is never acted on.
- IS correction switched off is treated like a learning rate or a mini-batch count the
  user raised: not undone without evidence that it hurts. A precursor only records the
  advice (a `remediation_skipped` event that names it); a breakdown turns it on (TIS,
  cap 5). On the lab's tuning seeds, turning it back on at a precursor prevented no
  collapse (none of the 9 runs it touched collapsed without it) and left the served model
  lower in 6 of them: with FP4 rollouts the uncorrected gradient learned faster (IS off
  from step 40 ended above IS on throughout in 31 of 35 seeds, by 8 points on average),
  so the correction's cost came before any need for its protection. Clipping off
  differs: a stale run without it collapsed on every one of those seeds.
- A breakdown (critical: joint precursors, the outcome falling, non-finite values) rolls
  back to the last healthy checkpoint before the episode and applies the fix for the
  factor the alert blames (the one that moved first, or a setting that moved):

| blamed factor | fix |
|---|---|
| train_inference | the rollout precision dropped: rollouts no coarser than before, held; |
| | else IS on; if on, tighten the TIS cap (×0.5, down to 2), then IcePop [0.5, 5] |
| staleness | clipping on if off, and cap the mini-batches per rollout (held): at their |
| | number before they rose, when they rose; else at half |
| routing | off-policy: R2 at ≤ 2 mini-batches, else R3 (R2 → R3); then, by the metric: |
| | drift across mini-batches → the staleness fix; training vs inference → the IS fix |
| approximation | length norm off, else IS on, else clipping on, else fewer mini-batches |
| optimisation | cap the learning rate at half its pre-episode value for the rest of the run |

Beside the blamed factor's fix, every breakdown applies the paper's recipe for the run as
configured (`recipe`), whether a setting was changed part-way or set so from the start:
clipping on for off-policy updates (more than one mini-batch per rollout; a precursor of
any factor turns it on too), IS correction on for low-precision (quantised) rollouts, R3
for an MoE at `r3_mini_batches` or more, and, for an outcome collapse with no precursor
to blame, fewer mini-batches beside the lr cap. The factor that moved first is often a
symptom in a collapse nobody scripted; the recipe does not wait for the right blame.

An outcome alert (reward or held-out accuracy falling) is fixed for the precursor that
opened first, a setting that moved (the lr, the mini-batches per rollout, the rollout
precision, clipping) before any symptom. A cause that persists is held off: the lr cap, the
mini-batch cap and the rollout precision floor last for the rest of the run, so a
schedule or a scripted change that moves the knob again after the fix cannot undo it.

A fix that did not hold — another breakdown after it — escalates: the next critical
finds the run in the changed setting and takes the next step of the same recipe (a
tighter cap, IcePop, fewer mini-batches, a lower cap). Staleness escalates earlier: a
staleness precursor after the policy's own clipping or mini-batch fix means the fix did
not hold, and takes the next step (fewer mini-batches) without waiting for a breakdown
(after `cooldown_steps`, like any second action of a kind). The policy is a pure
function of its inputs (alerts, controls, the action history), so a resumed run keeps
its limits: at most `max_attempts` automatic actions per kind (`max_rollbacks`
rollbacks), `cooldown_steps` between two of a kind, never a duplicate of a pending
action. It does not apply anything (the trainer does) nor store anything (Monitor does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from monitor.config import RemediationConfig
from monitor.detectors.config import MINI_BATCHES, ROLLOUT_BITS, SETTINGS
from monitor.remediation.actions import QUANT_BITS, WEIGHT_QUANTS, apply_to_controls
from monitor.store.records import Action, ActionDraft, Alert, severity_rank

PRECURSOR_FACTORS = ("train_inference", "staleness", "routing", "approximation", "optimisation")


class RemediationPolicy:
    """Maps alerts to `ActionDraft`s within per-run limits."""

    def __init__(self, config: RemediationConfig) -> None:
        self.cfg = config
        self.skipped: list[dict[str, Any]] = []
        """What the last `decide` held back, and why (Monitor records it as an event)."""

    # ------------------------------------------------------------------ the recipes
    def settle(
        self, alert: Alert, controls: Mapping[str, Any], breakdown: bool = True
    ) -> list[ActionDraft]:
        """Back to a recommended setting the run is not in, or none. IS correction is only
        turned back on at a `breakdown`; before one its advice is recorded in `skipped`."""
        c, why = self.cfg, _heading(alert)
        mini = int(controls.get("mini_batches", 1))
        if alert.metric == ROLLOUT_BITS:
            return self._finer_rollouts(alert, controls, why)
        if controls.get("length_norm", False):
            return [
                _d(
                    "set_length_norm",
                    {"enabled": False},
                    f"{why} → length normalisation is on and breaks the first-order "
                    "approximation: turn it off",
                    alert,
                )
            ]
        if alert.factor in ("train_inference", "approximation") and _is_off(controls):
            on = _d(
                "set_is_correction",
                {"enabled": True, "cap": c.tis_cap},
                f"{why} → IS correction is off: turn on token TIS (cap {c.tis_cap:g})",
                alert,
            )
            if breakdown:
                return [on]
            if all(s["kind"] != on.kind for s in self.skipped):  # one advice per step
                self.skipped.append(
                    {
                        "kind": on.kind,
                        "params": on.params,
                        "alert_id": on.alert_id,
                        "why": "IS correction is off: recommended on; applied automatically "
                        "only at a breakdown",
                    }
                )
            if mini <= 1 or controls.get("clip", True):
                return []
        # off-policy updates need clipping whatever the precursor; at a breakdown that is
        # `recipe`'s, beside the factor's own fix
        off_policy = (mini > 1 and not breakdown) or alert.factor in ("staleness", "approximation")
        if off_policy and not controls.get("clip", True):
            return [self._clip_on(alert, mini, why)]
        if alert.factor == "routing" and mini > 1 and controls.get("routing_replay") == "none":
            mode = "R2" if mini <= 2 else "R3"
            return [
                _d(
                    "set_routing_replay",
                    {"mode": mode},
                    f"{why} → {mini} mini-batches per rollout without routing replay: {mode}",
                    alert,
                )
            ]
        return []

    def _clip_on(self, alert: Alert, mini: int, why: str) -> ActionDraft:
        c = self.cfg
        what = (
            f"{mini} mini-batches per rollout without clipping" if mini > 1 else "clipping is off"
        )
        return _d(
            "set_clip",
            {"enabled": True, "eps_low": c.eps_low, "eps_high": c.eps_high},
            f"{why} → {what}: turn it on (ε {c.eps_low:g}/{c.eps_high:g})",
            alert,
        )

    @staticmethod
    def _finer_rollouts(alert: Alert, controls: Mapping[str, Any], why: str) -> list[ActionDraft]:
        """The rollout precision dropped: round the rollout weights no coarser than before
        (the finest format with the pre-episode bits), held for the rest of the run; none
        when a floor that fine holds already."""
        bits = round(alert.baseline)  # a log-scale median of exact values: 15.999...
        quant = next((q for q in WEIGHT_QUANTS if QUANT_BITS[q] <= bits), WEIGHT_QUANTS[-1])
        floor = controls.get("rollout_quant_floor")
        if floor is not None and QUANT_BITS[floor] >= QUANT_BITS[quant]:
            return []
        return [
            _d(
                "set_rollout_quant_floor",
                {"weight_quant": quant},
                f"{why} → the rollout engine's weights went from {bits:g} to "
                f"{alert.value:g} bits: back to {quant} ({QUANT_BITS[quant]} bits), held for "
                "the rest of the run",
                alert,
            )
        ]

    def fix(
        self, alert: Alert, controls: Mapping[str, Any], context: Sequence[Alert] = ()
    ) -> list[ActionDraft]:
        """The repair for a breakdown blamed on `alert.factor`, given the current controls
        (`context`: the other open alerts, e.g. a rising lr's baseline). A run out of the
        recommended setting is put back first; a staleness breakdown also takes the
        recipe's next step (fewer mini-batches): clipping alone does not undo 8×."""
        why = _heading(alert)
        drafts = self.settle(alert, controls)
        if not drafts or alert.factor == "staleness":
            after = controls
            for d in drafts:
                after = apply_to_controls(after, d.kind, d.params)
            drafts = drafts + self._next_step(alert, after, context, why)
        return drafts + self.recipe(alert, controls, drafts, why)

    def recipe(
        self,
        alert: Alert,
        controls: Mapping[str, Any],
        already: Sequence[ActionDraft] = (),
        why: str = "",
    ) -> list[ActionDraft]:
        """The paper's recipe for the run as configured, at any breakdown whatever factor
        is blamed (the first metric to move is often a symptom), whether the setting was
        changed part-way or set so from the start: clipping on for off-policy updates, IS
        correction on for low-precision rollouts, R3 for an MoE at a high off-policy
        degree, fewer mini-batches and a lower lr when the outcome fell with no precursor
        to blame. `already`: the factor's own fix (a kind it has is not repeated)."""
        c, kinds = self.cfg, {d.kind for d in already}
        why = why or _heading(alert)
        mini = int(controls.get("mini_batches", 1))
        out: list[ActionDraft] = []
        if mini > 1 and not controls.get("clip", True) and "set_clip" not in kinds:
            out.append(self._clip_on(alert, mini, why))
        quant = controls.get("rollout_quant", "none")
        low = QUANT_BITS.get(quant, 16) < 16
        if low and _is_off(controls) and "set_is_correction" not in kinds:
            out.append(
                _d(
                    "set_is_correction",
                    {"enabled": True, "cap": c.tis_cap},
                    f"{why} → {quant} rollouts without IS correction: turn on token TIS "
                    f"(cap {c.tis_cap:g})",
                    alert,
                )
            )
        high = controls.get("moe") and mini >= c.r3_mini_batches
        if high and controls.get("routing_replay") != "R3" and "set_routing_replay" not in kinds:
            out.append(
                _d(
                    "set_routing_replay",
                    {"mode": "R3"},
                    f"{why} → an MoE at {mini} mini-batches per rollout: replay the "
                    "rollout's routes (R3)",
                    alert,
                )
            )
        if alert.factor == "optimisation" and mini > 1 and "set_mini_batches_cap" not in kinds:
            out.append(self._fewer_mini_batches(alert, mini, (), why))
        return out

    def _next_step(
        self, alert: Alert, controls: Mapping[str, Any], context: Sequence[Alert], why: str
    ) -> list[ActionDraft]:
        c = self.cfg
        mini = int(controls.get("mini_batches", 1))
        policy = controls.get("is_policy", "none")
        if alert.factor == "train_inference" and policy in ("token_tis", "seq_tis"):
            cap = float(controls.get("is_cap", c.tis_cap)) * c.cap_factor
            if cap >= c.min_cap:
                return [
                    _d(
                        "set_is_policy",
                        {"policy": policy, "cap": cap},
                        f"{why} → tighten the IS cap to {cap:g}",
                        alert,
                    )
                ]
            band = list(c.icepop_band)
            return [
                _d(
                    "set_is_policy",
                    {"policy": "icepop", "band": band},
                    f"{why} → the cap is tight already: mask tokens outside {band} (IcePop)",
                    alert,
                )
            ]
        if alert.factor in ("staleness", "approximation") and mini > 1:
            return [self._fewer_mini_batches(alert, mini, context, why)]
        if alert.factor == "routing":
            if mini > 1 and controls.get("routing_replay") == "R2":
                return [
                    _d(
                        "set_routing_replay",
                        {"mode": "R3"},
                        f"{why} → R2 did not hold: replay the rollout's routes (R3)",
                        alert,
                    )
                ]
            if mini > 1 and _drifts_across_mini_batches(alert, context):
                # replay is in place and the routers still drift from π_old to π_θ: the
                # policy moves too far within a rollout, which is staleness's fix
                return self.fix(replace(alert, factor="staleness"), controls, context)
            return self.fix(replace(alert, factor="train_inference"), controls, context)
        if alert.factor == "optimisation":
            return [self._lower_lr(alert, controls, context, why)]
        return []

    def _fewer_mini_batches(
        self, alert: Alert, mini: int, context: Sequence[Alert], why: str
    ) -> ActionDraft:
        """Cap the mini-batches per rollout at their pre-episode number (the baseline of a
        rising-setting alert, when they rose) or else at half the current one; held."""
        rose = _pre_episode(alert, context, MINI_BATCHES)
        if rose is not None and 1 <= int(rose) < mini:
            n, how = int(rose), f"back to {int(rose)}, the number before they rose"
        else:
            n, how = mini // 2, "halved"
        return _d(
            "set_mini_batches_cap",
            {"n": n},
            f"{why} → fewer mini-batches per rollout, {mini} → {n} ({how}), held for "
            "the rest of the run",
            alert,
        )

    def _lower_lr(
        self, alert: Alert, controls: Mapping[str, Any], context: Sequence[Alert], why: str
    ) -> ActionDraft:
        """Cap the lr at lr_factor × its pre-episode value (the baseline of a rising-lr
        alert, this one or an open one, else the current lr; a cap already set is
        lowered from)."""
        c = self.cfg
        lr = _pre_episode(alert, context, "optim/lr")
        if lr is None:
            lr = controls.get("lr")
        if controls.get("lr_cap") is not None:
            lr = min(float(lr), float(controls["lr_cap"])) if lr is not None else None
        if lr is None:
            return _d(
                "scale_lr",
                {"factor": c.lr_factor},
                f"{why} → lower the learning rate ×{c.lr_factor:g}",
                alert,
            )
        cap = float(lr) * c.lr_factor
        return _d(
            "set_lr_cap",
            {"lr": cap},
            f"{why} → cap the learning rate at {cap:.3g} for the rest of the run "
            f"({c.lr_factor:g}× its pre-episode {float(lr):.3g})",
            alert,
        )

    # ------------------------------------------------------------------ decisions
    def decide(
        self,
        step: int,
        alerts: Sequence[Alert],
        controls: Mapping[str, Any],
        history: Sequence[Action],
        open_alerts: Sequence[Alert] = (),
    ) -> list[ActionDraft]:
        """Actions for this step's new `alerts`, within the limits set by `history`.
        `open_alerts` (still open, any step) tell which precursor came first when a
        breakdown alert blames an outcome."""
        c = self.cfg
        self.skipped = []
        floor = max(severity_rank(c.min_severity), severity_rank("warning"))
        eligible = [a for a in alerts if severity_rank(a.severity) >= floor]
        drafts: list[ActionDraft] = []
        crash = [
            a for a in eligible if a.severity == "critical" and a.detector in c.collapse_detectors
        ]
        if crash:
            a = crash[0]
            blamed = self._blame(a, open_alerts)
            drafts.append(
                _d(
                    "rollback",
                    {},
                    f"{_heading(a)} → breakdown: roll back to "
                    "the last healthy checkpoint before the episode",
                    a,
                )
            )
            drafts += self.fix(blamed, controls, [*open_alerts, *eligible])
        for a in eligible:
            if a.severity == "warning" and a.factor in PRECURSOR_FACTORS:
                settled = self.settle(a, controls, breakdown=False)
                if not settled and a.factor == "staleness" and _applied(history, STALENESS_FIXES):
                    # the fix did not hold: staleness rose again after clipping came back
                    # (or after fewer mini-batches), so take the recipe's next step
                    why = f"{_heading(a)} → the staleness fix did not hold"
                    settled = self._next_step(a, controls, open_alerts, why)
                drafts += settled
        if any(d.kind == "set_is_correction" for d in drafts):  # a breakdown applies it now
            self.skipped = [s for s in self.skipped if s["kind"] != "set_is_correction"]
        return self._within_limits(step, drafts, history)

    @staticmethod
    def _blame(alert: Alert, open_alerts: Sequence[Alert]) -> Alert:
        """The alert to fix: a breakdown names its factor; an outcome or non-finite alert
        is fixed for the precursor that opened first, else as an optimisation failure."""
        if alert.factor in PRECURSOR_FACTORS and alert.detector == "breakdown":
            return alert
        first = sorted(
            (o for o in open_alerts if o.factor in PRECURSOR_FACTORS and o.severity != "info"),
            key=lambda o: (o.metric not in SETTINGS, o.step, o.id),  # a setting that moved
        )
        return first[0] if first else replace(alert, factor="optimisation")

    # ------------------------------------------------------------------ limits
    def _within_limits(
        self, step: int, drafts: list[ActionDraft], history: Sequence[Action]
    ) -> list[ActionDraft]:
        c, out, kinds = self.cfg, [], set()
        for d in drafts:
            if d.kind in kinds:
                continue  # one action of a kind per step: the first diagnosis wins
            mine = [a for a in history if a.kind == d.kind and a.source == "policy"]
            limit = c.max_rollbacks if d.kind == "rollback" else c.max_attempts
            why = None
            if any(a.kind == d.kind and a.status == "pending" for a in history):
                why = "an action of this kind is already pending"
            elif len(mine) >= limit:
                why = f"limit of {limit} automatic {d.kind} actions per run reached"
            elif mine and mine[-1].step is not None and step - mine[-1].step < c.cooldown_steps:
                why = (
                    f"cooldown: last {d.kind} at step {mine[-1].step} (< {c.cooldown_steps} steps)"
                )
            if why:
                self.skipped.append(
                    {"kind": d.kind, "params": d.params, "alert_id": d.alert_id, "why": why}
                )
                continue
            kinds.add(d.kind)
            out.append(d)
        return out


def _drifts_across_mini_batches(alert: Alert, context: Sequence[Alert]) -> bool:
    """The routing alert blamed is (or, for a breakdown, the first open routing precursor
    is) the drift between mini-batches, not the training-inference routing mismatch."""
    routing = [a for a in (alert, *context) if a.factor == "routing" and a.severity != "critical"]
    first = min(routing, key=lambda a: (a.step, a.id), default=None)
    return first is not None and first.metric == "routing/mismatch_stale"


def _pre_episode(alert: Alert, context: Sequence[Alert], setting: str) -> float | None:
    """The value `setting` had before it rose: the baseline of its rising alert (this
    one or an open one), or None when it did not rise."""
    rising = next((a for a in (alert, *context) if a.metric == setting), None)
    if rising is None or rising.baseline != rising.baseline:  # absent or NaN
        return None
    return float(rising.baseline)


STALENESS_FIXES = ("set_clip", "set_mini_batches_cap")


def _applied(history: Sequence[Action], kinds: tuple[str, ...]) -> bool:
    """The policy has already applied one of `kinds` in this run."""
    return any(a.kind in kinds and a.source == "policy" and a.status == "applied" for a in history)


def _heading(alert: Alert) -> str:
    """How an action's reason names the alert it answers: detector, severity, message."""
    return f"{alert.detector} ({alert.severity}): {alert.message}"


def _is_off(controls: Mapping[str, Any]) -> bool:
    return controls.get("is_policy", "none") == "none" and controls.get("variant") != "reinforce"


def _d(kind: str, params: dict[str, Any], reason: str, alert: Alert) -> ActionDraft:
    return ActionDraft(kind=kind, params=params, reason=reason, alert_id=alert.id)
