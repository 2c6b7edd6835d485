"""Streamlit page script for st.navigation (views/, not pages/: Streamlit would
auto-register a pages/ folder); the page itself is dashboard/live_page.py."""

from dashboard.live_page import render
from dashboard.ui import guarded

guarded(render)
