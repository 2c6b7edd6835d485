"""Plain-text wording of a run's records: an action's parameters and the events a reader
of the run needs (induced incidents, rollbacks, actions the policy held back).

`minirl analyze`, its HTML report and the dashboard all word them from here, so a
rollback or a held-back advice reads the same wherever it is seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

NOTABLE_EVENTS = ("incident", "rollback", "rollback_failed", "remediation_skipped")
"""The events that change what a run did or say why it was not changed (the others —
start, checkpoint, stop, close... — are bookkeeping)."""


def params_text(params: Mapping[str, Any] | None) -> str:
    """An action's parameters as 'k=v, k=v' (empty for none)."""
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items())


def number_text(x: float | None) -> str:
    """A measured value in 4 significant digits; '–' where there is none."""
    return "–" if x is None else "nan" if math.isnan(x) else f"{x:.4g}"


def event_text(kind: str, detail: Mapping[str, Any]) -> str | None:
    """One line saying what a notable event did, or None for bookkeeping events."""
    d = detail
    if kind == "incident":
        return f"{d.get('note') or d.get('kind')} (scripted on purpose, not by the run)"
    if kind == "rollback":
        return (
            f"rolled back to the checkpoint of step {d.get('to_step')}; held-out accuracy "
            f"of the restored policy {number_text(d.get('eval_acc_after'))} (last evaluation "
            f"up to that step: {number_text(d.get('eval_acc_before'))})"
        )
    if kind == "rollback_failed":
        return f"rollback failed: wanted {d.get('wanted')}, checkpoints {d.get('have')}"
    if kind == "remediation_skipped":
        params = params_text(d.get("params"))
        return f"not applied automatically: {d.get('kind')} ({params}): {d.get('why')}"
    return None
