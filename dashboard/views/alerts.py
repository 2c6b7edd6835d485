"""Streamlit page script for st.navigation (views/, not pages/: Streamlit would
auto-register a pages/ folder); the page itself is dashboard/alerts_page.py."""

from dashboard.alerts_page import render
from dashboard.ui import guarded

guarded(render)
