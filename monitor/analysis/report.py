"""The self-contained HTML report of `minirl analyze --html`: Plotly charts plus tables.

plotly.js is inlined once (the first chart), so the file opens offline, from disk, and
can be mailed. Charts: the outcome with its smoothing, peak and onset and the alerts on
it; each precursor with its baseline window, the step it moved and the onset; the IS
decomposition's metrics as fold change over their baselines. This module renders an
`Analysis`; it computes nothing the analysis did not.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

import numpy as np

from monitor.analysis.analyze import Analysis
from monitor.analysis.collapse import running_median, smoothing_width
from monitor.analysis.event_text import event_text

MAX_POINTS = 5000
MAX_PRECURSOR_CHARTS = 8
FACTOR_METRICS = (
    "mismatch/kl_k1",
    "mismatch/chi2_token",
    "staleness/kl_k3",
    "staleness/mask_frac",
    "routing/mismatch_train_infer",
    "routing/mismatch_stale",
    "approx/seq_residual",
    "is/weight_max",
)
_SEVERITY_COLOR = {"info": "#4c78a8", "warning": "#f58518", "critical": "#e45756"}


def _thin(steps: np.ndarray, values: np.ndarray) -> tuple[list, list]:
    stride = max(1, len(steps) // MAX_POINTS)
    s, v = steps[::stride], values[::stride]
    return s.tolist(), [x if math.isfinite(x) else None for x in v.tolist()]


def _vline(fig: Any, step: int | None, color: str, text: str, **where: Any) -> None:
    if step is not None:
        fig.add_vline(x=step, line_dash="dash", line_color=color, annotation_text=text, **where)


def _outcome_figure(a: Analysis) -> Any:
    import plotly.graph_objects as go

    steps, values = a.series[a.outcome]
    fig = go.Figure()
    xs, ys = _thin(steps, values)
    fig.add_scatter(x=xs, y=ys, name=a.outcome, line={"color": "#9ecae9", "width": 1})
    ok = np.isfinite(values)
    smooth = running_median(values[ok], smoothing_width(int(ok.sum())))
    xs, ys = _thin(steps[ok], smooth)
    fig.add_scatter(x=xs, y=ys, name="running median", line={"color": "#1f77b4", "width": 2.5})
    if a.onset is not None:
        fig.add_scatter(
            x=[a.onset.peak_step],
            y=[a.onset.peak],
            mode="markers",
            name="peak",
            marker={"size": 10, "color": "#2ca02c"},
        )
        _vline(fig, a.onset.step, "#d62728", f"onset {a.onset.step}")
    if a.alerts:
        top = float(np.nanmax(values[ok])) if ok.any() else 1.0
        fig.add_scatter(
            x=[al["step"] for al in a.alerts],
            y=[top] * len(a.alerts),
            mode="markers",
            name="alerts",
            marker={
                "symbol": "triangle-down",
                "size": 9,
                "color": [_SEVERITY_COLOR[al["severity"]] for al in a.alerts],
            },
            text=[f"{al['severity']} {al['detector']}: {al['message']}" for al in a.alerts],
            hoverinfo="text+x",
        )
    fig.update_layout(title=f"Outcome: {a.outcome}", xaxis_title="step", height=380)
    return fig


def _precursor_figure(a: Analysis) -> Any:
    from plotly.subplots import make_subplots

    shown = a.precursors[:MAX_PRECURSOR_CHARTS]
    fig = make_subplots(
        rows=len(shown),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.25 / len(shown),
        subplot_titles=[f"{p.metric} — moved {p.lead} steps before the onset" for p in shown],
    )
    for row, p in enumerate(shown, start=1):
        xs, ys = _thin(*a.series[p.metric])
        fig.add_scatter(x=xs, y=ys, name=p.metric, row=row, col=1, showlegend=False)
        if a.baseline_start is not None and a.baseline_end is not None:
            fig.add_vrect(
                x0=a.baseline_start,
                x1=a.baseline_end,
                fillcolor="#bbbbbb",
                opacity=0.2,
                line_width=0,
                row=row,
                col=1,
            )
        fig.add_vline(x=p.moved_step, line_dash="dot", line_color="#ff7f0e", row=row, col=1)
        fig.add_vline(x=a.collapse_step, line_dash="dash", line_color="#d62728", row=row, col=1)
        if p.log_scale:
            fig.update_yaxes(type="log", row=row, col=1)
    fig.update_layout(
        title="Precursors (grey: baseline; orange: moved; red: onset)",
        height=max(320, 220 * len(shown)),
    )
    return fig


def _factor_figure(a: Analysis) -> Any | None:
    import plotly.graph_objects as go

    start = a.baseline_start if a.baseline_start is not None else -math.inf
    end = a.baseline_end if a.baseline_end is not None else math.inf
    fig = go.Figure()
    for name in FACTOR_METRICS:
        if name not in a.series or not len(a.series[name][0]):
            continue
        steps, values = a.series[name]
        base_vals = values[np.isfinite(values) & (steps >= start) & (steps < end)]
        base = float(np.median(base_vals)) if len(base_vals) else float("nan")
        if not math.isfinite(base) or base <= 0:
            continue
        xs, ys = _thin(steps, values / base)
        fig.add_scatter(x=xs, y=ys, name=name)
    if not fig.data:
        return None
    if a.onset is not None:
        _vline(fig, a.onset.step, "#d62728", "onset")
    fig.update_yaxes(type="log", title="× baseline median")
    fig.update_layout(title="IS decomposition: each factor over its baseline", height=380)
    return fig


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "<p><em>none</em></p>"

    def cell(value: Any) -> str:
        if value is None:
            value = "—"
        elif isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, dict | list):
            value = json.dumps(value)
        return f"<td>{html.escape(str(value))}</td>"

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(cell(r.get(c, "")) for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.verdict { font-size: 1.2em; margin: 0.5em 0 1em; }
"""


