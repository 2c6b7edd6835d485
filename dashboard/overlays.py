"""How a run's episodes and marks are drawn on every time-series chart (charts.py).

Episodes are shaded behind the data over the full height (amber for warning, red once
critical). One ▼ per episode start sits at the top edge, labelled with the factor it
blames (✕ where it turned critical); actions are thin full-height lines at the step
boundary where they applied, with a ◆ at the bottom edge (staggered over three rows so
neighbouring labels do not overlap); rollbacks (purple, dashed) and induced incidents
(black, dash-dot) are thicker lines with their label written along them, so a label
takes no width from the data. Markers sit on a hidden second y axis spanning [0, 1], so
they stay at the edges whatever the data's scale; every marker has its details on hover.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dashboard.marks import Mark, Span

SPAN_COLORS = {"info": "#4a90e2", "warning": "#f5a623", "critical": "#d0021b"}
ALERT_COLORS = SPAN_COLORS
ACTION_COLORS = {"pending": "#7f7f7f", "applied": "#2ca02c", "rejected": "#d62728"}
EVENT_COLOR = "#555555"
SPAN_OPACITY = 0.18
Trace = dict[str, Any]


def span_shapes(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """Shade each episode [start − ½, end + ½] over the full height, behind the data."""
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": s.start - 0.5,
            "x1": s.end + 0.5,
            "y0": 0,
            "y1": 1,
            "fillcolor": SPAN_COLORS.get(s.severity),
            "opacity": SPAN_OPACITY,
            "line": {"width": 0},
            "layer": "below",
        }
        for s in spans
    ]


MARKS_LEGEND = (
    "shaded: an episode, from the first warning to recovery (amber warning, red once "
    "critical), labelled with the factor it blames; info levels are noted above, never "
    "shaded · ▼ episode start, ✕ turned critical (hover: its alerts) · ◆ action at the step "
    "boundary where it was applied (green), rejected (red) or waits (grey) · purple dashed: "
    "rollback · black dash-dot: an induced (scripted) incident"
)
ACTION_LABELS_MAX = 10
"""More episodes (or action groups) than this on one chart: markers only, labels on hover."""
ROLLBACK_COLOR = "#7b2cbf"
INCIDENT_COLOR = "#111111"


def _marker_trace(
    ms: Sequence[Mark],
    y: float | list[float],
    symbol: str,
    color: str,
    size: int = 9,
    labels: bool = False,
    x_end: float | None = None,
) -> Trace:
    """Markers of one kind and level on the hidden [0, 1] axis; with `labels`, their short
    labels beside them: to the right, or to the left in the last third of the x range
    (up to `x_end`), where a label would run off the chart."""
    ys = y if isinstance(y, list) else [y] * len(ms)
    trace = {
        "type": "scatter",
        "x": [m.step for m in ms],
        "y": ys,
        "yaxis": "y2",
        "mode": "markers+text" if labels else "markers",
        "name": f"{ms[0].kind}: {ms[0].level}",
        "showlegend": False,
        "cliponaxis": False,
        "marker": {
            "symbol": symbol,
            "size": size,
            "color": color,
            "line": {"width": 1, "color": "white"},
        },
        "text": [m.label for m in ms],
        "customdata": [m.text for m in ms],
        "hovertemplate": "%{customdata}<extra></extra>",
    }
    if labels:
        right = [x_end is None or m.step < x_end * 2 / 3 for m in ms]
        sides = ["middle right" if r else "middle left" for r in right]
        trace.update(textposition=sides, textfont={"size": 10, "color": color})
    return trace


def grouped(marks: Sequence[Mark]) -> list[Mark]:
    """Marks of one kind and level at the same step joined into one (labels with +)."""
    out: dict[tuple[float, str, str], Mark] = {}
    for m in marks:
        key = (m.step, m.kind, m.level)
        if key in out:
            o = out[key]
            out[key] = Mark(
                m.step, m.kind, m.level, f"{o.label} + {m.label}", f"{o.text}<br><br>{m.text}"
            )
        else:
            out[key] = m
    return sorted(out.values(), key=lambda m: (m.step, m.kind, m.level))


def mark_traces(marks: Sequence[Mark], x_end: float | None = None) -> list[Trace]:
    """Episode starts ▼ (and ✕ where one turned critical) at the top edge, labelled with
    the blamed factor; actions ◆ at the bottom edge, staggered over three rows so that
    neighbouring labels do not overlap; other run events ■ (explained once per page by
    MARKS_LEGEND, not in every chart's legend). Rollbacks and incidents are lines
    (`mark_shapes`, `mark_annotations`). `x_end`: the chart's last step (labels near it
    go to the left of their marker)."""
    traces = []
    for level in ("warning", "critical"):
        ms = [m for m in marks if m.kind == "alert" and m.level == level]
        if ms:
            few = sum(m.kind == "alert" for m in marks) <= ACTION_LABELS_MAX
            traces.append(
                _marker_trace(
                    ms, 0.96, "triangle-down", ALERT_COLORS[level], 11, labels=few, x_end=x_end
                )
            )
    ms = [m for m in marks if m.kind == "critical"]
    if ms:
        traces.append(_marker_trace(ms, 0.96, "x", ALERT_COLORS["critical"], size=10))
    actions = grouped([m for m in marks if m.kind == "action"])
    labels = len(actions) <= ACTION_LABELS_MAX
    for status, color in ACTION_COLORS.items():
        idx = [i for i, m in enumerate(actions) if m.level == status]
        if idx:
            ms = [actions[i] for i in idx]
            ys = [0.04 + 0.1 * (i % 3) for i in idx]
            traces.append(_marker_trace(ms, ys, "diamond", color, labels=labels, x_end=x_end))
    events = [m for m in marks if m.kind == "event"]
    if events:
        traces.append(_marker_trace(events, 0.04, "square", EVENT_COLOR))
    for kind, color, symbol in (
        ("rollback", ROLLBACK_COLOR, "circle"),
        ("incident", INCIDENT_COLOR, "x-thin-open"),
    ):
        ms = grouped([m for m in marks if m.kind == kind])
        if ms:  # a hover target on the line, halfway up
            traces.append(_marker_trace(ms, 0.5, symbol, color, size=8))
    return traces


def mark_shapes(marks: Sequence[Mark]) -> list[dict[str, Any]]:
    """Vertical lines over the full height: actions (thin, their status colour), rollbacks
    (purple dashed) and induced incidents (black dash-dot)."""
    styles = {
        "action": lambda m: {
            "color": ACTION_COLORS.get(m.level, "#333"),
            "width": 1,
            "dash": "dot" if m.level == "pending" else "solid",
        },
        "rollback": lambda m: {"color": ROLLBACK_COLOR, "width": 2.5, "dash": "dash"},
        "incident": lambda m: {"color": INCIDENT_COLOR, "width": 2, "dash": "dashdot"},
    }
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": m.step,
            "x1": m.step,
            "y0": 0,
            "y1": 1,
            "line": styles[m.kind](m),
            "opacity": 0.8 if m.kind == "action" else 1.0,
        }
        for m in grouped([m for m in marks if m.kind in styles])
    ]


def mark_annotations(marks: Sequence[Mark]) -> list[dict[str, Any]]:
    """Labels written along the rollback and incident lines (vertical text, so they take
    no width from the data): 'induced incident' left of its line, 'rolled back to step X'
    right of its line; the details on hover."""
    out = []
    for m in grouped([m for m in marks if m.kind in ("rollback", "incident")]):
        incident = m.kind == "incident"
        out.append(
            {
                "x": m.step,
                "xref": "x",
                "y": 0.5,
                "yref": "paper",
                "textangle": -90,
                "text": "induced incident" if incident else m.label,
                "xanchor": "right" if incident else "left",
                "yanchor": "middle",
                "showarrow": False,
                "font": {"size": 10, "color": INCIDENT_COLOR if incident else ROLLBACK_COLOR},
                "bgcolor": "rgba(255,255,255,0.55)",
                "hovertext": m.text,
            }
        )
    return out


def overlays(spans: Sequence[Span], marks: Sequence[Mark]) -> dict[str, Any]:
    """The layout entries every time-series chart shares: episode shading, lines, labels."""
    return {
        "shapes": [*span_shapes(spans), *mark_shapes(marks)],
        "annotations": mark_annotations(marks),
    }
