"""The Live run page: the metric panels of one run, refreshing itself while it is live.

Sections: outcome, first-order approximation health (mismatch KL k1/k3, IS weight
tails, `approx/seq_residual`, χ² and ESS), staleness, routing (train-inference and stale
mismatch, per-layer heat maps from `routing/<pair>/layer<i>`), policy entropy,
optimisation, speed, and the stored distributions (log ρ, log r, ...) as heat maps over
steps. Every chart shades the run's episodes (dashboard/marks.py: from the first warning
to recovery, labelled with the blamed factor), and draws the actions, rollbacks and
induced incidents where they happened; info levels are a note in the header, never
shading. The header also tells the run's story (incidents, episodes, actions,
rollbacks) in words. Two fragments refresh on their own clocks while the run is live: the
status line (last step, headline numbers, story) every few seconds, the charts less often.
Sections can be switched off. Panels whose metrics the run did not log are listed, not
drawn (an imported log has few of ours). Long runs are thinned for display only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import streamlit as st

from dashboard import charts
from dashboard.data import (
    Records,
    RunEntry,
    fingerprint,
    last_values,
    load_histograms,
    load_layers,
    load_records,
    load_series,
    routing_layer_names,
    summarize,
)
from dashboard.marks import (
    action_marks,
    alert_marks,
    breakdown_spans,
    event_marks,
    health,
    incident_marks,
    info_levels,
    limit_spans,
    merge_spans,
    rollback_marks,
)
from dashboard.overlays import MARKS_LEGEND
from dashboard.settings import MAX_COLS, MAX_POINTS
from dashboard.story import story
from dashboard.ui import (
    HEALTH_BADGE,
    STATUS_BADGE,
    guard,
    one_run,
    settings,
)
from monitor.detectors.rules import CLIP_ON, MINI_BATCHES, ROLLOUT_BITS

MAX_SPANS = 60
MAX_MARKS = 400
STORY_LINES = 12


@dataclass(frozen=True)
class Panel:
    title: str
    metrics: tuple[str, ...]
    log_y: bool = False
    """Log scale when every plotted value is positive (else linear: k1 can be < 0)."""
    nonneg: bool = False
    """The metrics are ≥ 0 by definition: log scale whenever some value is positive, exact
    zeros left out of the line (a log axis cannot show them)."""


SECTIONS: dict[str, tuple[Panel, ...]] = {
    "Outcome": (
        Panel("Reward and accuracy", ("reward/mean", "reward/acc", "eval/acc")),
        Panel("Response length", ("response/len_mean", "response/len_max")),
        Panel("Truncated responses, zero-advantage groups",
              ("response/trunc_frac", "reward/zero_adv_group_frac")),
    ),
    "First-order approximation health": (
        Panel("Mismatch KL(μ_old‖π_old)", ("mismatch/kl_k1", "mismatch/kl_k3"), log_y=True),
        Panel("Rollout precision (bits of a rollout weight)", (ROLLOUT_BITS,)),
        Panel("IS weight tails (ρ = π_old/μ_old, w = ρ·r)",
              ("mismatch/ratio_max", "mismatch/ratio_p99", "mismatch/ratio_p01",
               "mismatch/ratio_min", "is/weight_max"), log_y=True),
        Panel("Higher-order residual |Πw − (1 + Σ(w − 1))|", ("approx/seq_residual",), log_y=True),
        Panel("Share truncated / outside band", ("is/trunc_frac", "mismatch/frac_outside_band")),
        Panel("IS weights: χ² (token, sequence; log scale)",
              ("mismatch/chi2_token", "mismatch/chi2_seq"), log_y=True, nonneg=True),
        Panel("IS weights: normalised ESS (1 = every token counts)", ("mismatch/ess",)),
        Panel("Gradient cosine probe (token surrogate vs sequence IS)", ("approx/grad_cosine",)),
    ),
    "Staleness": (
        Panel("Staleness ratio r = π_θ/π_old",
              ("staleness/ratio_max", "staleness/ratio_mean", "staleness/ratio_min")),
        Panel("Masked share and staleness KL", ("staleness/mask_frac", "staleness/kl_k3")),
        Panel("Mini-batches per rollout (updates from one rollout)", (MINI_BATCHES,)),
        Panel("Clipping on (1) or off (0)", (CLIP_ON,)),
    ),
    "Routing": (
        Panel("Routing mismatch (share of token×layer top-k sets differing)",
              ("routing/mismatch_train_infer", "routing/mismatch_stale",
               "routing/tokens_any_layer_diff")),
        Panel("Routing overlap and expert load", ("routing/overlap", "routing/load_cv")),
    ),
    "Policy entropy": (Panel("Entropy of π_θ (nats)", ("policy/entropy",)),),
    "Optimisation": (
        Panel("Loss", ("optim/loss",)),
        Panel("Gradient norm", ("optim/grad_norm",), log_y=True),
        Panel("Learning rate", ("optim/lr",)),
    ),
    "Speed": (
        Panel("Seconds per step", ("perf/step_s", "perf/rollout_s", "perf/train_s", "perf/diag_s")),
        Panel("Tokens per second", ("perf/tokens_per_s",)),
    ),
}  # fmt: skip
PANEL_METRICS = tuple(dict.fromkeys(m for ps in SECTIONS.values() for p in ps for m in p.metrics))
DISTRIBUTIONS = "Distributions over steps"
CHART_REFRESH_S = (2.0, 5.0, 10.0, 30.0)
CHART_REFRESH_DEFAULT_S = 5.0
"""Redrawing all ~23 charts costs a browser far more than the server (bench/results/
dashboard.md): the status line refreshes every `refresh_s`, the charts less often."""
HEADLINE = ("reward/mean", "reward/acc", "eval/acc", "mismatch/kl_k3", "policy/entropy")
"""The tiles. The mismatch KL as k3 (≥ 0, as the progress bar shows it): k1 is unbiased
but a single step's can be negative, which reads as an error on a tile."""


