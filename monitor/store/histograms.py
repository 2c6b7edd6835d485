"""Binning one step's distribution (e.g. per-token log ρ) into a fixed histogram row.

Bins are fixed per metric family (MonitorConfig.histograms), so rows of different steps
line up into a heat map. Values outside [lo, hi) go to under/overflow bins; count,
moments, min/max and quantiles are computed exactly on the raw finite values, so the
tails the bins cut off are still reported. NaN/inf are counted, never binned. This module
does not store anything (store.py does).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import UserError
from monitor.config import HistogramSpec

QUANTILES: dict[str, float] = {
    "p01": 0.01,
    "p05": 0.05,
    "p25": 0.25,
    "p50": 0.50,
    "p75": 0.75,
    "p95": 0.95,
    "p99": 0.99,
}


@dataclass(frozen=True)
class HistogramRow:
    """One step of one distribution; `counts` = [underflow, bins..., overflow]."""

    lo: float
    hi: float
    counts: np.ndarray  # [bins + 2] int64
    n: int
    n_nonfinite: int
    mean: float
    std: float
    min: float
    max: float
    quantiles: dict[str, float]


def spec_for(name: str, specs: Sequence[HistogramSpec]) -> HistogramSpec:
    """The first spec whose pattern matches `name`."""
    for spec in specs:
        if fnmatch.fnmatchcase(name, spec.pattern):
            return spec
    raise UserError(f"no histogram bins configured for distribution {name!r}; add a '*' entry")


def bin_values(values: Sequence[float] | np.ndarray, spec: HistogramSpec) -> HistogramRow:
    """Histogram of `values` in `spec.bins` equal bins over [spec.lo, spec.hi)."""
    try:
        x = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError) as err:
        raise UserError(f"distribution values must be numbers: {err}") from None
    finite = np.isfinite(x)
    v = x[finite]
    n_nonfinite = int(x.size - v.size)
    edges = np.linspace(spec.lo, spec.hi, spec.bins + 1)
    counts = np.zeros(spec.bins + 2, dtype=np.int64)
    if v.size:
        # bin i holds edges[i] <= v < edges[i+1]; index 0 = underflow, bins+1 = overflow
        idx = np.searchsorted(edges, v, side="right")
        counts += np.bincount(idx, minlength=spec.bins + 2)[: spec.bins + 2]
        q = np.quantile(v, list(QUANTILES.values()))
        quantiles = dict(zip(QUANTILES, map(float, q), strict=True))
        stats = (float(v.mean()), float(v.std()), float(v.min()), float(v.max()))
    else:
        quantiles = dict.fromkeys(QUANTILES, float("nan"))
        stats = (float("nan"),) * 4
    return HistogramRow(spec.lo, spec.hi, counts, int(v.size), n_nonfinite, *stats, quantiles)
