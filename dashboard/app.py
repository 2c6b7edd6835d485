"""The minirl dashboard: a Streamlit app over a folder of runs (`minirl dashboard RUNS_DIR`).

Four pages: Runs (every run, status, health), Live run (the metric panels of one run,
refreshing itself), Alerts and actions (timeline, operator requests), Analysis (collapse
onset and precursors, runs overlaid, log import). Reads and writes only through
`monitor`; never imports torch or the trainer. Served by serve.py, which passes the
runs folder, bound address and operator token through environment variables.
"""

# Imported before any page runs: plotly imports pandas lazily, and two sessions doing it
# at once in their script threads can see a half-initialised module (seen on this machine).
import pandas  # noqa: F401
import plotly.graph_objects  # noqa: F401
import streamlit as st

from dashboard.settings import is_loopback
from dashboard.ui import PAGES, settings

st.set_page_config(page_title="minirl dashboard", page_icon=":material/monitoring:", layout="wide")

nav = st.navigation(
    [
        st.Page(PAGES["runs"], title="Runs", icon=":material/list:", url_path="runs", default=True),
        st.Page(PAGES["live"], title="Live run", icon=":material/monitoring:", url_path="live"),
        st.Page(
            PAGES["alerts"],
            title="Alerts and actions",
            icon=":material/notifications:",
            url_path="alerts",
        ),
        st.Page(
            PAGES["analysis"], title="Analysis", icon=":material/troubleshoot:", url_path="analysis"
        ),
    ]
)
s = settings()
with st.sidebar:
    st.caption(f"runs folder: `{s.runs_dir}`")
    if is_loopback(s.host):
        st.caption(f"bound to {s.host}: operator actions allowed")
    elif s.token:
        st.caption(f"exposed on {s.host or 'every interface'}: actions need the token")
    else:
        st.caption(f"exposed on {s.host or 'every interface'} without a token: actions refused")
nav.run()
