"""Streamlit page script for st.navigation; the page itself is dashboard/alerts_page.py."""

from dashboard.alerts_page import render
from dashboard.ui import guarded

guarded(render)
