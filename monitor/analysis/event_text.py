"""Plain-text wording of a run's records: an action's parameters and the events a reader
of the run needs (induced incidents, rollbacks, actions the policy held back).

`minirl analyze`, its HTML report and the dashboard all word them from here, so a
rollback or a held-back advice reads the same wherever it is seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def params_text(params: Mapping[str, Any] | None) -> str:
    """An action's parameters as 'k=v, k=v' (empty for none)."""
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items())


def number_text(x: float | None) -> str:
    """A measured value in 4 significant digits; '–' where there is none."""
    return "–" if x is None else "nan" if math.isnan(x) else f"{x:.4g}"


def held_back_text(detail: Mapping[str, Any]) -> str:
    """What a `remediation_skipped` event held back, and why: 'kind (k=v): why'."""
    return f"{detail.get('kind')} ({params_text(detail.get('params'))}): {detail.get('why')}"


def event_text(kind: str, detail: Mapping[str, Any]) -> str | None:
    """One line saying what an event changed (an induced incident, a rollback) or why the
    policy did not change it; None for bookkeeping (start, checkpoint, stop, close...)."""
    d = detail
    if kind == "incident":
        return f"{d.get('note') or d.get('kind')} (scripted on purpose, not by the run)"
    if kind == "rollback":
        return (
            f"rolled back to the checkpoint of step {d.get('to_step')}; held-out accuracy "
            f"of the restored policy {number_text(d.get('eval_acc_after'))} (last evaluation "
            f"up to that step: {number_text(d.get('eval_acc_before'))})" + _verdict(d)
        )
    if kind == "rollback_failed":
        return f"rollback failed: wanted {d.get('wanted')}, checkpoints {d.get('have')}"
    if kind == "fork_experiment":
        return fork_text(d)
    if kind == "remediation_skipped":
        return f"not applied automatically: {held_back_text(d)}"
    return None


def _verdict(detail: Mapping[str, Any]) -> str:
    """'; judged healthy: why' of a rollback that recorded its healthy verdict."""
    v = detail.get("healthy")
    if not isinstance(v, Mapping) or not v.get("reason"):
        return ""
    return f"; {'judged healthy' if v.get('healthy') else 'NOT healthy'}: {v['reason']}"


def fork_text(detail: Mapping[str, Any]) -> str:
    """A fork experiment: the candidates tried from which checkpoint, their scores, the
    choice and the cost in steps."""
    d = detail
    tried = "; ".join(
        f"{c.get('name')} score {number_text(c.get('score'))}" for c in d.get("candidates", [])
    )
    return (
        f"fork experiment from the checkpoint of step {d.get('from_step')}: "
        f"{len(d.get('candidates', []))} remedies × {d.get('k')} steps ({tried}); "
        f"chose {d.get('chosen')}; cost {d.get('cost_steps')} extra steps"
    )
