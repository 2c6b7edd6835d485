"""Thinning long series for display: min/max buckets for lines, bucket reductions for heat maps.

A 100k-step run has 100k points per metric; a browser chart needs a few thousand. Each
bucket of consecutive points keeps its minimum and its maximum (in step order), plus the
first and last point of the series, so spikes and crashes survive thinning and the
global extremes are always drawn. Heat-map columns are reduced per bucket (sum for
histogram counts, max for per-layer routing shares).

Display only: analysis (monitor/analysis/) always reads the full series. No I/O here.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def _bucket_bounds(n: int, n_buckets: int) -> np.ndarray:
    """Start indices of `n_buckets` contiguous, near-equal buckets over n points (+ end)."""
    return np.linspace(0, n, n_buckets + 1).round().astype(np.int64)


def minmax_downsample(
    x: np.ndarray, y: np.ndarray, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """At most ~`max_points` points of (x, y), keeping each bucket's min and max.

    NaN is ignored when choosing extremes; a bucket of NaN only keeps one NaN point, so
    gaps stay visible. Series already short enough are returned unchanged.
    """
    x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
    n = len(y)
    if max_points < 4:
        raise ValueError(f"max_points must be ≥ 4, got {max_points}")
    if n <= max_points:
        return x, y
    n_buckets = (max_points - 2) // 2
    bounds = _bucket_bounds(n, n_buckets)
    nan = np.isnan(y)
    lo_key = np.where(nan, np.inf, y)
    hi_key = np.where(nan, -np.inf, y)
    # reduceat gives the bucket extreme; the first index reaching it is the point kept
    starts = bounds[:-1]
    bucket_min = np.minimum.reduceat(lo_key, starts)
    bucket_max = np.maximum.reduceat(hi_key, starts)
    bucket_of = np.repeat(np.arange(n_buckets), np.diff(bounds))
    is_min = lo_key == bucket_min[bucket_of]
    is_max = hi_key == bucket_max[bucket_of]
    first_min = _first_true_per_bucket(is_min, bucket_of, n_buckets, starts)
    first_max = _first_true_per_bucket(is_max, bucket_of, n_buckets, starts)
    keep = np.unique(np.concatenate([[0, n - 1], first_min, first_max]))
    return x[keep], y[keep]


def _first_true_per_bucket(
    flags: np.ndarray, bucket_of: np.ndarray, n_buckets: int, starts: np.ndarray
) -> np.ndarray:
    """Index of the first True in each bucket (the bucket start if there is none)."""
    idx = np.flatnonzero(flags)  # ascending, so bucket_of[idx] is sorted too
    if idx.size == 0:
        return starts
    buckets = bucket_of[idx]
    pos = np.searchsorted(buckets, np.arange(n_buckets))
    found = pos < len(idx)
    found[found] = buckets[pos[found]] == np.arange(n_buckets)[found]
    return np.where(found, idx[np.minimum(pos, len(idx) - 1)], starts)


def bucket_columns(
    steps: np.ndarray,
    z: np.ndarray,
    max_cols: int,
    how: Literal["sum", "max", "mean"] = "sum",
) -> tuple[np.ndarray, np.ndarray]:
    """Reduce the columns of z [rows, S] (one per step) to at most `max_cols` buckets.

    Each bucket is labelled by its first step. 'sum' for counts (a histogram over a
    bucket of steps), 'max' to keep the worst value (NaN ignored), 'mean' of finite values.
    """
    steps, z = np.asarray(steps), np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] != len(steps):
        raise ValueError(f"z must be [rows, {len(steps)}], got {z.shape}")
    if max_cols < 1:
        raise ValueError(f"max_cols must be ≥ 1, got {max_cols}")
    s = len(steps)
    if s <= max_cols:
        return steps, z
    starts = _bucket_bounds(s, max_cols)[:-1]
    if how == "sum":
        out = np.add.reduceat(np.nan_to_num(z, nan=0.0), starts, axis=1)
    elif how == "max":
        out = np.fmax.reduceat(z, starts, axis=1)
    elif how == "mean":
        finite = np.isfinite(z)
        sums = np.add.reduceat(np.where(finite, z, 0.0), starts, axis=1)
        counts = np.add.reduceat(finite.astype(np.int64), starts, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    else:
        raise ValueError(f"how must be sum, max or mean, got {how!r}")
    return steps[starts], out
