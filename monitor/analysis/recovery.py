"""Whether a run got back to where it was: its episodes, and the last evaluation judged
against the best one before the last of them (what `minirl analyze` reports as recovery).

An episode is a stretch of warning or critical alerts on the run's state, overlapping or
touching (as the dashboard shades them); the judgement itself is healthy.py's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from monitor.remediation.healthy import recovered
from monitor.remediation.run_health import is_precursor


def episode_starts(alerts: list[dict[str, Any]]) -> list[int]:
    """Where each episode began: a warning or critical alert on the run's state (not a
    setup rule's, which says how the run was configured) opened while none before it was
    open. An episode ends when its last alert clears."""
    starts: list[int] = []
    open_until = -math.inf
    chosen = [a for a in alerts if is_precursor(a["severity"], a["detector"])]
    for a in sorted(chosen, key=lambda a: a["step"]):
        if a["step"] > open_until:
            starts.append(int(a["step"]))
        cleared = a.get("cleared_step")
        open_until = max(open_until, math.inf if cleared is None else cleared)
    return starts


def recovery_of(
    evals: tuple[np.ndarray, np.ndarray], alerts: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The last evaluation against the best one before the last episode evaluated in
    (`episode_starts`), never one already fallen. Not the first episode: a warning that
    cleared before the run learned (held-out 0.001 then, 0.43 at its peak, 0 at the end)
    would call a run that lost all it learned "back to its pre-episode level"."""
    pairs = [(int(s), float(v)) for s, v in zip(*evals, strict=True) if math.isfinite(v)]
    starts = [s for s in episode_starts(alerts) if pairs and s <= pairs[-1][0]]
    if not starts:
        return None
    start = starts[-1]
    before = [(s, v) for s, v in pairs if s < start]
    ok, why = recovered(pairs[-1][1], before)
    return {
        "episode_start": start,
        "step": pairs[-1][0],
        "eval_acc": pairs[-1][1],
        "recovered": ok,
        "why": why,
    }
