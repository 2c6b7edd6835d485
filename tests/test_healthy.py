"""Healthy checkpoints are measured: within noise of the best score, no precursor open."""

import math

import pytest

from monitor.remediation.healthy import MIN_NOISE, judge, last_healthy, noise_band, recovered


def test_noise_band_is_robust_scatter_of_successive_differences():
    # differences 0.02, 0.04, 0.02, 0.04 -> median 0.03 -> 2 * 1.4826 * 0.03 / sqrt 2
    scores = [0.30, 0.32, 0.28, 0.30, 0.26]
    assert noise_band(scores) == pytest.approx(2 * 1.4826 * 0.03 / math.sqrt(2))
    assert noise_band([0.3, 0.3]) == MIN_NOISE  # too short to measure
    assert noise_band([0.3] * 10) == MIN_NOISE  # perfectly flat: the floor


def test_a_checkpoint_after_the_fall_is_not_healthy_even_before_any_alert():
    scores = [(0, 0.24), (10, 0.26), (20, 0.25), (30, 0.10), (40, 0.02)]
    v = {x.step: x for x in judge([0, 10, 20, 30, 40], scores, noise=0.02)}
    assert [v[s].healthy for s in (0, 10, 20, 30, 40)] == [True, True, True, False, False]
    assert v[30].best == 0.26 and v[30].score == 0.10
    assert "below the best" in v[40].reason
    assert last_healthy(judge([0, 10, 20, 30, 40], scores, noise=0.02)).step == 20


def test_a_precursor_open_when_taken_disqualifies_the_checkpoint():
    scores = [(0, 0.24), (10, 0.26), (20, 0.27)]
    precursors = [(15, 25), (30, None)]
    v = judge([10, 20, 30], scores, precursors, noise=0.02)
    assert [x.healthy for x in v] == [True, False, False]
    assert "from step 15, cleared at 25" in v[1].reason
    assert "still open" in v[2].reason
    assert last_healthy(judge([10, 20, 30], scores, precursors, noise=0.02)).step == 10
    assert last_healthy(judge([10, 20], scores, precursors, noise=0.02), before=10) is None


def test_a_run_that_dies_from_the_start_keeps_its_first_checkpoint():
    scores = [(0, 0.24), (10, 0.15), (20, 0.05), (30, 0.0)]
    assert last_healthy(judge([0, 10, 20, 30], scores, noise=0.02)).step == 0


def test_recovered_is_judged_against_the_pre_episode_best_not_a_fallen_evaluation():
    before = [(0, 0.26), (20, 0.25), (40, 0.022)]  # had already fallen at 40
    ok, why = recovered(0.043, before, noise=0.02)
    assert not ok and "0.26" in why
    assert recovered(0.25, before, noise=0.02)[0]
    assert not recovered(0.5, [], noise=0.02)[0]
