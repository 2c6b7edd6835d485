"""Paired bootstrap statistics of `minirl bench speed`: medians with 95 % intervals.

Benchmarks here run on a shared 2-core machine whose load moves by the second, so every
comparison is made in pairs run back to back (the load they share cancels) and resampled
as pairs. numpy only; it measures nothing itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def median_ratio_ci(
    num: list[float], den: list[float], reps: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """median(num)/median(den) − 1 and its paired-bootstrap 95 % interval (pairs are
    resampled together)."""
    a, b = _paired(num, den)
    idx = np.random.default_rng(seed).integers(0, a.size, size=(reps, a.size))
    boot = np.median(a[idx], axis=1) / np.median(b[idx], axis=1) - 1.0
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return float(np.median(a) / np.median(b) - 1.0), float(lo), float(hi)


def median_ci(values: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Median of per-pair values (ratios − 1, differences) and its bootstrap 95 % interval:
    the paired estimate, in which the load that both arms of a pair shared cancels."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("need at least one pair")
    idx = np.random.default_rng(seed).integers(0, v.size, size=(reps, v.size))
    lo, hi = np.quantile(np.median(v[idx], axis=1), [0.025, 0.975])
    return float(np.median(v)), float(lo), float(hi)


def _paired(num: list[float], den: list[float]) -> tuple[Any, Any]:
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need paired samples, got {a.size} and {b.size}")
    return a, b
