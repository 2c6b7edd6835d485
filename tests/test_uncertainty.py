"""The rates' intervals: Wilson's score interval, and where each goal lies against it."""

from __future__ import annotations

import math

import pytest

from bench.detection.uncertainty import interval, lab, uncertainty


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's score interval written out (E. B. Wilson, 1927), the reference."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_a_rate_interval_is_wilsons_and_the_report_says_where_each_goal_lies():
    for k, n in ((4, 10), (2, 23), (8, 220), (0, 5), (5, 5)):
        lo, hi = interval(k, n)
        assert (lo, hi) == pytest.approx(wilson(k, n), abs=6e-4)
    assert interval(3, 0) is None

    def fold(caught: int, collapses: int, paged: int, stable: int) -> dict:
        return {
            "caught_interval": interval(caught, collapses),
            "stable_held_paged_interval": interval(paged, stable),
        }

    text = uncertainty({"ours": {"report": fold(4, 10, 8, 220), "tune": fold(9, 10, 3, 10)}})
    b, a = text.split("fold B: ")[1], text.split("fold A: ")[1]
    assert "caught 17-69 % (the goal, 80 %, above it: missed)" in b  # 4/10
    assert "paged 2-7 % (the goal, 10 %, above it: met)" in b  # 8/220
    assert "caught 60-98 % (the goal, 80 %, inside it)" in a  # 9/10
    assert "paged 11-60 % (the goal, 10 %, below it: missed)" in a  # 3/10
    lab_line = lab(255, 320, 0, 315)  # a goal inside the interval is neither met nor missed
    assert "in time 74.9-83.7 % (the goal, 75 %, inside it)" in lab_line
    assert "paged 0.0-1.2 % (the goal, 1 %, inside it)" in lab_line
