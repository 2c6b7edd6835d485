"""What gets drawn on top of every chart: episodes, their alerts, actions, rollbacks, incidents.

An episode is what the shading marks: a stretch of steps during which the run was in
trouble, from the first warning-or-critical alert that opened it to the step its last
overlapping alert cleared (or the last step while one is still open). Info alerts (a
level worth knowing, e.g. a mismatch that has been large since step 1) never open an
episode: they are listed as notes, not shaded. An episode is labelled with the factor it
blames: the factor of a critical `breakdown` alert inside it (the detectors' joint
judgement), else that of the alert that opened it. Alerts get one marker per episode
start (and one where it turned critical), not one per alert, so they do not crowd the top
edge; the hover lists them all.

Actions, rollbacks and scripted incidents happen at a step boundary, after the last
logged step and before the next, so they sit at step + ½. Pure functions of the monitor's
records; nothing here draws or reads.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from monitor.analysis.event_text import params_text
from monitor.store.records import SEVERITIES, Action, Alert, Event, severity_rank

BOUNDARY = 0.5
"""Offset of a step-boundary change (action, rollback, incident) from its logged step."""
MAX_HOVER_ALERTS = 8


@dataclass(frozen=True)
class Span:
    """An episode: steps start..end (inclusive) with a warning or critical alert open."""

    start: int
    end: int
    severity: str
    """The worst severity of its alerts."""
    factors: tuple[str, ...]
    """Every factor its alerts blame, in order of opening."""
    blamed: str = ""
    """The factor the episode is labelled with (see the module docstring)."""
    open: bool = False
    """Still under way at the last step (an alert has not cleared)."""

    @property
    def label(self) -> str:
        return self.blamed or (self.factors[0] if self.factors else "")


@dataclass(frozen=True)
class Mark:
    """One marker: an episode's alerts, an action, a rollback, an incident or a run event."""

    step: float
    kind: str
    """'alert' (an episode's start), 'critical' (where it turned critical), 'action',
    'rollback', 'incident' or 'event'."""
    level: str
    """Severity for alerts, status for actions, event kind for events."""
    label: str
    """Short text drawn on the chart (hover `text` has the details)."""
    text: str


def _worst(a: str, b: str) -> str:
    return a if severity_rank(a) >= severity_rank(b) else b


def _interval(a: Alert, last_step: int | None) -> tuple[int, int]:
    if a.cleared_step is not None:
        return a.step, max(a.step, a.cleared_step - 1)  # cleared at cleared_step: healthy there
    return a.step, max(a.step, last_step if last_step is not None else a.step)


def _blamed(group: Sequence[Alert]) -> str:
    crit = [a for a in group if a.detector == "breakdown" and a.severity == "critical"]
    return (crit or group)[0].factor


def episode_groups(
    alerts: Iterable[Alert], last_step: int | None
) -> list[tuple[Span, list[Alert]]]:
    """Episodes with their alerts (warning and critical only), in step order."""
    chosen = [a for a in alerts if severity_rank(a.severity) >= severity_rank("warning")]
    chosen.sort(key=lambda a: (a.step, a.id))
    groups: list[tuple[int, int, list[Alert]]] = []
    for a in chosen:
        start, end = _interval(a, last_step)
        if groups and start <= groups[-1][1] + 1:  # overlapping or touching
            s, e, members = groups[-1]
            groups[-1] = (s, max(e, end), [*members, a])
        else:
            groups.append((start, end, [a]))
    out = []
    for start, end, members in groups:
        severity = "warning"
        for a in members:
            severity = _worst(severity, a.severity)
        factors = tuple(dict.fromkeys(a.factor for a in members))
        still_open = any(a.cleared_step is None for a in members)
        span = Span(start, end, severity, factors, _blamed(members), still_open)
        out.append((span, members))
    return out


