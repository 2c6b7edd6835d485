"""dashboard: the Streamlit + Plotly app over a folder of runs (`minirl dashboard`).

Reads and writes only through `monitor` (never torch, `trainer` or `minirl`). Entry
points: `dashboard.serve.start_dashboard` / `dashboard_url` / `wait_until_ready` (used by
`minirl demo`) and `dashboard.serve.main` (the CLI). The pages live in `*_page.py`; the
pure parts (thinning, marks, figures, the write-permission rule) are testable alone.
"""
