"""Change rules for tests of the detectors' mechanics: on a linear scale, with the spread
floored at 1 and no smoothing, persistence or minimum change, a value's score is its
distance from the baseline's median, so a test can say by hand which values alert."""

from __future__ import annotations

from typing import Any

from monitor.detectors.rules import ChangeRule
from monitor.store.records import Factor

RAW = {"scale": "linear", "recent": 1, "persist": 1, "min_change": 0.0, "sigma_floor": 1.0}


def linear_rule(
    factor: Factor = "train_inference", remedy: str = "fix it", **fields: Any
) -> ChangeRule:
    """A rising rule on `x/m` with `RAW`'s fields, then `fields`."""
    return ChangeRule("x/m", factor, "up", remedy, **{**RAW, **fields})
