"""Thinning a long series for plotting: every N-th step, or N-step buckets reduced.

`RunReader.scalars(every=N, agg=...)` calls it; a 'max' (or 'min') view keeps the spikes
that sampling every N-th step would skip, which is what a chart of a collapse needs.
"""

from __future__ import annotations

import numpy as np


def thin(
    steps: np.ndarray, values: np.ndarray, every: int | None, agg: str
) -> tuple[np.ndarray, np.ndarray]:
    """Every `every`-th step ('sample') or per-bucket mean/min/max ignoring NaN."""
    if every is None or every == 1 or steps.size == 0:
        return steps, values
    if agg == "sample":
        keep = steps % every == 0
        return steps[keep], values[keep]
    buckets = (steps // every) * every
    first = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    finite_or_inf = ~np.isnan(values)
    if agg == "mean":
        sums = np.add.reduceat(np.where(finite_or_inf, values, 0.0), first)
        counts = np.add.reduceat(finite_or_inf.astype(np.int64), first)
        with np.errstate(invalid="ignore", divide="ignore"):
            reduced = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    else:
        reduced = (np.fmax if agg == "max" else np.fmin).reduceat(values, first)
    return buckets[first], reduced