def breakdown_spans(alerts: Iterable[Alert], last_step: int | None) -> list[Span]:
    """The episodes of a run (warning or critical alerts; info never shades)."""
    return [span for span, _ in episode_groups(alerts, last_step)]


def _join(a: Span, b: Span) -> Span:
    factors = tuple(dict.fromkeys(a.factors + b.factors))
    return Span(
        a.start, max(a.end, b.end), _worst(a.severity, b.severity), factors, a.label, b.open
    )


def merge_spans(spans: Sequence[Span], gap: int) -> list[Span]:
    """Join spans that overlap or lie fewer than `gap` steps apart (gap=1: touching); the
    earlier one's label stays. Used with a larger gap to keep a chart of a long run to a
    few hundred shapes (display only)."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        if out and s.start <= out[-1].end + gap:
            out[-1] = _join(out[-1], s)
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
            out[-1] = _join(out[-1], s)
        else:
            out.append(s)
    return out


def _alert_line(a: Alert) -> str:
    cleared = "open" if a.cleared_step is None else f"cleared at step {a.cleared_step}"
    return (
        f"#{a.id} {a.severity} · {a.detector} · step {a.step} ({cleared}) · {a.factor}"
        f"<br>&nbsp;&nbsp;{a.message}"
    )


def alert_marks(alerts: Iterable[Alert], last_step: int | None = None) -> list[Mark]:
    """One marker per episode at its start (coloured by the episode's worst severity so
    far there), and one where it first turned critical if that came later; the hover
    lists the episode's alerts with their evidence."""
    out = []
    for span, members in episode_groups(alerts, last_step):
        lines = [_alert_line(a) for a in members[:MAX_HOVER_ALERTS]]
        if len(members) > MAX_HOVER_ALERTS:
            lines.append(f"… and {len(members) - MAX_HOVER_ALERTS} more (Alerts page)")
        head = (
            f"episode from step {span.start} to {'now' if span.open else span.end} · "
            f"blamed: {span.label}"
        )
        first = members[0]
        at_start = [a for a in members if a.step == first.step]
        level = "critical" if any(a.severity == "critical" for a in at_start) else "warning"
        out.append(Mark(span.start, "alert", level, span.label, "<br>".join([head, *lines])))
        crit = next((a for a in members if a.severity == "critical"), None)
        if crit is not None and crit.step > first.step:
            evidence = f"{crit.metric} = {crit.value:.4g} (baseline {crit.baseline:.4g})"
            text = f"{_alert_line(crit)}<br>{evidence}<br>remedy: {crit.remedy}"
            out.append(Mark(crit.step, "critical", "critical", "critical", text))
    return out


def short(kind: str, params: dict) -> str:
    """A few words for an action on a chart ('clip on', 'mini-batches 4', 'replay R3'); the
    hover and the Alerts page have the full parameters."""
    p = params
    if "enabled" in p and kind in SWITCHES:
        return f"{SWITCHES[kind]} {'on' if p['enabled'] else 'off'}"
    if kind == "set_is_policy":
        return f"IS {p.get('policy')}" + (f" cap {p['cap']:g}" if "cap" in p else "")
    if kind in ONE_VALUE:
        return ONE_VALUE[kind].format_map(defaultdict(lambda: None, p))
    if kind == "set_lr_cap" and "lr" in p:
        return f"lr cap {p['lr']:.2g}"
    if kind == "advice":
        return f"advice: resume from step {p['step']}" if "step" in p else "advice"
    return kind


SWITCHES = {"set_is_correction": "IS", "set_clip": "clip", "set_length_norm": "length norm"}
ONE_VALUE = {
    "set_routing_replay": "replay {mode}",
    "set_mini_batches": "mini-batches {n}",
    "set_mini_batches_cap": "mini-batches ≤ {n}",
    "scale_lr": "lr ×{factor}",
    "set_rollout_quant": "rollouts {weight_quant}",
    "set_rollout_quant_floor": "rollouts ≥ {weight_quant}",
}
"""Actions shown by one parameter: kind -> its words (a missing parameter shows as None)."""


