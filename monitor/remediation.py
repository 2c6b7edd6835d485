"""The automatic remediation policy: from a diagnosis (alerts + current controls) to actions.

DESIGN.md's table, from the paper's recipes (arXiv 2512.01374):

| diagnosis | action |
|---|---|
| train-inference mismatch, IS off | set_is_correction on (token TIS, cap 5) |
| train-inference mismatch, TIS on | tighten the cap (×0.5, down to 2), then IcePop band |
| routing mismatch, off-policy | R2 at ≤ 2 mini-batches, else R3; R2 → R3 if it persists |
| routing mismatch, on-policy | nothing: R2 is a no-op and R3 brings no gain on-policy |
| staleness | clipping on (ε 0.2/0.27); if on, halve the mini-batches |
| approximation residual | length norm off, else IS on, else clipping on, else fewer mini-batches |
| any alert while length normalisation is on | set_length_norm off |
| collapse (critical outcome, entropy, | rollback, the fix for the breakdown alert that |
| grad-norm, length or non-finite alert) | opened first, scale_lr ×0.5 |

The policy is a pure function of its inputs (alerts, controls, the action history), so a
resumed run keeps its limits: at most `max_attempts` automatic actions per kind
(`max_rollbacks` rollbacks), `cooldown_steps` between two of a kind, never a duplicate of
a pending action. It does not apply anything (the trainer does) nor store anything
(Monitor does); `decide` returns the actions and, in `skipped`, what the limits held back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monitor.config import RemediationConfig
from monitor.records import Action, ActionDraft, Alert, severity_rank

BREAKDOWN_FACTORS = ("train_inference", "staleness", "routing", "approximation")


class RemediationPolicy:
    """Maps alerts to `ActionDraft`s within per-run limits."""

    def __init__(self, config: RemediationConfig) -> None:
        self.cfg = config
        self.skipped: list[dict[str, Any]] = []
        """What the last `decide` held back, and why (Monitor records it as an event)."""

    # ------------------------------------------------------------------ diagnosis
    def fix(self, alert: Alert, controls: Mapping[str, Any]) -> list[ActionDraft]:
        """The recipe for one breakdown alert, given the run's current controls."""
        c = self.cfg
        is_policy = controls.get("is_policy", "none")
        mini = int(controls.get("mini_batches", 1))
        why = f"{alert.detector} ({alert.severity}): {alert.message}"
        if alert.factor == "train_inference":
            if is_policy == "none":
                return [
                    _d(
                        "set_is_correction",
                        {"enabled": True, "cap": c.tis_cap},
                        f"{why} → IS correction is off: turn on token TIS (cap {c.tis_cap:g})",
                        alert,
                    )
                ]
            if is_policy in ("token_tis", "seq_tis"):
                cap = float(controls.get("is_cap", c.tis_cap)) * c.cap_factor
                if cap >= c.min_cap:
                    return [
                        _d(
                            "set_is_policy",
                            {"policy": is_policy, "cap": cap},
                            f"{why} → IS is on: tighten the cap to {cap:g}",
                            alert,
                        )
                    ]
                band = list(c.icepop_band)
                return [
                    _d(
                        "set_is_policy",
                        {"policy": "icepop", "band": band},
                        f"{why} → cap already tight: mask tokens outside {band} (IcePop)",
                        alert,
                    )
                ]
            return []  # masking already on: a human should look at the engines
        if alert.factor == "staleness":
            if not controls.get("clip", True):
                return [
                    _d(
                        "set_clip",
                        {"enabled": True, "eps_low": c.eps_low, "eps_high": c.eps_high},
                        f"{why} → clipping is off: turn it on (ε {c.eps_low:g}/{c.eps_high:g})",
                        alert,
                    )
                ]
            if mini > 1:
                return [
                    _d(
                        "set_mini_batches",
                        {"n": mini // 2},
                        f"{why} → clipping is on: halve the mini-batches {mini} → {mini // 2}",
                        alert,
                    )
                ]
            return []
        if alert.factor == "routing":
            mode = controls.get("routing_replay", "none")
            if mini <= 1 or mode == "R3":
                return []  # on-policy: R2 is a no-op and R3 brings no gain (paper)
            target = "R3" if mode == "R2" or mini > 2 else "R2"
            return [
                _d(
                    "set_routing_replay",
                    {"mode": target},
                    f"{why} → {mini} mini-batches per rollout: routing replay {target}",
                    alert,
                )
            ]
        if alert.factor == "approximation":
            if is_policy == "none":
                return self.fix(_as_factor(alert, "train_inference"), controls)
            if not controls.get("clip", True) or mini > 1:
                return self.fix(_as_factor(alert, "staleness"), controls)
        return []

    def decide(
        self,
        step: int,
        alerts: Sequence[Alert],
        controls: Mapping[str, Any],
        history: Sequence[Action],
        open_alerts: Sequence[Alert] = (),
    ) -> list[ActionDraft]:
        """Actions for this step's new `alerts`, within the limits set by `history`.

        `open_alerts` (still open, any step) tell which factor broke first when a
        collapse needs a rollback plus a fix.
        """
        c = self.cfg
        self.skipped = []
        floor = severity_rank(c.min_severity)
        eligible = [a for a in alerts if severity_rank(a.severity) >= floor]
        drafts: list[ActionDraft] = []
        if eligible and controls.get("length_norm", False):
            drafts.append(
                _d(
                    "set_length_norm",
                    {"enabled": False},
                    f"{eligible[0].detector}: length normalisation is on and breaks the"
                    " first-order approximation (paper): turn it off",
                    eligible[0],
                )
            )
        collapse = [
            a for a in eligible if a.severity == "critical" and a.detector in c.collapse_detectors
        ]
        if collapse:
            a = collapse[0]
            drafts.append(
                _d(
                    "rollback",
                    {},
                    f"{a.detector} (critical): {a.message} → collapse"
                    " under way: roll back to the last healthy checkpoint",
                    a,
                )
            )
            first = sorted(
                (o for o in [*open_alerts, *eligible] if o.factor in BREAKDOWN_FACTORS),
                key=lambda o: (o.step, o.id),
            )
            for broken in first:
                fixes = self.fix(broken, controls)
                if fixes:
                    drafts += fixes
                    break
            else:
                drafts += self.fix(_as_factor(a, "approximation"), controls)
            drafts.append(
                _d(
                    "scale_lr",
                    {"factor": c.lr_factor},
                    f"{a.detector} (critical): collapse → lower the learning rate ×{c.lr_factor:g}",
                    a,
                )
            )
        for a in eligible:
            drafts += self.fix(a, controls)
        return self._within_limits(step, drafts, history)

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


def _d(kind: str, params: dict[str, Any], reason: str, alert: Alert) -> ActionDraft:
    return ActionDraft(kind=kind, params=params, reason=reason, alert_id=alert.id)


def _as_factor(alert: Alert, factor: str) -> Alert:
    """The same alert read as blaming `factor` (to reuse that factor's recipe)."""
    from dataclasses import replace

    return replace(alert, factor=factor)  # type: ignore[arg-type]
