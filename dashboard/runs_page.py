"""The Runs page: every run of the folder with status, last step, outcome and health.

Health comes from the alerts still open (critical > warning > healthy); reward and
held-out accuracy are each metric's last finite value (eval/acc is logged only every
few steps). An unreadable store gets a row saying why instead of breaking the list.
The table refreshes itself while any run is live. This page does not write anything.
"""

from __future__ import annotations

import datetime as dt
import math

import streamlit as st

from core.errors import UserError
from dashboard.data import RunEntry, fingerprint, last_values, load_records, source_label
from dashboard.marks import health
from dashboard.ui import HEALTH_BADGE, STATUS_BADGE, guard, links, runs_or_stop, settings

OUTCOME = ("reward/mean", "reward/acc", "eval/acc")


def _fmt(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3f}"


def _row(run: RunEntry) -> dict[str, object]:
    s = run.summary
    row: dict[str, object] = {"run": run.name}
    if s.error:
        return {**row, "status": "⚠️ unreadable", "health": "–", "detail": s.error}
    try:
        fp = fingerprint(s)
        last = last_values(s.path, OUTCOME, fp)
        records = load_records(s.path, fp)
    except UserError as err:  # e.g. the store was replaced between list and read
        return {**row, "status": "⚠️ unreadable", "health": "–", "detail": str(err)}
    open_alerts = [a for a in records.alerts if a.cleared_step is None]
    started = dt.datetime.fromtimestamp(s.created_at).strftime("%Y-%m-%d %H:%M")
    return {
        **row,
        "status": STATUS_BADGE.get(s.status or "", str(s.status)),
        "last step": "–" if s.last_step is None else str(s.last_step),
        "reward": _fmt(last["reward/mean"]),
        "train acc": _fmt(last["reward/acc"]),
        "held-out acc": _fmt(last["eval/acc"]),
        "health": HEALTH_BADGE[health(open_alerts)],
        "alerts": s.n_alerts,
        "pending actions": s.n_pending_actions,
        "started": started,
        "source": source_label(records.meta),
        "detail": "",
    }


@guard
def _table() -> None:
    s = settings()
    runs = runs_or_stop(s)
    st.dataframe([_row(r) for r in runs], hide_index=True, width="stretch")
    st.caption(f"{len(runs)} run(s) · {sum(r.summary.status == 'live' for r in runs)} live")
    for run in runs:
        if run.summary.error:
            st.warning(f"**{run.name}**: {run.summary.error}")
            continue
        st.markdown(f"**{run.name}** · last step {run.summary.last_step}")
        links(run.name)


def render() -> None:
    s = settings()
    st.title("Runs")
    st.caption(f"folder `{s.runs_dir}` · refreshed every {s.refresh_s:g} s while a run is live")
    any_live = s.runs_dir.is_dir() and any(r.summary.status == "live" for r in runs_or_stop(s))
    st.fragment(_table, run_every=s.refresh_s if any_live else None)()
