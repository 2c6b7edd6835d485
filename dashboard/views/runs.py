"""Streamlit page script for st.navigation; the page itself is dashboard/runs_page.py."""

from dashboard.runs_page import render
from dashboard.ui import guarded

guarded(render)
