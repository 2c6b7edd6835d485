"""The Analysis page: a run taken apart, several runs side by side, a foreign log imported.

1. Collapse analysis: `monitor.analysis.analyze.analyze_run` (its definitions of outcome, onset,
   precursor and first broken factor are the monitor's, not re-derived here), shown as
   the outcome curve with peak and onset, precursors ranked by lead, and the first
   precursors' own curves.
2. Compare: one or more metrics of several runs overlaid on the same step axis (e.g. the
   paper's recipes side by side).
3. Import: a JSONL/CSV/TensorBoard log uploaded and written as a new run of the folder by
   the monitor's own importer (`minirl import`), under the same write permission as
   operator actions.
Analysis reads full series; only the drawings are thinned.
"""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from core.errors import UserError
from dashboard import charts
from dashboard.data import RunEntry, fingerprint, load_records, load_series
from dashboard.downsample import minmax_downsample
from dashboard.settings import MAX_POINTS
from dashboard.ui import guard, links, operator_permission, pick_run, runs_or_stop, settings
from monitor.analysis.analyze import analyze_run
from monitor.importers import FORMATS
from monitor.store.schema import STORE_FILE, runs_below

N_PRECURSOR_CHARTS = 4
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class AnalysisView:
    """What the page draws from an `Analysis` (the raw series are dropped)."""

    result: dict[str, Any]
    """Analysis.to_dict(): onset, precursors, first_factor, notes, ..."""
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Outcome and the first precursors, thinned for display."""


@st.cache_data(max_entries=16, show_spinner="analysing the run…")
def analysis_view(path: str, fp: tuple) -> AnalysisView:
    a = analyze_run(path)
    keep = [a.outcome] if a.outcome else []
    keep += [p.metric for p in a.precursors[:N_PRECURSOR_CHARTS]]
    series = {m: minmax_downsample(*a.series[m], MAX_POINTS) for m in keep if m in a.series}
    return AnalysisView(a.to_dict(), series)


def _num(value: float | str) -> str:
    """A table cell: to_dict() already turned inf/nan into strings; format the rest."""
    return value if isinstance(value, str) else f"{value:.4g}"


def _analysis_tab(run: RunEntry) -> None:
    if run.summary.error:
        st.error(f"Run {run.name} cannot be read: {run.summary.error}")
        return
    view = analysis_view(run.path, fingerprint(run.summary))
    r = view.result
    onset = r["onset"]
    cols = st.columns(5)
    cols[0].metric("outcome metric", r["outcome"] or "–")
    fell = onset["step"] if onset else r["diverged"]  # a divergence is a collapse too
    cols[1].metric("collapsed", "yes" if onset else "no" if fell is None else "diverged")
    cols[2].metric("onset step", "–" if fell is None else fell)
    cols[3].metric("share of gain lost", f"{onset['drop']:.0%}" if onset else "–")
    cols[4].metric("factor that broke first", r["first_factor"] or "–")
    for note in r["notes"]:
        st.info(note)
    if r["outcome"] in view.series:
        fig = charts.line_figure(
            f"{r['outcome']} (outcome)", {r["outcome"]: view.series[r["outcome"]]}
        )
        if onset:
            peak = (onset["peak_step"], f"peak {onset['peak']:.3g}", "#2ca02c")
            start = (onset["step"], f"onset (step {onset['step']})", "#d0021b")
            charts.add_vlines(fig, [peak, start])
        if r["baseline_end"] is not None:
            ends = [(r["baseline_start"], "baseline start"), (r["baseline_end"], "baseline end")]
            charts.add_vlines(fig, [(step, name, "#7f7f7f") for step, name in ends])
        st.plotly_chart(fig, key="outcome")
    precursors = r["precursors"]
    if not precursors:
        if onset:
            st.caption("no metric moved persistently before the onset")
        return
    st.markdown("#### Precursors (moved before the onset, ranked by lead)")
    table = [
        {
            "metric": p["metric"],
            "factor": p["factor"],
            "moved at step": p["moved_step"],
            "lead (steps)": p["lead"],
            "direction": p["direction"],
            "|z|": _num(p["z"]),
            "baseline": _num(p["baseline"]),
            "value": _num(p["value"]),
            "log scale": p["log_scale"],
        }
        for p in precursors
    ]
    st.dataframe(table, hide_index=True, width="stretch")
    bars = [{"metric": p["metric"], "lead": p["lead"], "factor": p["factor"]} for p in precursors]
    st.plotly_chart(charts.lead_figure(bars[:20]), key="leads")
    cols = st.columns(2)
    for i, p in enumerate(precursors[:N_PRECURSOR_CHARTS]):
        if p["metric"] not in view.series:
            continue
        fig = charts.line_figure(
            f"{p['metric']} ({p['factor']}, lead {p['lead']})",
            {p["metric"]: view.series[p["metric"]]},
            height=240,
        )
        charts.add_vlines(
            fig, [(p["moved_step"], "moved", "#f5a623"), (onset["step"], "onset", "#d0021b")]
        )
        cols[i % 2].plotly_chart(fig, key=f"precursor-{p['metric']}")


def _compare_tab(runs: list[RunEntry]) -> None:
    readable = [r for r in runs if not r.summary.error and r.summary.last_step is not None]
    if not readable:
        st.info("no run with steps to compare yet")
        return
    names = [r.name for r in readable]
    chosen = st.multiselect("Runs", names, default=names[: min(4, len(names))])
    picked = [r for r in readable if r.name in chosen]
    metrics = sorted(
        {m for r in picked for m in load_records(r.path, fingerprint(r.summary)).scalar_names}
    )
    default = [m for m in ("reward/mean", "mismatch/kl_k1") if m in metrics] or metrics[:1]
    wanted = st.multiselect("Metrics", metrics, default=default)
    log_y = st.checkbox("log scale", value=False)
    for metric in wanted:
        overlay = {}
        for r in picked:
            s = load_series(r.path, (metric,), MAX_POINTS, fingerprint(r.summary))[metric]
            if len(s[0]):
                overlay[r.name] = s
        st.plotly_chart(charts.overlay_figure(metric, overlay, log_y=log_y), key=f"cmp-{metric}")


def _import_tab() -> None:
    s = settings()
    st.caption(
        "A JSONL or CSV export, or a TensorBoard event file, written as a new run of this "
        "folder by `minirl import` (peers' metric names mapped onto ours)."
    )
    allowed, why = operator_permission(s, key="token-import")
    if not allowed:
        st.warning(why.replace("operator actions", "imports"))
    upload = st.file_uploader("Log file")
    fmt = st.selectbox("Format", ["from the file name", *FORMATS])
    default_name = Path(upload.name).stem.split(".")[0] if upload is not None else ""
    name = st.text_input("New run name", value=re.sub(r"[^A-Za-z0-9._-]", "_", default_name))
    if not st.button("Import", disabled=not allowed or upload is None):
        return
    if not allowed:
        st.error(why)
        return
    if not RUN_NAME.match(name):
        st.error(f"run name {name!r}: use letters, digits, '.', '_' or '-' (≤ 64 characters)")
        return
    out = s.runs_dir / name
    if out.exists():
        st.error(f"{out} already exists: choose another run name")
        return
    st.session_state["import_result"] = _run_import(upload.name, upload.getvalue(), fmt, out)


def _run_import(filename: str, data: bytes, fmt: str, out: Path) -> tuple[bool, str]:
    """Write the upload to a temp file and run the monitor's importer on it."""
    from monitor.cli.import_logs import main as import_main

    with tempfile.TemporaryDirectory(prefix="minirl-import-") as tmp:
        # the browser's file name made safe as one file name (its suffix tells the format)
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", Path(filename).name)[-100:].lstrip(".")
        src = Path(tmp) / (safe or "upload")
        src.write_bytes(data)
        argv = [str(src), "--out", str(out)]
        if fmt in FORMATS:
            argv += ["--format", fmt]
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                import_main(argv)
        except UserError as err:
            return False, f"not imported: {err}"
        except SystemExit as err:  # argparse refusing an argument
            return False, f"not imported: bad arguments ({err})"
    said = buf.getvalue().strip()
    if out.is_dir() and not (out / STORE_FILE).exists():  # several runs: a folder of stores
        moved, kept = _beside(out)
        said += "\nlisted here as " + (", ".join(moved) or "none")
        if kept:
            said += f"; left in {out} (the name beside it was taken): " + ", ".join(kept)
    return True, said


def _beside(folder: Path) -> tuple[list[str], list[str]]:
    """Move the run stores of `folder` (an upload of several runs) next to it as
    "<folder>-<run>", where the run list shows them; (moved, kept in `folder`)."""
    moved, kept = [], []
    for run in runs_below(folder):
        target = folder.parent / f"{folder.name}-{run.name}"
        if target.exists():
            kept.append(run.name)
        else:
            run.rename(target)
            moved.append(target.name)
    if not kept:
        with contextlib.suppress(OSError):
            folder.rmdir()
    return moved, kept


def render() -> None:
    s = settings()
    st.title("Analysis")
    tabs = st.tabs(["Collapse analysis", "Compare runs", "Import a log"])
    with tabs[2]:
        guard(_import_tab)()
        ok_msg = st.session_state.pop("import_result", None)
        if ok_msg:
            (st.success if ok_msg[0] else st.error)(ok_msg[1])
    if not s.runs_dir.is_dir():
        st.error(f"The runs folder {s.runs_dir} does not exist.")
        return
    with tabs[0]:
        runs = runs_or_stop(s)
        run = pick_run(runs)
        links(run.name, exclude="analysis")
        guard(_analysis_tab)(run)
    with tabs[1]:
        guard(_compare_tab)(runs)
