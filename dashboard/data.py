"""Loading a run for display: the run list, series, distributions, routing layers, records.

Everything is read through `monitor.RunReader` (read-only, safe while the trainer
writes) and thinned for display with downsample.py; the caches are keyed by the run's
fingerprint (last step, last write, alert and pending-action counts), so a refresh
re-reads only when the run moved, and a finished run is read once. Distributions of long
runs are read every k-th step (about four rows per heat-map column). A corrupt or
half-created store raises `UserError`; the pages show its message. Analysis reads the
full series itself (monitor.analysis.analyze); nothing here feeds numbers back into a store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st

from core.errors import UserError
from dashboard.downsample import bucket_columns, minmax_downsample
from monitor import RunReader, RunSummary, list_runs
from monitor.store.records import Action, Alert, Event, RunMeta

Fingerprint = tuple
ROUTING_LAYER = re.compile(r"^routing/(?P<base>[^/]+)/layer(?P<layer>\d+)$")


@dataclass(frozen=True)
class RunEntry:
    """A run of the folder, named by its directory relative to the folder."""

    name: str
    summary: RunSummary

    @property
    def path(self) -> str:
        return self.summary.path


def fingerprint(s: RunSummary) -> Fingerprint:
    """What changes when a run moves: the cache key of everything loaded from it."""
    return (s.path, s.last_step, s.last_write, s.n_alerts, s.n_pending_actions, s.status)


def find_runs(runs_dir: Path) -> list[RunEntry]:
    """Every run under `runs_dir`, newest first (unreadable stores included, with error)."""
    root = Path(runs_dir)
    out = []
    for summary in list_runs(root):  # the folder itself or its direct sub-directories
        path = Path(summary.path)
        name = root.resolve().name if path == root else path.name
        out.append(RunEntry(name, summary))
    return out


def source_label(meta: RunMeta) -> str:
    """Where a run's steps come from: "minirl" (logged in-process), "watch · tensorboard ·
    /logs/x" (followed by `minirl watch`), or "import · jsonl · /logs/x.jsonl"."""
    src = meta.source
    if src:
        return f"{src.get('kind', 'watch')} · {src.get('format', '?')} · {src.get('path', '')}"
    if "imported_from" in meta.config:
        return f"import · {meta.config.get('format', '?')} · {meta.config['imported_from']}"
    return "minirl"


def summarize(path: str) -> RunSummary:
    """The current summary of one run (re-read on every refresh)."""
    with RunReader(path) as reader:
        return reader.summary()


@dataclass(frozen=True)
class Records:
    meta: RunMeta
    scalar_names: tuple[str, ...]
    hist_names: tuple[str, ...]
    alerts: tuple[Alert, ...]
    actions: tuple[Action, ...]
    events: tuple[Event, ...]


@st.cache_data(max_entries=64, show_spinner=False)
def load_records(path: str, fingerprint: Fingerprint) -> Records:
    """Metadata, metric names, alerts, actions and events of one run."""
    with RunReader(path) as reader, reader.snapshot():
        return Records(
            meta=reader.meta(),
            scalar_names=tuple(reader.metric_names("scalar")),
            hist_names=tuple(reader.metric_names("histogram")),
            alerts=tuple(reader.alerts()),
            actions=tuple(reader.actions()),
            events=tuple(reader.events()),
        )


@st.cache_data(max_entries=256, show_spinner=False)
def load_series(
    path: str, names: tuple[str, ...], max_points: int, fingerprint: Fingerprint
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (steps, values)} thinned to ~max_points by min/max buckets (display only)."""
    with RunReader(path) as reader:
        full = reader.scalars(names)
    return {name: minmax_downsample(s, v, max_points) for name, (s, v) in full.items()}


@st.cache_data(max_entries=64, show_spinner=False)
def last_values(path: str, names: tuple[str, ...], fingerprint: Fingerprint) -> dict[str, float]:
    """The last finite value of each metric (held-out accuracy is logged only now and then)."""
    with RunReader(path) as reader:
        full = reader.scalars(names)
    out = {}
    for name, (_, v) in full.items():
        finite = v[np.isfinite(v)]
        out[name] = float(finite[-1]) if finite.size else float("nan")
    return out


@dataclass(frozen=True)
class DisplayHistograms:
    name: str
    steps: np.ndarray  # [S'] first step of each bucket of steps
    edges: np.ndarray  # [bins + 1]
    counts: np.ndarray  # [S', bins + 2] summed over each bucket
    quantiles: dict[str, tuple[np.ndarray, np.ndarray]]  # exact per-step p01/p50/p99


ROWS_PER_COL = 4
"""Long runs: histogram rows read per heat-map column (every k-th step, see below)."""


def histogram_stride(last_step: int, max_cols: int) -> int | None:
    """Read every k-th step's histogram once a run has more than ROWS_PER_COL rows per
    column: a 100k-step distribution is 1.7 s to read in full, 0.07 s thinned."""
    k = (last_step + 1) // (ROWS_PER_COL * max_cols)
    return k if k > 1 else None


@st.cache_data(max_entries=64, show_spinner=False)
def load_histograms(
    path: str, name: str, last_step: int, max_cols: int, max_points: int, fingerprint: Fingerprint
) -> DisplayHistograms:
    """Per-step histograms bucketed to ≤ max_cols columns (summing the counts of the steps
    read); exact quantile lines min/max-thinned. Long runs are read every k-th step."""
    every = histogram_stride(last_step, max_cols)
    with RunReader(path) as reader:
        h = reader.histograms(name, every=every)
        if every and len(h.steps) < max_cols // 4:  # logged on steps the stride misses
            h = reader.histograms(name)
    if h.counts.size == 0:
        raise UserError(f"distribution {name} has no rows yet")
    steps, summed = bucket_columns(h.steps, h.counts.T.astype(np.float64), max_cols, "sum")
    quantiles = {
        q: minmax_downsample(h.steps, h.quantiles[q], max_points) for q in ("p01", "p50", "p99")
    }
    return DisplayHistograms(name, steps, h.edges, summed.T, quantiles)


def routing_layer_names(scalar_names: tuple[str, ...]) -> dict[str, list[tuple[int, str]]]:
    """{'mismatch_train_infer': [(0, 'routing/mismatch_train_infer/layer0'), ...], ...}."""
    out: dict[str, list[tuple[int, str]]] = {}
    for name in scalar_names:
        m = ROUTING_LAYER.match(name)
        if m:
            out.setdefault(m["base"], []).append((int(m["layer"]), name))
    return {base: sorted(layers) for base, layers in sorted(out.items())}


@st.cache_data(max_entries=64, show_spinner=False)
def load_layers(
    path: str, layer_names: tuple[tuple[int, str], ...], max_cols: int, fingerprint: Fingerprint
) -> tuple[np.ndarray, list[int], np.ndarray]:
    """(steps, layers, z [layers, steps]) of per-layer routing shares, bucketed by max."""
    with RunReader(path) as reader:
        full = reader.scalars([n for _, n in layer_names])
    steps = np.unique(np.concatenate([full[n][0] for _, n in layer_names]))
    z = np.full((len(layer_names), len(steps)), np.nan)
    for row, (_, name) in enumerate(layer_names):
        s, v = full[name]
        z[row, np.searchsorted(steps, s)] = v
    steps, z = bucket_columns(steps, z, max_cols, "max")
    return steps, [layer for layer, _ in layer_names], z