def distribution_order(names: Sequence[str]) -> list[str]:
    """log ρ first, then log r, then the rest (each family's names in store order)."""

    def rank(name: str) -> int:
        low = name.lower()
        if "rho" in low or "train_infer" in low or "mismatch" in low:
            return 0
        if "log_r" in low or "stale" in low:
            return 1
        return 2

    return sorted(names, key=rank)


def _all_positive(series: dict[str, tuple[np.ndarray, np.ndarray]]) -> bool:
    values = [v[np.isfinite(v)] for _, v in series.values()]
    return any(v.size for v in values) and all((v > 0).all() for v in values)


def _fmt(value: float) -> str:
    """Tile text: 4 significant digits, scientific notation outside [1e-3, 1e5) (a KL of
    3.2e-4 must not read 0.000…; two digits and a bare exponent, so that a tile six or
    seven characters wide does not cut it)."""
    if math.isnan(value):
        return "–"
    if value != 0 and not 1e-3 <= abs(value) < 1e5:
        mantissa, _, exponent = f"{value:.1e}".partition("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:.4g}"


def _log_ready(panel: Panel, sub: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[dict, bool]:
    """The panel's series and whether to draw them on a log axis."""
    if not panel.log_y:
        return sub, False
    if not panel.nonneg:
        return sub, _all_positive(sub)
    cleaned = {m: (x, np.where(y > 0, y, np.nan)) for m, (x, y) in sub.items()}
    return cleaned, any(np.isfinite(y).any() for _, y in cleaned.values())


def _header(run: RunEntry, last: dict[str, float], open_alerts: int, badge: str) -> None:
    s = run.summary
    st.markdown(
        f"### {run.name} · {STATUS_BADGE.get(s.status or '', s.status)} · "
        f"last step {s.last_step} · {badge}"
    )
    cols = st.columns(len(HEADLINE) + 2)
    for col, name in zip(cols, HEADLINE, strict=False):
        col.metric(name, _fmt(last[name]))
    cols[-2].metric("open alerts", open_alerts)
    cols[-1].metric("pending actions", s.n_pending_actions)


def _notes(rec: Records, last_step: int | None, evals: list[tuple[int, float]]) -> None:
    """Info levels as one note (never shading) and the run's story so far in words."""
    levels = info_levels(rec.alerts)
    if levels:
        st.caption("ⓘ levels (info: shown, never acted on): " + " · ".join(levels))
    lines = story(rec.alerts, rec.actions, rec.events, last_step, evals)
    if lines:
        shown = lines[-STORY_LINES:]
        more = f" (last {len(shown)} of {len(lines)})" if len(lines) > len(shown) else ""
        st.markdown(f"**What happened**{more}\n\n" + "\n".join(f"- {t}" for t in shown))


@guard
def header_body(path: str, name: str) -> None:
    """Status, last step and headline numbers: a cheap fragment, refreshed most often."""
    run = RunEntry(name, summarize(path))
    if run.summary.last_step is None:
        st.markdown(f"### {name} · {STATUS_BADGE.get(run.summary.status or '')} · no steps yet")
        st.info(f"Run {name} has no steps yet: waiting for the trainer's first step.")
        return
    fp = fingerprint(run.summary)
    rec = load_records(path, fp)
    open_alerts = [a for a in rec.alerts if a.cleared_step is None]
    badge = HEALTH_BADGE[health(open_alerts)]
    _header(run, last_values(path, HEADLINE, fp), len(open_alerts), badge)
    evals = []
    if "eval/acc" in rec.scalar_names:
        steps, values = load_series(path, ("eval/acc",), MAX_POINTS, fp)["eval/acc"]
        evals = [(int(x), float(v)) for x, v in zip(steps, values, strict=True) if v == v]
    _notes(rec, run.summary.last_step, evals)


@guard
def charts_body(
    path: str, sections: tuple[str, ...], extra: tuple[str, ...], max_points: int
) -> None:
    """The panels and heat maps of the chosen sections (a fragment of its own: drawing
    twenty charts costs the browser far more than the server)."""
    summary = summarize(path)
    if summary.last_step is None:
        return
    fp = fingerprint(summary)
    rec = load_records(path, fp)
    last_step = summary.last_step
    # episodes closer than a 500th of the run look joined on a chart anyway; then at most
    # MAX_SPANS
    spans = merge_spans(breakdown_spans(rec.alerts, last_step), gap=max(1, last_step // 500))
    spans = limit_spans(spans, MAX_SPANS)
    marks = [
        *alert_marks(rec.alerts, last_step)[-MAX_MARKS:],
        *action_marks(rec.actions, last_step)[-MAX_MARKS:],
        *rollback_marks(rec.events),
        *incident_marks(rec.events),
        *event_marks(rec.events),
    ]
    st.caption(MARKS_LEGEND)
    present = set(rec.scalar_names)
    wanted = tuple(m for m in (*PANEL_METRICS, *extra) if m in present)
    series = load_series(path, wanted, max_points, fp)

    for section, panels in SECTIONS.items():
        if section not in sections:
            continue
        drawn = [p for p in panels if any(m in present for m in p.metrics)]
        layers = routing_layer_names(rec.scalar_names) if section == "Routing" else {}
        if not drawn and not layers:
            continue
        st.subheader(section)
        cols = st.columns(2)
        i = 0
        for panel in drawn:
            sub, log_y = _log_ready(panel, {m: series[m] for m in panel.metrics if m in series})
            fig = charts.line_figure(panel.title, sub, spans=spans, marks=marks, log_y=log_y)
            cols[i % 2].plotly_chart(fig, key=f"panel-{panel.title}")
            i += 1
        for base, layer_names in layers.items():
            steps, layer_ids, z = load_layers(path, tuple(layer_names), MAX_COLS, fp)
            fig = charts.heatmap_figure(
                f"routing/{base} per layer",
                steps,
                [f"layer {i}" for i in layer_ids],
                z,
                spans=spans,
                marks=marks,
                zmin=0.0,
                colorbar_title="share differing",
            )
            cols[i % 2].plotly_chart(fig, key=f"layers-{base}")
            i += 1
        missing = [m for p in panels for m in p.metrics if m not in present]
        if missing:
            st.caption("not logged by this run: " + ", ".join(missing))

    if rec.hist_names and DISTRIBUTIONS in sections:
        st.subheader(DISTRIBUTIONS)
        cols = st.columns(2)
        for i, hname in enumerate(distribution_order(rec.hist_names)):
            h = load_histograms(path, hname, last_step, MAX_COLS, max_points, fp)
            fig = charts.distribution_figure(
                hname, h.steps, h.edges, h.counts, h.quantiles, spans=spans, marks=marks
            )
            cols[i % 2].plotly_chart(fig, key=f"dist-{hname}")
    if extra:
        st.subheader("Other metrics")
        cols = st.columns(2)
        for i, m in enumerate(extra):
            fig = charts.line_figure(m, {m: series[m]}, spans=spans, marks=marks)
            cols[i % 2].plotly_chart(fig, key=f"extra-{m}")


def render() -> None:
    s = settings()
    st.title("Live run")
    run = one_run(s, "live")
    rec = load_records(run.path, fingerprint(run.summary))
    others = sorted(set(rec.scalar_names) - set(PANEL_METRICS))
    others = [m for m in others if not m.startswith("routing/") or "/layer" not in m]
    choices = [*SECTIONS, DISTRIBUTIONS]
    # ?sections=Outcome,Routing preselects sections (a lighter page for a slow browser)
    asked = [x for x in st.query_params.get("sections", "").split(",") if x in choices]
    sections = st.pills("Sections", choices, selection_mode="multi", default=asked or choices)
    with st.expander("More metrics and display options"):
        extra = st.multiselect("Other metrics to draw", others)
        max_points = st.select_slider(
            "Points per line", [500, 1000, MAX_POINTS, 3000, 6000], value=MAX_POINTS
        )
        auto = st.toggle("Refresh while the run is live", value=True)
        floor = max(s.refresh_s, CHART_REFRESH_DEFAULT_S)
        default_every = next((e for e in CHART_REFRESH_S if e >= floor), CHART_REFRESH_S[-1])
        chart_every = st.select_slider(
            "Charts refresh every (s)", CHART_REFRESH_S, value=default_every
        )
    live = run.summary.status == "live" and auto
    if live:
        st.caption(f"status refreshed every {s.refresh_s:g} s, charts every {chart_every:g} s")
    st.fragment(header_body, run_every=s.refresh_s if live else None)(run.path, run.name)
    st.fragment(charts_body, run_every=chart_every if live else None)(
        run.path, tuple(sections), tuple(extra), int(max_points)
    )