def action_marks(actions: Iterable[Action], last_step: int | None) -> list[Mark]:
    """Applied/rejected actions at the boundary after their resolved step; pending ones at
    the last step (they apply at the next boundary)."""
    out = []
    for a in actions:
        if a.status == "pending":
            step = float(last_step if last_step is not None else (a.step or 0))
        else:
            step = (a.resolved_step if a.resolved_step is not None else (a.step or 0)) + BOUNDARY
        text = (
            f"action #{a.id} {a.kind} ({params_text(a.params) or 'no params'}) · {a.status} · "
            f"from {a.source}<br>{a.reason}" + (f"<br>trainer: {a.detail}" if a.detail else "")
        )
        out.append(Mark(step, "action", a.status, short(a.kind, a.params), text))
    return out


def rollback_marks(events: Iterable[Event]) -> list[Mark]:
    """Rollbacks (and failed ones) at the boundary where they happened."""
    out = []
    for e in events:
        if e.step is None or e.kind not in ("rollback", "rollback_failed"):
            continue
        d = e.detail
        if e.kind == "rollback":
            label = f"rolled back to step {d.get('to_step', '?')}"
            after, before = d.get("eval_acc_after"), d.get("eval_acc_before")
            acc = (
                "" if after is None else f"<br>held-out accuracy of the restored policy {after:.3f}"
            )
            acc += "" if before is None else f" (last evaluation up to that step: {before:.3f})"
            out.append(Mark(e.step + BOUNDARY, "rollback", "rollback", label, label + acc))
        else:
            text = f"rollback failed: no healthy checkpoint ({d})"
            out.append(Mark(e.step + BOUNDARY, "rollback", "failed", "rollback failed", text))
    return out


def incident_marks(events: Iterable[Event]) -> list[Mark]:
    """Scripted incidents (induced on purpose, never by the run itself), one marker per
    boundary (incidents of the same boundary joined)."""
    by_step: dict[int, list[Event]] = {}
    for e in events:
        if e.kind == "incident" and e.step is not None:
            by_step.setdefault(e.step, []).append(e)
    out = []
    for step, es in sorted(by_step.items()):
        notes = [str(e.detail.get("note") or f"{e.detail.get('kind')} {e.detail}") for e in es]
        what = [n.split(": ", 1)[-1] for n in notes]  # "induced incident at step N: what"
        label = "induced: " + "; ".join(what)
        text = "<br>".join(notes) + "<br>(a scripted incident, not something the run did)"
        out.append(Mark(step + BOUNDARY, "incident", "induced", label, text))
    return out


EVENT_KINDS_SHOWN = ("truncate", "resume", "stop", "crash", "nonfinite")


def event_marks(events: Iterable[Event]) -> list[Mark]:
    """Other run events that change the run's course (resume, a stop other than the
    planned end, crash ...)."""
    return [
        Mark(e.step, "event", e.kind, e.kind, f"{e.kind} at step {e.step}<br>{e.detail}")
        for e in events
        if e.kind in EVENT_KINDS_SHOWN
        and e.step is not None
        and not (e.kind == "stop" and e.detail.get("reason") == "completed")
    ]


def info_levels(alerts: Iterable[Alert]) -> list[str]:
    """The open info alerts as one short note each (levels worth knowing, not shaded)."""
    return [
        f"{a.metric} {a.value:.3g} ({a.factor}, since step {a.step})"
        for a in alerts
        if a.severity == "info" and a.cleared_step is None
    ]


def health(open_alerts: Iterable[Alert]) -> str:
    """'critical', 'warning' or 'healthy' from the alerts still open ('info' ignored)."""
    worst = "info"
    for a in open_alerts:
        worst = _worst(worst, a.severity)
    return "healthy" if worst == SEVERITIES[0] else worst