def render_html(a: Analysis) -> str:
    """The whole report as one HTML document."""
    import plotly.io as pio

    figures = []
    if a.outcome is not None:
        figures.append(_outcome_figure(a))
    if a.precursors and a.collapse_step is not None:
        figures.append(_precursor_figure(a))
    factor = _factor_figure(a)
    if factor is not None:
        figures.append(factor)
    charts = [
        pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0), default_width="100%")
        for i, fig in enumerate(figures)
    ]
    if a.onset is not None:
        o = a.onset
        verdict = (
            f"Collapse: {o.metric} fell from {o.peak:.4g} (step {o.peak_step}) to {o.final:.4g} "
            f"({o.drop:.0%} of its gain lost); onset at step {o.step}."
        )
        if a.first_factor:
            verdict += f" First factor of the IS weight to break: {a.first_factor}."
    elif a.diverged is not None:
        verdict = (
            f"Diverged: the loss or the gradient norm is non-finite from step {a.diverged} "
            "to the end."
        )
    else:
        verdict = "No collapse found. " + " ".join(a.notes)
    if a.recovery is not None:
        r = a.recovery
        state = "Recovered" if r["recovered"] else "Not recovered"
        verdict += f" {state} at step {r['step']}: held-out accuracy {r['why']}."
    precursors = [vars(p) for p in a.precursors]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>minirl analyze — {html.escape(a.run)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Run {html.escape(a.run)}</h1>",
        f"<p>run id {html.escape(a.run_id)}, steps {a.first_step}–{a.last_step}</p>",
        f"<p class='verdict'>{html.escape(verdict)}</p>",
        *charts,
        "<h2>Precursors, earliest first</h2>",
        _table(
            precursors,
            ["metric", "factor", "moved_step", "lead", "direction", "z", "baseline", "value"],
        ),
        "<h2>Alerts</h2>",
        _table(
            a.alerts,
            [
                "step",
                "severity",
                "detector",
                "metric",
                "value",
                "baseline",
                "factor",
                "message",
                "remedy",
                "cleared_step",
            ],
        ),
        "<h2>Actions</h2>",
        _table(a.actions, ["id", "step", "kind", "params", "source", "status", "reason", "detail"]),
        "<h2>Events</h2>",
        _table(
            [{**e, "what": event_text(e["kind"], e["detail"])} for e in a.events],
            ["step", "kind", "what", "detail"],
        ),
        "<h2>Notes</h2>",
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in a.notes) + "</ul>",
        "</body></html>",
    ]
    return "\n".join(parts)
