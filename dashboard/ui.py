"""Streamlit plumbing shared by the pages: settings, error boundary, run picker, badges.

Every page body runs inside `guarded`, which turns the monitor's `UserError` (missing
folder, corrupt or half-created store) into one clear message instead of a traceback.
The run a page shows travels in the `run` query parameter, so links into a run work and
the URL can be shared (it never carries the operator token).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import ParamSpec

import streamlit as st

from core.errors import UserError
from dashboard.data import RunEntry, find_runs
from dashboard.settings import Settings, is_loopback, settings_from_env, write_permission

# plain symbols (no emoji): they render with the fonts of a bare Debian too
STATUS_BADGE = {"live": "● live", "finished": "○ finished", "crashed": "✕ crashed"}
HEALTH_BADGE = {"healthy": "✓ healthy", "warning": "▲ warning", "critical": "✕ critical"}
P = ParamSpec("P")
PAGES = {
    "runs": "views/runs.py",
    "live": "views/live.py",
    "alerts": "views/alerts.py",
    "analysis": "views/analysis.py",
}


def settings() -> Settings:
    return settings_from_env()


def guard(body: Callable[P, None]) -> Callable[P, None]:
    """`body` with a user-caused error shown as one st.error line instead of a traceback.

    Also for fragment bodies: a fragment's timed re-run calls only the fragment.
    """

    @functools.wraps(body)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            body(*args, **kwargs)
        except UserError as err:
            st.error(str(err))
        except sqlite3.DatabaseError as err:  # defensive: the reader wraps these already
            st.error(f"the run store could not be read: {err}")

    return wrapper


def guarded(body: Callable[[], None]) -> None:
    """Run a page body under `guard`."""
    guard(body)()


def runs_or_stop(s: Settings) -> list[RunEntry]:
    """The runs of the folder, or a clear message (and the page stops) if there are none."""
    if not s.runs_dir.is_dir():
        st.error(f"The runs folder {s.runs_dir} does not exist.")
        st.stop()
    runs = find_runs(s.runs_dir)
    if not runs:
        st.info(
            f"No runs in {s.runs_dir} yet. Start one with `minirl demo` or "
            f"`minirl train CONFIG --run-dir {s.runs_dir}/NAME`, or import a log on the "
            "Analysis page."
        )
        st.stop()
    return runs


def pick_run(runs: list[RunEntry]) -> RunEntry:
    """A run selector that follows (and sets) the `run` query parameter."""
    names = [r.name for r in runs]
    wanted = st.query_params.get("run")
    if wanted in names:
        index = names.index(wanted)
    else:  # default: the newest live run, else the newest run
        live = [i for i, r in enumerate(runs) if r.summary.status == "live"]
        index = live[0] if live else 0
    chosen = st.selectbox("Run", names, index=index)
    if st.query_params.get("run") != chosen:
        st.query_params["run"] = chosen
    return runs[names.index(chosen)]


def require_readable(run: RunEntry) -> None:
    """Stop the page with the store's error if it cannot be read."""
    if run.summary.error:
        st.error(f"Run {run.name} cannot be read: {run.summary.error}")
        st.stop()


def one_run(s: Settings, page: str) -> RunEntry:
    """The run a one-run page shows: picked (from the `run` query parameter), readable
    (else the page stops with the store's error), with links to its other pages."""
    run = pick_run(runs_or_stop(s))
    require_readable(run)
    links(run.name, exclude=page)
    return run


def operator_permission(s: Settings, key: str) -> tuple[bool, str]:
    """Ask for the token when the app is exposed; return (allowed, why)."""
    entered = None
    if not is_loopback(s.host) and s.token:
        entered = st.text_input("Operator token", type="password", key=key)
    return write_permission(s.host, s.token, entered)


def links(run_name: str, exclude: str = "") -> None:
    """Links into the other pages for one run."""
    cols = st.columns(3)
    targets = [("live", "Live view"), ("alerts", "Alerts and actions"), ("analysis", "Analysis")]
    for col, (page, label) in zip(cols, [t for t in targets if t[0] != exclude], strict=False):
        col.page_link(PAGES[page], label=f"{label} ›", query_params={"run": run_name})
