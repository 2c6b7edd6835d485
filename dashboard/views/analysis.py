"""Streamlit page script for st.navigation (views/, not pages/: Streamlit would
auto-register a pages/ folder); the page itself is dashboard/analysis_page.py."""

from dashboard.analysis_page import render
from dashboard.ui import guarded

guarded(render)
