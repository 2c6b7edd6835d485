"""Detectors on synthetic streams: where each must fire, where it must not, and every boundary.

Healthy streams mimic a run at the levels measured on this machine (bf16 mismatch KL
≈ 1e-3, entropy sliding slowly, a noisy reward that learns). Expectations (the step an
alert fires, its baseline and score) are derived by hand from the rules' documented
tests, and each boundary (warm-up, baseline window, persistence, threshold) is pinned
from both sides, so that an off-by-one in a detector fails a test.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
from rule_factory import linear_rule

from core.errors import UserError
from monitor.config import MonitorConfig
from monitor.detectors import DetectorSet, build_detectors
from monitor.detectors.base import robust_z
from monitor.detectors.config import DetectorsConfig
from monitor.detectors.nonfinite import factor_of
from monitor.detectors.rules import ChangeRule, DropRule, LevelRule
from monitor.store.records import AlertDraft, Cleared

CFG = DetectorsConfig()


def healthy(n: int, seed: int, on_policy: bool = True) -> list[dict[str, float]]:
    """A noisy but healthy run: every canonical metric a detector watches."""
    rng = np.random.default_rng(seed)

    def ln(center: float, sigma: float) -> np.ndarray:
        return center * np.exp(rng.normal(0.0, sigma, n))

    t = np.arange(n) / n
    cols = {
        "mismatch/kl_k1": ln(1e-3, 0.25),
        "mismatch/kl_k3": ln(1e-3, 0.25),
        "mismatch/chi2_token": ln(0.01, 0.3),
        "mismatch/prob_abs_diff": ln(3e-3, 0.25),
        "mismatch/logprob_abs_diff": ln(2e-2, 0.2),
        "mismatch/ess": 1.0 - ln(0.02, 0.3),
        "is/trunc_frac": ln(1e-4, 0.5),
        "staleness/kl_k3": np.zeros(n) if on_policy else ln(2e-3, 0.3),
        "staleness/mask_frac": np.zeros(n) if on_policy else ln(0.02, 0.3),
        "routing/mismatch_train_infer": ln(0.01, 0.2),
        "routing/mismatch_stale": np.zeros(n) if on_policy else ln(0.01, 0.2),
        "approx/seq_residual": ln(0.01, 0.3),
        "policy/entropy": (1.0 - 0.5 * t) * np.exp(rng.normal(0, 0.05, n)),
        "optim/grad_norm": ln(1.0, 0.3),
        "response/len_mean": ln(20.0, 0.05),
        "reward/mean": np.clip(0.2 + 0.4 * t + rng.normal(0, 0.05, n), 0, 1),
    }
    steps = [{k: float(v[i]) for k, v in cols.items()} for i in range(n)]
    for i in range(0, n, 20):  # periodic held-out evaluation, noisy
        steps[i]["eval/acc"] = float(np.clip(0.2 + 0.4 * t[i] + rng.normal(0, 0.04), 0, 1))
    return steps


def run(stream, config: DetectorsConfig = CFG, only: str | None = None):
    """Feed a stream to fresh detectors; (step, AlertDraft | Cleared) in order."""
    if only is None:
        detectors = DetectorSet(config)
        return [(step, x) for step, s in enumerate(stream) for x in detectors.update(step, s)]
    (detector,) = [d for d in build_detectors(config) if d.name == only]
    return [(step, x) for step, s in enumerate(stream) for x in detector.update(step, s)]


def fired(events, detector: str | None = None) -> list[tuple[int, str]]:
    return [
        (s, x.severity)
        for s, x in events
        if isinstance(x, AlertDraft) and (detector is None or x.detector == detector)
    ]


def cleared(events, detector: str) -> list[int]:
    return [s for s, x in events if isinstance(x, Cleared) and x.detector == detector]


def change_only(rule: ChangeRule, name: str = "probe") -> DetectorsConfig:
    """A config whose only per-metric rule is `rule` (as field `mismatch_kl`)."""
    off = {
        f.name: dataclasses.replace(getattr(CFG, f.name), enabled=False)
        for f in dataclasses.fields(CFG)
    }
    return dataclasses.replace(CFG, **{**off, "mismatch_kl": rule})


# ---------------------------------------------------------------------------- healthy runs
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("on_policy", [True, False])
def test_a_healthy_noisy_run_raises_nothing(seed, on_policy):
    assert fired(run(healthy(600, seed, on_policy))) == []


def test_a_large_constant_mismatch_is_information_not_an_alarm():
    s = healthy(300, seed=3)
    for row in s:  # FP4-like rollouts from step 0: KL ≈ 3e-2, ESS ≈ 0.3, routing 7 %
        row["mismatch/kl_k1"] *= 30
        row["mismatch/kl_k3"] *= 30
        row["mismatch/ess"] = 0.3 * row["mismatch/ess"]
        row["routing/mismatch_train_infer"] *= 7
    severities = {sev for _, sev in fired(run(s))}
    assert severities == {"info"}
    names = {x.detector for _, x in run(s) if isinstance(x, AlertDraft)}
    assert names == {"mismatch_level", "ess_level", "routing_level"}


def test_robust_z_matches_a_hand_computation():
    hist = [1.0, 2.0, 3.0, 4.0, 100.0]  # median 3, |dev| = 2 1 0 1 97 -> MAD 1
    z, med, scale = robust_z(6.0, hist, sigma_floor=0.0)
    assert (med, scale) == (3.0, 1.4826)
    assert z == pytest.approx(3.0 / 1.4826, rel=1e-15)
    assert robust_z(3.5, [3.0] * 10, sigma_floor=0.05) == (10.0, 3.0, 0.05)  # flat: the floor


# ---------------------------------------------------------------------------- change rule
SIMPLE = linear_rule(
    warmup=10, window=40, gap=3, min_baseline=15, z=6.0, z_clear=3.0, clear_after=2, cooldown=5
)


def stream(values) -> list[dict[str, float]]:
    return [{"x/m": float(v)} for v in values]


def test_change_scoring_starts_exactly_when_the_baseline_is_long_enough():
    # Points 1..10 are warm-up (never in the baseline); point n scores when the eligible
    # points before it, minus the gap of 3, number ≥ 15: (n − 1 − 10) − 3 ≥ 15 → n ≥ 29.
    # A jump at point 28 (step 27) is not scored and enters history; it is still inside
    # the gap at point 29, which scores against the flat baseline and fires at step 28.
    ev = run(stream([0.0] * 27 + [100.0] * 5), change_only(SIMPLE), only="mismatch_kl")
    assert fired(ev) == [(28, "warning")]
    # a jump at point 29 fires at once
    ev = run(stream([0.0] * 28 + [100.0] * 5), change_only(SIMPLE), only="mismatch_kl")
    assert fired(ev) == [(28, "warning")]


def test_warm_up_values_never_enter_the_baseline():
    # Warm-up points are wild; a baseline that took the last one (point 10) would hold 16
    # points with an even-length median. Eligible points 11..30 are 0..19 in order.
    warm = [1e6] * 10
    body = list(range(20))  # points 11..30
    ev = run(stream(warm + body + [60.0]), change_only(SIMPLE), only="mismatch_kl")
    (step, alert), *_ = [(s, x) for s, x in ev if isinstance(x, AlertDraft)]
    # at point 31 the baseline is points 11..27 (the last 3 eligible are the gap): 0..16
    base = np.arange(17.0)
    med = float(np.median(base))
    mad = float(np.median(np.abs(base - med)))
    assert step == 30 and alert.baseline == med == 8.0 and alert.window == 17
    z = (60.0 - med) / max(1.4826 * mad, 1.0)
    assert f"robust z {z:.1f}" in alert.message


def test_the_current_value_is_scored_against_a_baseline_without_it():
    rule = dataclasses.replace(SIMPLE, gap=0, min_baseline=5, warmup=0, z=2.0)
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 9.0]
    ev = run(stream(values), change_only(rule), only="mismatch_kl")
    # baseline of step 5 is 1..5: median 3, MAD 1, scale 1.4826: z = 6/1.4826 = 4.05
    ((_, alert),) = [(s, x) for s, x in ev if isinstance(x, AlertDraft)]
    assert alert.baseline == 3.0 and "robust z 4.0" in alert.message and alert.window == 5


def test_change_threshold_is_pinned_from_both_sides():
    rule = dataclasses.replace(SIMPLE, gap=0, min_baseline=5, warmup=0, z=4.0)
    base = [1.0, 2.0, 3.0, 4.0, 5.0]  # median 3, scale 1.4826
    just_above = 3.0 + 4.0 * 1.4826 * 1.001
    just_below = 3.0 + 4.0 * 1.4826 * 0.999
    assert fired(run(stream([*base, just_above]), change_only(rule), only="mismatch_kl"))
    assert not fired(run(stream([*base, just_below]), change_only(rule), only="mismatch_kl"))


def test_persistence_needs_consecutive_points_and_the_baseline_freezes_meanwhile():
    rule = dataclasses.replace(SIMPLE, gap=0, min_baseline=5, warmup=0, persist=3)
    flat = [0.0] * 10
    broken = [*flat, 50.0, 50.0, 0.0, 50.0, 50.0, 50.0, 50.0]
    ev = run(stream(broken), change_only(rule), only="mismatch_kl")
    assert fired(ev) == [(15, "warning")]  # steps 13, 14, 15: the third in a row
    # the held values never became the baseline: the alert stays open on the new level...
    ev = run(stream(flat + [50.0] * 60), change_only(rule), only="mismatch_kl")
    assert fired(ev) == [(12, "warning")]
    # ...until it has held for rebase_after (30) points: then it is the run's new normal,
    # the alert clears and the baseline is learned again (no refire on the same level)
    assert cleared(ev, "mismatch_kl") == [42]


def test_change_clears_with_hysteresis_then_cools_down():
    rule = dataclasses.replace(SIMPLE, gap=0, min_baseline=5, warmup=0)
    s = [0.0] * 10 + [50.0] + [0.0] * 3 + [50.0] + [0.0] * 6 + [50.0]
    ev = run(stream(s), change_only(rule), only="mismatch_kl")
    # fires at 10; calm at 11, 12 → cleared at 12 (clear_after 2); 14 is inside the
    # cooldown of 5 (14 − 12 < 5); 21 fires again
    assert fired(ev) == [(10, "warning"), (21, "warning")]
    assert cleared(ev, "mismatch_kl") == [12]


AT_ONCE = {"warmup": 0, "min_baseline": 5, "gap": 0, "recent": 1, "persist": 1}
"""No warm-up, gap, smoothing or persistence, 5 points of baseline: a rule that scores
each point as it comes."""


def test_log_scale_rules_need_the_fold_as_well_as_the_score():
    rule = ChangeRule("x/m", "staleness", "up", "fix", floor=1e-4, z=6.0, min_change=2.0, **AT_ONCE)
    zeros = [0.0] * 10  # on-policy staleness: exactly 0, read as the floor 1e-4
    assert not fired(run(stream([*zeros, 1.9e-4]), change_only(rule), only="mismatch_kl"))
    ev = run(stream([*zeros, 1e-2]), change_only(rule), only="mismatch_kl")
    assert fired(ev) == [(10, "warning")]
    alert = ev[0][1]
    assert alert.factor == "staleness" and alert.baseline == pytest.approx(1e-4)
    assert "100× above its baseline" in alert.message


def test_the_default_mismatch_rule_flags_an_fp4_switch_and_blames_the_factor():
    s = healthy(200, seed=5)
    for row in s[120:]:
        row["mismatch/kl_k3"] *= 20  # the rollout engine switched to FP4 at step 120
    ev = run(s, only="mismatch_kl")
    # the median of the last 3 moves at 121, then 3 points in a row: 121, 122, 123
    assert fired(ev) == [(123, "warning")]
    alert = ev[0][1]
    assert alert.factor == "train_inference" and alert.baseline == pytest.approx(1e-3, rel=0.2)


def test_verl_probability_difference_rising_is_a_training_inference_precursor():
    """verl runs from before rollout_corr/ log only training/rollout_probs_diff_mean for
    the mismatch: imported under our name, it is watched like the KL."""
    from monitor.importers.names import canonical_name

    name = canonical_name("training/rollout_probs_diff_mean")
    s = healthy(200, seed=6)
    for row in s[120:]:
        row[name] *= 10
    ev = run(s, only="mismatch_prob_diff")
    assert fired(ev) == [(123, "warning")]
    assert ev[0][1].factor == "train_inference" and ev[0][1].metric == "mismatch/prob_abs_diff"


def test_an_anchored_baseline_catches_a_slow_drift_that_a_moving_one_absorbs():
    knobs = {"floor": 1e-4, "z": 3.0, "min_change": 2.0, "sigma_floor": 0.2, "window": 5}
    rule = ChangeRule("x/m", "train_inference", "up", "fix", anchored=True, **knobs, **AT_ONCE)
    # 5 points at 1.0 (the anchor: log-median 0, MAD 0 → the floor 0.2), then ×1.1 a step:
    # point i ≥ 5 is 1.1^(i−4), first ≥ 2 (the fold) at i = 12 (1.1^8 = 2.14; 1.1^7 = 1.95)
    values = [1.0] * 5 + [1.1 ** (i - 4) for i in range(5, 40)]
    ev = run(stream(values), change_only(rule), only="mismatch_kl")
    assert fired(ev)[0] == (12, "warning")
    alert = ev[0][1]
    assert alert.baseline == 1.0 and alert.window == 5  # the anchor never took a later point
    assert "2.14× above its level over steps 0-4 (1, median of 5 points)" in alert.message
    # the same rule with a moving baseline admits each point (z ≈ 3·0.095/0.2 < admit_z 2)
    # and only ever sees ×1.1^3 ≈ 1.33 against its window's median
    moving = dataclasses.replace(rule, anchored=False)
    assert fired(run(stream(values), change_only(moving), only="mismatch_kl")) == []


def test_an_early_level_learned_on_a_climb_does_not_take_the_climb_for_noise():
    """An anchor of 20 points that climbs 100× (×1.274 a point, exactly), then a level 10×
    its median: the climb's MAD (1.21, σ 1.80) would score it z = ln 10 / 1.80 = 1.28,
    never 3; its step-to-step noise (ln 1.274 / 0.954 = 0.254) scores it 9.1."""
    knobs = {"floor": 1e-6, "min_change": 4.0, "window": 20, "min_baseline": 20}
    rule = ChangeRule(  # every point admitted, scored from the 21st
        "x/m", "train_inference", "up", "fix", anchored=True, **{**AT_ONCE, **knobs}, admit_z=99
    )
    climb = [1e-3 * 100 ** (i / 19) for i in range(20)]
    plateau = [0.1] * 5  # 10× the anchor's median, 1e-3·100^(9.5/19) = 0.01
    ev = run(stream(climb + plateau), change_only(rule), only="mismatch_kl")
    assert fired(ev) == [(20, "warning")]
    assert "10× above its level over steps 0-19" in ev[0][1].message
    assert "robust z 9.1" in ev[0][1].message
    logs = [math.log(v) for v in climb]
    assert robust_z(math.log(plateau[0]), logs, 0.1)[0] == pytest.approx(1.28, abs=0.01)


PRIME = Path(__file__).resolve().parents[1] / "bench/data/real/c17_prime_dakota_q3_0p6b.jsonl"


@pytest.mark.skipif(not PRIME.exists(), reason="corpus absent")
def test_a_public_prime_rl_run_whose_mismatch_climbs_from_the_start_is_warned():
    """prime-rl's training-inference KL climbs 0.001 -> 4 over its first 120 steps while
    the reward holds: the drift rule warns (its early level learned during the climb),
    and nothing pages a run whose outcome held."""
    from monitor.importers import parse
    from monitor.importers.names import rename

    rows = parse(PRIME, "jsonl").rows
    detectors = DetectorSet(CFG)
    alerts = [
        (step, x)
        for step in sorted(rows)
        for x in detectors.update(step, rename(rows[step], {}, {}))
        if isinstance(x, AlertDraft) and x.severity != "info"
    ]
    assert [(s, x.detector, x.severity) for s, x in alerts] == [
        (46, "mismatch_kl_drift", "warning")
    ]
    assert "16.1× above its level over steps 7-31" in alerts[0][1].message


def test_a_slow_mismatch_drift_is_flagged_hundreds_of_steps_before_it_explodes():
    """The shape public reports give of a mismatch collapse (open-instruct's |Δ log p|
    rising ~10× over 400 steps, then exploding): the drift rule warns once it has doubled;
    the moving-baseline rule on the same metric sees nothing until the explosion."""
    from monitor.importers.names import canonical_name

    name = canonical_name("debug/vllm_vs_local_logprob_diff_mean")
    s = healthy(650, seed=7)
    for t, row in enumerate(s):
        growth = 10 ** min(max(t - 120, 0) / 400, 1.0) * 20 ** (max(t - 520, 0) / 130)
        row[name] *= growth
    first = fired(run(s, only="mismatch_logprob_drift"))[0][0]
    assert 200 <= first <= 280  # doubled at t ≈ 240 (10^(120/400) = 2.0)
    assert all(step > 520 for step, _ in fired(run(s, only="mismatch_logprob_diff")))
    alerts = [x for _, x in run(s, only="mismatch_logprob_drift") if isinstance(x, AlertDraft)]
    assert {x.factor for x in alerts} == {"train_inference"}


def test_clipping_switched_off_is_a_staleness_precursor_a_benign_fall_is_not():
    """The clip rule stops acting (the masked share drops to exactly 0) on an off-policy
    run: `clip_stop` fires on the third point of a 3-median at 0 and blames staleness; a
    fall to a third (fewer mini-batches) is below its tenfold fold; on-policy zeros
    (mask_frac 0 since step 0) are the healthy test above."""
    s = healthy(200, seed=6, on_policy=False)
    for row in s[120:]:
        row["staleness/mask_frac"] = 0.0  # clipping switched off at step 120
    ev = run(s, only="clip_stop")
    assert fired(ev) == [(123, "warning")]  # median of the last 3 at 0 from 121: 121-123
    alert = ev[0][1]
    assert alert.factor == "staleness" and alert.baseline == pytest.approx(0.02, rel=0.2)
    third = healthy(200, seed=6, on_policy=False)
    for row in third[120:]:
        row["staleness/mask_frac"] /= 3
    assert fired(run(third, only="clip_stop")) == []
    assert fired(run(third, only="clip_frac")) == []


def test_a_clip_share_moving_within_its_healthy_level_is_no_rise():
    """A clipped update masks 0.1-0.5 % of tokens on healthy runs: a share going from 0.15 %
    to 0.5 % (3.3x) read as a staleness precursor on public PPO and GRPO runs; from there
    to 3 % it still is one."""
    s = healthy(200, seed=6, on_policy=False)
    rng = np.random.default_rng(6)
    share = 1.5e-3 * np.exp(rng.normal(0, 0.2, 200))
    for t, row in enumerate(s):
        row["staleness/mask_frac"] = float(share[t] * (3.3 if t >= 120 else 1.0))
    assert fired(run(s, only="clip_frac")) == []
    for t, row in enumerate(s[120:], start=120):
        row["staleness/mask_frac"] = float(share[t] * 20)
    assert fired(run(s, only="clip_frac")) == [(123, "warning")]  # 3-median high from 121, held 3


def test_more_mini_batches_per_rollout_is_a_staleness_setting_that_moved():
    """2 → 4 updates per rollout at step 120: `mini_batches_rise` fires at step 120
    itself (a setting is exact: no median, no persistence) with the baseline 2; a rise
    just short of the 1.5× fold, a constant 4 from step 0 (a run configured off-policy)
    and a fall to 1 (fewer mini-batches) raise nothing."""
    s = healthy(200, seed=6, on_policy=False)
    for i, row in enumerate(s):
        row["staleness/mini_batches"] = 4.0 if i >= 120 else 2.0
    ev = run(s, only="mini_batches_rise")
    assert fired(ev) == [(120, "warning")]
    alert = ev[0][1]
    assert (alert.factor, alert.baseline, alert.value) == ("staleness", 2.0, 4.0)
    assert "rose to 4, 2× above its baseline 2" in alert.message
    assert "median of the last" not in alert.message and "for 1 steps" not in alert.message
    for i, row in enumerate(s):
        row["staleness/mini_batches"] = 2.98 if i >= 120 else 2.0  # 1.49×
    assert fired(run(s, only="mini_batches_rise")) == []
    for rows, values in ((s, lambda i: 4.0), (s, lambda i: 1.0 if i >= 120 else 2.0)):
        for i, row in enumerate(rows):
            row["staleness/mini_batches"] = values(i)
        assert fired(run(rows, only="mini_batches_rise")) == []


def test_a_rising_learning_rate_is_flagged_the_step_it_rises():
    """The lr ×1.25 at step 120 (a ramp's first step): `lr_rise` fires at 120 with the
    pre-ramp lr as baseline; ×1.19 is under the 1.2× fold; a linear warm-up, short or
    long (its baseline was never flat: a spread far above the 1 % floor), is not a ramp."""
    s = healthy(200, seed=3)
    for i, row in enumerate(s):
        row["optim/lr"] = 2e-4 * (1.25 if i >= 120 else 1.0)
    ev = run(s, only="lr_rise")
    assert fired(ev) == [(120, "warning")]
    assert ev[0][1].baseline == pytest.approx(2e-4) and ev[0][1].factor == "optimisation"
    for i, row in enumerate(s):
        row["optim/lr"] = 2e-4 * (1.19 if i >= 120 else 1.0)
    assert fired(run(s, only="lr_rise")) == []
    for warmup in (6, 100):
        for i, row in enumerate(s):
            row["optim/lr"] = 2e-4 * min(1.0, (i + 1) / warmup)  # linear warm-up
        assert fired(run(s, only="lr_rise")) == []


def test_a_coarser_rollout_precision_is_flagged_the_step_it_drops():
    """bf16 -> FP8 at step 120 (16 -> 8 bits): `rollout_precision_drop` fires at 120 and
    blames the training-inference factor; FP4 from the start (a constant 4) raises nothing,
    nor does a finer format."""
    s = healthy(200, seed=4)
    for i, row in enumerate(s):
        row["engine/rollout_bits"] = 8.0 if i >= 120 else 16.0
    ev = run(s, only="rollout_precision_drop")
    assert fired(ev) == [(120, "warning")]
    assert ev[0][1].baseline == pytest.approx(16.0) and ev[0][1].factor == "train_inference"
    for constant_or_finer in (lambda i: 4.0, lambda i: 32.0 if i >= 120 else 16.0):
        for i, row in enumerate(s):
            row["engine/rollout_bits"] = constant_or_finer(i)
        assert fired(run(s, only="rollout_precision_drop")) == []


def test_clipping_switched_off_is_flagged_the_step_it_goes_off():
    """`staleness/clip_on` 1 → 0 at step 120: `clip_off` fires at 120 itself (a setting),
    three steps before `clip_stop` sees its symptom, and blames staleness; a run with
    clipping off from the start (a constant 0) and clipping turned back on raise nothing."""
    s = healthy(200, seed=6, on_policy=False)
    for i, row in enumerate(s):
        row["staleness/clip_on"] = 0.0 if i >= 120 else 1.0
        row["staleness/mask_frac"] *= 0.0 if i >= 120 else 1.0
    ev = run(s, only="clip_off")
    assert fired(ev) == [(120, "warning")]
    assert (ev[0][1].factor, ev[0][1].baseline, ev[0][1].value) == ("staleness", 1.0, 0.0)
    assert "clip_on fell to 0, at or below the rule's floor 1e-08, from its baseline 1" in (
        ev[0][1].message
    )
    assert fired(run(s, only="clip_stop")) == [(123, "warning")]
    for off_or_back_on in (lambda i: 0.0, lambda i: 1.0 if i >= 120 else 0.0):
        for i, row in enumerate(s):
            row["staleness/clip_on"] = off_or_back_on(i)
        assert fired(run(s, only="clip_off")) == []


def test_a_breakdown_blames_a_setting_that_moved_over_a_symptom_that_moved_first():
    s = _precursors()  # staleness KL and mask share ×30 from step 80: warnings at 83
    for i, row in enumerate(s):
        row["routing/mismatch_stale"] *= 10 if i >= 77 else 1  # a symptom, 2 steps earlier
        row["staleness/mini_batches"] = 8.0 if i >= 79 else 2.0  # the setting, later
    crit = [x for _, x in run(s) if isinstance(x, AlertDraft) and x.detector == "breakdown"]
    assert crit and "staleness is the cause (mini_batches_rise" in crit[0].message
    assert "precursors open, among them a setting (staleness/mini_batches)" in crit[0].message


# ---------------------------------------------------------------------------- level rule
def test_level_rule_is_info_persists_and_clears_with_hysteresis():
    rule = LevelRule("x/m", "train_inference", "high", 1.0, "see", persist=3, clear_after=2)
    cfg = dataclasses.replace(change_only(SIMPLE), mismatch_level=rule)
    s = stream([2.0, 2.0, 0.5, 2.0, 2.0, 2.0, 0.9, 0.7, 0.7])
    ev = run(s, cfg, only="mismatch_level")
    # 0.5 breaks the streak; steps 3, 4, 5 fire (info); 0.9 ≥ 0.8 is not yet back; 0.7 at
    # steps 7 and 8 → cleared at 8
    assert fired(ev) == [(5, "info")] and cleared(ev, "mismatch_level") == [8]


# ---------------------------------------------------------------------------- outcome drop
def test_drop_warm_up_hides_a_peak_in_its_last_step():
    rule = DropRule("reward/mean", "roll back", ewma_alpha=1.0, warmup=3)
    cfg = dataclasses.replace(change_only(SIMPLE), reward_collapse=rule)
    s = [{"reward/mean": v} for v in [0.0, 0.0, 0.9] + [0.3] * 20]
    assert fired(run(s, cfg, only="reward_collapse")) == []  # peak 0.9 was in the warm-up
    s = [{"reward/mean": v} for v in [0.0, 0.0, 0.0, 0.9] + [0.3] * 20]
    # 0.67 ≥ 0.5 lost from step 4, judged once the noise is known (NOISE_POINTS) and the 0.6
    # fall exceeds noise_k·σ_e (|Δ| sums to 1.5 over k changes: σ_e shrinks as k grows)
    ((step, severity),) = fired(run(s, cfg, only="reward_collapse"))
    assert severity == "critical" and 11 <= step <= 20


def test_reward_collapse_is_critical_at_half_the_gain():
    s = [{"reward/mean": 0.6} for _ in range(100)] + [{"reward/mean": 0.1} for _ in range(40)]
    ev = run(s, only="reward_collapse")
    # EWMA(0.1) from 0.6 toward 0.1: drop = 0.5·(1−0.9^k)/0.6 ≥ 0.5 at k = 9 (0.511)
    assert fired(ev) == [(108, "critical")] and ev[0][1].baseline == pytest.approx(0.6)


def test_a_plus_minus_one_reward_is_paged_from_where_it_started_not_from_zero():
    """+1/−1 verifier rewards start below the rule's zero: the gain counts from the EWMA's
    lowest point before the peak. A run that learned −0.6 → −0.3 and falls to −0.95 is
    paged (from 0 it never gained anything); one that learned −0.6 → 0.15 and dipped to
    0.05 is not (13 % of its gain, not 67 %)."""
    ramp = [-0.6 + 0.3 * t / 99 for t in range(100)]
    s = [{"reward/mean": v} for v in ramp + [-0.95] * 40]
    ev = run(s, only="reward_collapse")
    (step, severity), *_ = fired(ev)
    assert severity == "critical" and 100 <= step <= 110
    assert "gained from -0.6, its lowest before it" in ev[0][1].message
    ramp = [-0.6 + 0.75 * t / 99 for t in range(100)]
    s = [{"reward/mean": v} for v in ramp + [0.05] * 100]
    assert fired(run(s, only="reward_collapse")) == []


def test_no_collapse_without_a_peak_or_on_a_plateau():
    rng = np.random.default_rng(11)
    flat_low = [{"reward/mean": float(abs(rng.normal(0.02, 0.02)))} for _ in range(300)]
    assert fired(run(flat_low, only="reward_collapse")) == []  # never gained 0.05
    plateau = [{"reward/mean": float(np.clip(rng.normal(0.5, 0.1), 0, 1))} for _ in range(500)]
    assert fired(run(plateau, only="reward_collapse")) == []


def test_a_fall_within_the_smoothed_outcomes_own_noise_does_not_page_a_public_run():
    """Two public runs whose per-step reward is noisy (a slime-style Qwen3-8B run with one
    prompt × 8 samples a step, bit-exact training and rollout, and a TRL run logging 40
    points): a plain half-the-gain test pages the first from a peak that noise set; the
    guard does not. (It paged the second too while the gain counted from 0; that run's
    reward starts below 0, at −0.1, and is counted from there now, guard or not.) The
    mismatched twin of the first, whose reward goes to zero, is still paged once the
    reward is gone (20-step means 0.26 at 61-80, 0.03 at 81-100)."""
    from bench.detection.corpus import real_runs

    data = Path(__file__).resolve().parents[1] / "bench" / "data" / "real"  # the checkout's
    runs = {r.name: r.stream for r in real_runs(data)}
    unguarded = dataclasses.replace(
        CFG,
        reward_collapse=dataclasses.replace(
            CFG.reward_collapse, noise_z=0.0, drawdown_margin=-math.inf
        ),
    )
    noisy = [values for _, values in runs["real/slime_rlkernel_g11"]]
    assert fired(run(noisy, unguarded, only="reward_collapse"))
    assert fired(run(noisy, only="reward_collapse")) == []
    signed = [values for _, values in runs["real/trl_chaos_economy"]]
    assert fired(run(signed, only="reward_collapse")) == []
    collapsing = [values for _, values in runs["real/slime_rlkernel_g10"]]
    ((step, severity),) = fired(run(collapsing, only="reward_collapse"))
    assert severity == "critical" and 75 <= step <= 100  # once, held while the reward is gone


def test_the_noise_guard_is_pinned_by_hand():
    from monitor.detectors.drop import DropDetector

    rule = DropRule(
        "reward/mean",
        "roll back",
        ewma_alpha=1.0,
        warmup=0,
        min_warmup=0,
        noise_z=2.0,
        drawdown_margin=0.5,
    )
    detector = DropDetector("d", rule)
    values = [0.5, 0.6] * 6  # 11 steps of |Δ| = 0.1: σ = √(π/4)·0.1; α = 1: σ_e = σ
    for step, v in enumerate(values):
        detector.update(step, {"reward/mean": v})
    # σ from the changes before the last point (10 of 0.1; the last point's own change
    # joins when the next point is judged), taken one standard error high
    sigma = math.sqrt(math.pi / 4) * 0.1 * (1 + math.sqrt(math.pi / 2 - 1) / math.sqrt(10))
    assert detector.noise() == pytest.approx(sigma, rel=1e-12)
    sigma = math.sqrt(math.pi / 4) * 0.1 * (1 + math.sqrt(math.pi / 2 - 1) / math.sqrt(11))
    # α = 1: every value is independent, m = the values seen; k = 0.5 + 2·√(2 ln m)
    assert detector.noise_k() == pytest.approx(0.5 + 2 * math.sqrt(2 * math.log(12)))
    # peak 0.6: a fall just inside k·σ_e counts as nothing, just beyond it as itself
    fall = (0.5 + 2 * math.sqrt(2 * math.log(13))) * sigma
    detector.update(12, {"reward/mean": 0.6 - fall * 0.999})
    assert detector.drop == 0.0
    fall = (0.5 + 2 * math.sqrt(2 * math.log(14))) * sigma  # the σ moved: the Δ of step 12
    detector.update(13, {"reward/mean": 0.6 - fall * 1.001})  # joined it (not step 13's own)
    sigma_now = detector.noise()
    k = 0.5 + 2 * math.sqrt(2 * math.log(14))
    assert (detector.drop > 0) == (0.6 - (0.6 - fall * 1.001) >= k * sigma_now)
    # early in a run the floor holds: k = noise_z while 2·√(2 ln m) + margin is below it
    short = DropDetector("d", dataclasses.replace(rule, drawdown_margin=-10.0))
    short.update(0, {"reward/mean": 0.5})
    assert short.noise_k() == 2.0


def test_a_long_stable_noisy_run_does_not_page_as_its_peak_drifts_up():
    """A stable reward of one prompt × 8 samples a step (each prompt's success rate drawn
    from a Beta of mean 0.45), 600 steps, 20 seeds: with a fixed 4σ_e guard the EWMA's
    running peak drifts up with the run and most runs page; with the expected
    peak-to-trough range added (the default) few do."""
    from monitor.detectors.drop import DropDetector

    def paged(rule: DropRule, seed: int) -> bool:
        rng = np.random.default_rng(seed)
        rewards = rng.binomial(8, rng.beta(1.0, 1.0 / 0.45 - 1.0, size=600)) / 8
        detector = DropDetector("reward_collapse", rule)
        changes = (detector.update(t, {"reward/mean": float(x)}) for t, x in enumerate(rewards))
        return any(isinstance(c, AlertDraft) for batch in changes for c in batch)

    default = CFG.reward_collapse
    fixed = dataclasses.replace(default, drawdown_margin=-math.inf)
    assert sum(paged(fixed, seed) for seed in range(20)) >= 14
    assert sum(paged(default, seed) for seed in range(20)) <= 4


def test_a_gain_within_the_noise_is_no_gain_to_lose():
    """A shaped reward that wanders around 0 (negative and positive, σ 0.15 a step) has
    a smoothed peak a little above 0 by chance; its falling below 0 is no collapse. The
    same noise around a real gain (0.6) falling to the same level is one."""
    from monitor.detectors.drop import DropDetector

    noise = np.random.default_rng(3).normal(0.0, 0.15, size=120)

    def first_page(levels: np.ndarray) -> int | None:
        detector = DropDetector("reward_collapse", CFG.reward_collapse)
        for t, x in enumerate(levels + noise):
            if any(isinstance(c, AlertDraft) for c in detector.update(t, {"reward/mean": x})):
                return t
        return None

    wander = np.r_[np.full(30, 0.05), np.full(90, -0.15)]
    assert first_page(wander) is None
    gained = np.r_[np.linspace(0.05, 0.6, 30), np.full(30, 0.6), np.full(60, -0.15)]
    page = first_page(gained)
    assert page is not None and 60 <= page <= 75


# ---------------------------------------------------------------------------- breakdown
def _precursors(n: int = 120, at: int = 80) -> list[dict[str, float]]:
    s = healthy(n, seed=6, on_policy=False)
    for row in s[at:]:
        row["staleness/kl_k3"] *= 30
        row["staleness/mask_frac"] *= 30
    return s


def test_one_precursor_is_a_warning_not_a_breakdown():
    s = healthy(150, seed=6, on_policy=False)
    for row in s[80:]:
        row["staleness/kl_k3"] *= 30
    assert {sev for _, sev in fired(run(s)) if sev != "info"} == {"warning"}


def test_precursors_with_the_outcome_falling_are_critical_and_blame_the_first():
    s = _precursors()
    for i, row in enumerate(s[90:]):
        row["reward/mean"] = max(0.0, row["reward/mean"] * (1 - 0.05 * i))  # collapsing
    ev = run(s)
    warnings = [
        (st, x.detector) for st, x in ev if isinstance(x, AlertDraft) and x.severity == "warning"
    ]
    assert warnings[0][0] == 83  # recent median moves at 81, then 3 in a row
    (step, crit), *_ = [
        (st, x) for st, x in ev if isinstance(x, AlertDraft) and x.detector == "breakdown"
    ]
    assert crit.severity == "critical" and crit.factor == "staleness"
    assert "staleness moved first" in crit.message and "outcome has lost" in crit.message
    assert step > 90


def test_three_precursors_at_once_page_without_the_outcome_only_when_one_jumped_orders():
    s = _precursors()
    for row in s[80:]:
        row["routing/mismatch_stale"] *= 10
    assert fired(run(s), "breakdown") == []  # ×10-×30 at once: changing, not getting worse
    for row in s[80:]:
        row["staleness/kl_k3"] *= 100  # ×3000: a jump of orders of magnitude
    ev = run(s)
    crit = [(st, x) for st, x in ev if isinstance(x, AlertDraft) and x.detector == "breakdown"]
    assert len(crit) == 1 and crit[0][0] == 83 and crit[0][1].value == 3.0
    # a page with the outcome holding names the jump that made it one
    jump = re.search(
        r"staleness/kl_k3 at ([0-9.e+]+)× its baseline, a jump of orders", crit[0][1].message
    )
    assert jump and float(jump.group(1)) >= 1000 and "outcome has lost" not in crit[0][1].message


# ---------------------------------------------------------------------------- non-finite
def test_nonfinite_opens_once_per_metric_and_clears():
    s = [{"optim/loss": 0.1, "x/aux": 1.0} for _ in range(10)]
    s[3]["optim/loss"] = math.nan
    s[4]["optim/loss"] = math.inf
    s[4]["x/aux"] = -math.inf
    ev = run(s, only="nonfinite")
    assert fired(ev) == [(3, "critical"), (4, "warning")]
    assert cleared(ev, "nonfinite") == [5, 5]
    assert factor_of("x/aux") == "optimisation" and factor_of("routing/x") == "routing"


def test_a_lone_nonfinite_gradient_norm_is_a_warning_two_in_a_row_are_critical():
    """A skipped step (fp16 overflow) logs one inf gradient norm and training goes on; a
    divergence keeps it non-finite: critical at its second, naming the first."""
    s = [{"optim/loss": 0.1, "optim/grad_norm": 1.0} for _ in range(12)]
    s[3]["optim/grad_norm"] = math.inf  # skipped: finite again at 4
    s[7]["optim/grad_norm"] = s[8]["optim/grad_norm"] = s[9]["optim/grad_norm"] = math.nan
    ev = run(s, only="nonfinite")
    assert fired(ev) == [(3, "warning"), (7, "warning"), (8, "critical")]
    crit = [x for st, x in ev if isinstance(x, AlertDraft) and x.severity == "critical"]
    assert "non-finite since step 7" in crit[0].message
    assert cleared(ev, "nonfinite") == [4, 10]
    s[11]["optim/loss"] = math.nan  # the loss is not skippable: critical at once
    assert fired(run(s, only="nonfinite"))[-1] == (11, "critical")


def test_nonfinite_values_never_poison_a_baseline():
    s = healthy(160, seed=12)
    for i in range(60, 70):
        s[i]["optim/grad_norm"] = math.nan
    assert fired(run(s, only="grad_norm")) == []


# ---------------------------------------------------------------------------- config
def test_config_overrides_are_strict_and_typed():
    cfg = MonitorConfig.from_dict(
        {
            "detectors": {"grad_norm": {"z": 8, "persist": 2}},
            "remediation": {"max_attempts": 1, "icepop_band": [0.4, 4]},
            "histograms": [{"pattern": "*", "lo": 0, "hi": 1, "bins": 10}],
        }
    )
    rule = cfg.detectors.grad_norm
    assert (rule.z, rule.persist, rule.min_change) == (8.0, 2, 4.5)  # the rest kept
    assert cfg.remediation.icepop_band == (0.4, 4.0) and cfg.remediation.max_attempts == 1
    assert cfg.histograms[0].bins == 10 and cfg.histograms[0].lo == 0.0
    for bad, msg in [
        ({"detectors": {"nope": {}}}, "'monitor.detectors.nope' is unknown"),
        ({"detectors": {"grad_norm": {"persit": 1}}}, "did you mean 'persist'"),
        ({"detectors": {"grad_norm": {"persist": "2"}}}, "expected an integer"),
        ({"detectors": {"grad_norm": {"direction": "high"}}}, "expected one of 'up'"),
        ({"remediation": {"icepop_band": [1]}}, "expected a list of 2 items"),
        ({"store": 3}, "'monitor.store': expected a mapping"),
    ]:
        with pytest.raises(UserError, match=msg):
            MonitorConfig.from_dict(bad)
    off = MonitorConfig.from_dict({"detectors": {"grad_norm": {"enabled": False}}})
    assert "grad_norm" not in DetectorSet(off.detectors).names


def test_zero_gradient_steps_do_not_teach_the_gradient_norm_baseline():
    """A trainer that logs a gradient norm of exactly 0 on steps with nothing to learn (two
    in three here) is read from its nonzero steps: ordinary gradients after a run of zeros
    are no explosion, while a tenfold rise over the nonzero level still fires."""
    rng = np.random.default_rng(11)
    zeros = healthy(200, seed=11)
    for i, row in enumerate(zeros):
        if i % 3 or rng.random() < 0.2:
            row["optim/grad_norm"] = 0.0
    assert fired(run(zeros, only="grad_norm")) == []
    risen = [dict(row) for row in zeros]
    for row in risen[150:]:
        row["optim/grad_norm"] *= 10.0
    first = fired(run(risen, only="grad_norm"))
    assert first and 150 <= first[0][0] <= 175  # three nonzero points past the gap


def test_clip_stop_needs_a_clip_rule_that_was_acting():
    """A masked share of 0.03 % (an on-policy run's stray clipped token) falling to none is
    not the clip rule switched off; the same fall from 0.3 % is."""
    for level, alerts in ((3e-4, 0), (3e-3, 1)):
        s = healthy(200, seed=7, on_policy=False)
        for i, row in enumerate(s):
            row["staleness/mask_frac"] *= level / 0.02 if i < 120 else 0.0
        assert len(fired(run(s, only="clip_stop"))) == alerts, level
