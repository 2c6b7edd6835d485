"""Plotly figure builders: arrays and marks in, `go.Figure` out.

Pure functions (no Streamlit, no store), so every chart is testable on its own. Each
time-series figure shares one look: episodes shaded behind the data (amber for warning,
red once critical), one marker per episode start along the top edge labelled with the
blamed factor, actions along the bottom edge on a thin line at the step boundary where
they applied, rollbacks and induced incidents as labelled full-height lines; markers sit
on a hidden second y axis spanning [0, 1] so they stay at the edges whatever the data's
scale. The data arrive already thinned for display
(downsample.py); these builders never thin or change values.

Figures are written as plain Plotly dicts and wrapped once with `_validate=False`:
Plotly's per-property validation cost ~100 ms a chart, too slow for a page of twenty
charts refreshing every two seconds. The dicts use only documented Plotly attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from dashboard.marks import Mark, Span
from dashboard.overlays import (
    ACTION_COLORS,
    ALERT_COLORS,
    INCIDENT_COLOR,
    ROLLBACK_COLOR,
    Trace,
    grouped,
    mark_shapes,
    mark_traces,
    overlays,
)
from monitor.store.records import FACTORS

FACTOR_COLORS = {
    "train_inference": "#1f77b4",
    "staleness": "#ff7f0e",
    "routing": "#2ca02c",
    "approximation": "#9467bd",
    "optimisation": "#8c564b",
    "outcome": "#7f7f7f",
}
Series = Mapping[str, tuple[np.ndarray, np.ndarray]]
EVENTS_ROW = "incidents, rollbacks"


def _layout(title: str, height: int, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.01, "font": {"size": 14}},
        "height": height,
        "margin": {"l": 50, "r": 10, "t": 36, "b": 30},
        "legend": {"orientation": "h", "y": -0.18, "x": 0, "font": {"size": 10}},
        "hovermode": "closest",
        "yaxis2": {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
        **extra,
    }


def _figure(data: list[Trace], layout: dict[str, Any]) -> go.Figure:
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def line_traces(series: Series) -> list[Trace]:
    return [
        {
            "type": "scatter",
            "x": np.asarray(x),
            "y": np.asarray(y, dtype=np.float64),
            "mode": "lines+markers" if len(x) <= 60 else "lines",
            "name": name,
            "marker": {"size": 4},
            "hovertemplate": f"{name}<br>step %{{x}}: %{{y:.5g}}<extra></extra>",
        }
        for name, (x, y) in series.items()
    ]


def line_figure(
    title: str,
    series: Series,
    *,
    spans: Sequence[Span] = (),
    marks: Sequence[Mark] = (),
    log_y: bool = False,
    height: int = 280,
) -> go.Figure:
    """One line per series, sharing the step axis, with spans and marks."""
    yaxis = {"type": "log", "dtick": 1, "exponentformat": "power"} if log_y else {}
    layout = _layout(title, height, yaxis=yaxis, **overlays(spans, marks))
    ends = [float(np.max(x)) for x, _ in series.values() if len(x)]
    return _figure([*line_traces(series), *mark_traces(marks, max(ends) if ends else None)], layout)


def heatmap_figure(
    title: str,
    x: np.ndarray,
    y: Sequence[float] | Sequence[str],
    z: np.ndarray,
    *,
    spans: Sequence[Span] = (),
    marks: Sequence[Mark] = (),
    colorscale: str = "Reds",
    zmin: float | None = None,
    zmax: float | None = None,
    colorbar_title: str = "",
    hover: str = "%{z:.3g}",
    height: int = 300,
    extra: Sequence[Trace] = (),
    yaxis: dict[str, Any] | None = None,
) -> go.Figure:
    """z [len(y), len(x)] as a heat map over steps, with spans, marks and `extra` traces."""
    z = np.asarray(z, dtype=np.float64)
    heat = {
        "type": "heatmap",
        "x": np.asarray(x),
        "y": list(y),
        "z": np.where(np.isfinite(z), z, np.nan),
        "colorscale": colorscale,
        "colorbar": {"title": {"text": colorbar_title}, "thickness": 12},
        "hovertemplate": f"step %{{x}}<br>%{{y}}: {hover}<extra></extra>",
    }
    if zmin is not None:
        heat["zmin"] = zmin
    if zmax is not None:
        heat["zmax"] = zmax
    layout = _layout(title, height, yaxis=yaxis or {}, **overlays(spans, marks))
    x_end = float(np.max(x)) if np.size(x) else None
    return _figure([heat, *extra, *mark_traces(marks, x_end)], layout)


def distribution_figure(
    title: str,
    steps: np.ndarray,
    edges: np.ndarray,
    counts: np.ndarray,
    quantiles: Series | None = None,
    *,
    spans: Sequence[Span] = (),
    marks: Sequence[Mark] = (),
    height: int = 320,
) -> go.Figure:
    """Per-step histograms (counts [S, bins + 2] with under/overflow) as a heat map.

    Colour is log10 of the share of the step's values in each bin, so the tails that
    decide IS-weight blow-ups stay visible; the under/overflow bins are drawn as one
    extra row below/above the range. Exact quantile lines {name: (steps, values)} (e.g.
    p01, p50, p99, computed on the raw values) go on top.
    """
    counts = np.asarray(counts, dtype=np.float64)  # [S, bins + 2]
    edges = np.asarray(edges, dtype=np.float64)
    width = edges[1] - edges[0] if len(edges) > 1 else 1.0
    centres = (edges[:-1] + edges[1:]) / 2
    y = np.concatenate([[edges[0] - width / 2], centres, [edges[-1] + width / 2]])
    totals = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(counts > 0, counts / np.maximum(totals, 1), np.nan)
        z = np.log10(share).T  # [bins + 2, S]
    lines = [
        {
            "type": "scatter",
            "x": np.asarray(qx),
            "y": np.asarray(qy, dtype=np.float64),
            "mode": "lines",
            "name": name,
            "line": {"width": 1, "color": "white"},
            "hovertemplate": f"{name}<br>step %{{x}}: %{{y:.4g}}<extra></extra>",
        }
        for name, (qx, qy) in (quantiles or {}).items()
    ]
    return heatmap_figure(
        title,
        steps,
        y.tolist(),
        z,
        spans=spans,
        marks=marks,
        colorscale="Viridis",
        zmin=-4,
        zmax=0,
        colorbar_title="log10 share",
        hover="10^%{z:.2f} of values",
        height=height,
        extra=lines,
        yaxis={"range": [y[0] - width / 2, y[-1] + width / 2]},
    )


def overlay_figure(
    title: str, runs: Series, *, log_y: bool = False, height: int = 340
) -> go.Figure:
    """The same metric of several runs on one step axis (e.g. the paper's recipes)."""
    return line_figure(title, runs, log_y=log_y, height=height)


def timeline_figure(
    alert_rows: Sequence[Mapping[str, Any]],
    action_marks: Sequence[Mark],
    run_marks: Sequence[Mark] = (),
    last_step: int | None = None,
    height: int = 360,
) -> go.Figure:
    """Alerts as segments (open → cleared) on one row per blamed factor; actions above
    them (one diamond per step boundary and status); induced incidents and rollbacks
    (`run_marks`) on the top row and as lines across, over the whole run (0..last_step).

    `alert_rows`: dicts with step, end, factor, severity, text (see alerts page).
    """
    data: list[Trace] = []
    for severity in ("info", "warning", "critical"):
        rows = [r for r in alert_rows if r["severity"] == severity]
        if not rows:
            continue
        seg_x: list[Any] = []
        seg_y: list[Any] = []
        for r in rows:
            seg_x += [r["step"], r["end"], None]
            seg_y += [r["factor"], r["factor"], None]
        color = ALERT_COLORS[severity]
        data.append(
            {
                "type": "scatter",
                "x": seg_x,
                "y": seg_y,
                "mode": "lines",
                "line": {"color": color, "width": 6},
                "opacity": 0.5,
                "hoverinfo": "skip",
                "showlegend": False,
            }
        )
        data.append(
            {
                "type": "scatter",
                "x": [r["step"] for r in rows],
                "y": [r["factor"] for r in rows],
                "mode": "markers",
                "name": f"alert: {severity}",
                "text": [r["text"] for r in rows],
                "marker": {"size": 11, "color": color, "symbol": "triangle-down"},
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    for status in ("pending", "applied", "rejected"):
        ms = [m for m in grouped(action_marks) if m.level == status]
        if ms:
            data.append(
                {
                    "type": "scatter",
                    "x": [m.step for m in ms],
                    "y": ["actions"] * len(ms),
                    "mode": "markers+text",
                    "name": f"action: {status}",
                    "marker": {"size": 12, "color": ACTION_COLORS[status], "symbol": "diamond"},
                    "text": [m.label for m in ms],
                    "textposition": "top center",
                    "customdata": [m.text for m in ms],
                    "hovertemplate": "%{customdata}<extra></extra>",
                }
            )
    for kind, color, symbol in (
        ("incident", INCIDENT_COLOR, "x-thin-open"),
        ("rollback", ROLLBACK_COLOR, "circle"),
    ):
        ms = grouped([m for m in run_marks if m.kind == kind])
        if ms:
            data.append(
                {
                    "type": "scatter",
                    "x": [m.step for m in ms],
                    "y": [EVENTS_ROW] * len(ms),
                    "mode": "markers+text",
                    "name": "induced incident" if kind == "incident" else "rollback",
                    "marker": {
                        "size": 12,
                        "color": color,
                        "symbol": symbol,
                        "line": {"width": 2, "color": color},
                    },
                    "text": ["induced" if kind == "incident" else m.label for m in ms],
                    "textposition": "top left" if kind == "incident" else "top right",
                    "customdata": [m.text for m in ms],
                    "hovertemplate": "%{customdata}<extra></extra>",
                }
            )
    yaxis = {"categoryorder": "array", "categoryarray": [*FACTORS, "actions", EVENTS_ROW]}
    xaxis = {} if last_step is None else {"range": [-0.5, last_step + 1]}
    lines = mark_shapes(run_marks)
    layout = _layout(
        "Alerts (by blamed factor), actions, incidents and rollbacks",
        height,
        yaxis=yaxis,
        xaxis=xaxis,
        shapes=lines,
    )
    return _figure(data, layout)


def add_vlines(fig: go.Figure, lines: Sequence[tuple[float, str, str]]) -> None:
    """Dashed vertical lines (step, label, colour), e.g. the collapse onset and the peak."""
    for step, label, color in lines:
        fig.add_vline(
            x=step,
            line={"dash": "dash", "color": color, "width": 1.5},
            annotation_text=label,
            annotation_position="top left",
            annotation_font={"size": 10, "color": color},
        )


def lead_figure(rows: Sequence[Mapping[str, Any]], height: int = 320) -> go.Figure:
    """Precursors as bars of lead (steps before the onset), coloured by blamed factor.

    `rows`: dicts with metric, lead, factor (None allowed), in rank order.
    """
    by_factor: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_factor.setdefault(str(r["factor"]), []).append(r)
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "x": [r["lead"] for r in rs],
            "y": [r["metric"] for r in rs],
            "name": factor,
            "marker": {"color": FACTOR_COLORS.get(factor, "#bbbbbb")},
            "hovertemplate": "%{y}: moved %{x} steps before the onset<extra></extra>",
        }
        for factor, rs in by_factor.items()
    ]
    order = [r["metric"] for r in rows][::-1]
    layout = _layout(
        "Precursors ranked by lead",
        height,
        yaxis={"categoryorder": "array", "categoryarray": order},
        xaxis={"title": {"text": "lead (steps before onset)"}},
    )
    return _figure(data, layout)
