"""What gets drawn on top of every chart: breakdown spans, alert and action markers, health.

A breakdown span is a run of steps during which at least one warning-or-worse alert was
open (from its step until the detector cleared it, or until the last step while it is
still open); overlapping alerts merge into one span with the worst severity. Markers
place alerts at their step and actions at the step they were applied (or requested,
while pending). Pure functions of the monitor's records; nothing here draws or reads.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from monitor.records import SEVERITIES, Action, Alert, Event, severity_rank


@dataclass(frozen=True)
class Span:
    """Steps start..end (inclusive) with an open alert."""

    start: int
    end: int
    severity: str
    factors: tuple[str, ...]


@dataclass(frozen=True)
class Mark:
    """One marker: an alert, an action or a run event, at a step, with hover text."""

    step: int
    kind: str
    """'alert', 'action' or 'event'."""
    level: str
    """Severity for alerts, status for actions, event kind for events."""
    label: str
    text: str


def _worst(a: str, b: str) -> str:
    return a if severity_rank(a) >= severity_rank(b) else b


def breakdown_spans(
    alerts: Iterable[Alert], last_step: int | None, min_severity: str = "warning"
) -> list[Span]:
    """Merged spans of steps with an open alert of at least `min_severity`."""
    rank = severity_rank(min_severity)
    raw = []
    for a in alerts:
        if severity_rank(a.severity) < rank:
            continue
        if a.cleared_step is not None:
            end = max(a.step, a.cleared_step - 1)  # cleared at cleared_step: healthy there
        else:
            end = max(a.step, last_step if last_step is not None else a.step)
        raw.append(Span(a.step, end, a.severity, (a.factor,)))
    return merge_spans(raw, gap=1)


def merge_spans(spans: Sequence[Span], gap: int) -> list[Span]:
    """Join spans that overlap or lie fewer than `gap` steps apart (gap=1: touching).

    Used with a larger gap to keep a chart of a long run to a few hundred shapes.
    """
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        if out and s.start <= out[-1].end + gap:
            last = out[-1]
            factors = tuple(dict.fromkeys(last.factors + s.factors))
            out[-1] = Span(
                last.start, max(last.end, s.end), _worst(last.severity, s.severity), factors
            )
        else:
            out.append(s)
    return out


def limit_spans(spans: Sequence[Span], max_spans: int) -> list[Span]:
    """Exactly `max_spans` spans out of more, by closing the smallest gaps first (ties: the
    earliest), so evenly spaced alerts are not all fused into one (display only).

    `spans` must be sorted and disjoint, as breakdown_spans returns them.
    """
    spans = list(spans)
    if len(spans) <= max_spans or max_spans < 1:
        return spans
    gaps = [b.start - a.end for a, b in itertools.pairwise(spans)]
    closed = set(sorted(range(len(gaps)), key=lambda i: (gaps[i], i))[: len(spans) - max_spans])
    out = [spans[0]]
    for i, s in enumerate(spans[1:]):
        if i in closed:
            last = out[-1]
            factors = tuple(dict.fromkeys(last.factors + s.factors))
            out[-1] = Span(last.start, s.end, _worst(last.severity, s.severity), factors)
        else:
            out.append(s)
    return out


def alert_marks(alerts: Iterable[Alert]) -> list[Mark]:
    out = []
    for a in alerts:
        evidence = f"{a.metric} = {a.value:.4g} (baseline {a.baseline:.4g}, window {a.window})"
        text = (
            f"alert #{a.id} · {a.severity} · step {a.step}<br>{a.message}<br>{evidence}"
            f"<br>blamed factor: {a.factor}<br>remedy: {a.remedy}"
        )
        out.append(Mark(a.step, "alert", a.severity, a.detector, text))
    return out


def action_marks(actions: Iterable[Action], last_step: int | None) -> list[Mark]:
    """Applied/rejected actions at their resolved step; pending ones at the last step."""
    out = []
    for a in actions:
        if a.status == "pending":
            step = last_step if last_step is not None else (a.step or 0)
        else:
            step = a.resolved_step if a.resolved_step is not None else (a.step or 0)
        params = ", ".join(f"{k}={v}" for k, v in a.params.items()) or "no params"
        text = (
            f"action #{a.id} {a.kind} ({params}) · {a.status} · from {a.source}"
            f"<br>{a.reason}" + (f"<br>{a.detail}" if a.detail else "")
        )
        out.append(Mark(step, "action", a.status, a.kind, text))
    return out


EVENT_KINDS_SHOWN = ("rollback", "truncate", "resume", "stop", "crash")


def event_marks(events: Iterable[Event]) -> list[Mark]:
    """Run events that change the run's course (rollbacks, resumes, stop, crash)."""
    return [
        Mark(e.step, "event", e.kind, e.kind, f"{e.kind} at step {e.step}<br>{e.detail}")
        for e in events
        if e.kind in EVENT_KINDS_SHOWN and e.step is not None
    ]


def health(open_alerts: Iterable[Alert]) -> str:
    """'critical', 'warning' or 'healthy' from the alerts still open ('info' ignored)."""
    worst = "info"
    for a in open_alerts:
        worst = _worst(worst, a.severity)
    return "healthy" if worst == SEVERITIES[0] else worst
