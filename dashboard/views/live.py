"""Streamlit page script for st.navigation; the page itself is dashboard/live_page.py."""

from dashboard.live_page import render
from dashboard.ui import guarded

guarded(render)
