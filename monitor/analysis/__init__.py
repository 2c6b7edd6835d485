"""Post-hoc analysis of a stored run: collapse onset, precursors, the report and the
sentences that describe events (`minirl analyze`, the dashboard's story)."""
