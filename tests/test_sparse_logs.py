"""Runs logged every k steps and runs that die from the start: warm-ups count steps (with a
floor in logged points), and the outcome's starting level is a reference of its own."""

from __future__ import annotations

from monitor.detectors.change import MIN_BASELINE_POINTS, ChangeDetector
from monitor.detectors.config import ChangeRule, DropRule
from monitor.detectors.drop import NOISE_POINTS, DropDetector

RULE = DropRule("reward/mean", "roll back")


def first_page(detector: DropDetector, values: list[float], every: int) -> int | None:
    for i, v in enumerate(values):
        step = every * (i + 1)
        out = detector.update(step, {"reward/mean": v})
        if out:
            return step
    return None


def test_the_outcome_warm_up_counts_steps_not_logged_points():
    """A reward that rises then falls at step 60: logged every step or every 5 steps, the
    page comes within the same steps, not 5 times later."""
    every_step = [min(0.9, 0.1 + 0.02 * s) if s < 60 else 0.05 for s in range(1, 201)]
    dense = first_page(DropDetector("d", RULE), every_step, 1)
    sparse = first_page(DropDetector("d", RULE), every_step[4::5], 5)
    assert dense is not None and sparse is not None
    assert dense > 60 and sparse - dense <= 40
    # the warm-up in steps has a floor in points: 3 points, however sparse
    early = DropDetector("d", RULE)
    paged = first_page(early, [0.9, 0.9, 0.9] + [0.0] * 12, 50)
    assert paged is not None and paged > 150


def test_a_run_that_dies_from_the_start_has_lost_its_starting_gain():
    """A policy that starts at 0.9 and falls to 0.03 within its first points never rose
    after warm-up: its starting level is the reference (a `point` rule has none)."""
    values = [0.9, 0.92, 0.88, 0.2, 0.03] + [0.02, 0.04, 0.0, 0.03] * 8
    paged = first_page(DropDetector("d", RULE), values, 5)
    assert paged is not None and paged <= 60
    by_point = DropRule("reward/mean", "roll back", unit="point")  # 20 points, no start
    late = first_page(DropDetector("d", by_point), values, 5)
    assert late is None or late > 100
    flat = [0.9, 0.8, 1.0, 0.85, 0.95] * 8  # noisy around where it began: no page
    assert first_page(DropDetector("d", RULE), flat, 5) is None


def scored_from(every: int) -> int:
    """The step at which a default change rule first has a baseline."""
    d = ChangeDetector("g", ChangeRule("optim/grad_norm", "optimisation", "up", "x"))
    for i in range(1, 200):
        d.update(every * i, {"optim/grad_norm": 1.0 + 0.01 * (i % 3)})
        if d.score() is not None:
            return every * i
    raise AssertionError("never scored")


def test_the_change_baseline_counts_steps_with_a_floor_in_points():
    """Every step: warm-up 6 + baseline 10 + gap 3 points. Every 5 steps the same steps,
    with at least MIN_BASELINE_POINTS points in the baseline: far sooner than 19 points."""
    assert scored_from(1) == 6 + 10 + 3
    assert scored_from(5) == 5 * (2 + MIN_BASELINE_POINTS + 1)


def test_no_fall_is_judged_before_the_outcome_noise_is_known():
    """A sparse log past its warm-up in steps but with fewer than NOISE_POINTS changes seen:
    its noise is unknown, not zero, so a wobble from a lucky start is no collapse. The
    same fall once the noise is known, and far beyond it, is."""
    wobble = [-0.1, 0.72, 0.65, 0.31, 0.36, 0.69, 0.59, -0.05, 0.21]
    assert first_page(DropDetector("d", RULE), wobble, 5) is None
    dead = [0.9, 0.92, 0.88, 0.91, 0.89] + [0.0] * 16
    paged = first_page(DropDetector("d", RULE), dead, 5)
    assert paged is not None and 5 * (NOISE_POINTS + 1) <= paged <= 70


def test_a_fall_from_the_starting_level_names_that_level():
    """When the starting level sets the drop (the run never rose after warm-up), the alert
    says so and carries it as its baseline, not the smoothed peak."""
    detector = DropDetector("d", RULE)
    values = [0.9, 0.92, 0.88, 0.2, 0.03] + [0.02, 0.04, 0.0, 0.03] * 8
    for i, v in enumerate(values):
        alerts = detector.update(5 * (i + 1), {"reward/mean": v})
        if alerts:
            break
    (alert,) = alerts
    assert "its starting level 0.9 (median of the first 3)" in alert.message
    assert alert.baseline == 0.9
