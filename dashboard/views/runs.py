"""Streamlit page script for st.navigation (views/, not pages/: Streamlit would
auto-register a pages/ folder); the page itself is dashboard/runs_page.py."""

from dashboard.runs_page import render
from dashboard.ui import guarded

guarded(render)
