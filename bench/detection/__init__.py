"""The detection benchmark: labelled runs (corpus), both monitors replayed, scores, report."""
