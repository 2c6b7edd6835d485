"""Detectors on synthetic streams with seeded noise: where each must fire, where it must not.

Streams mimic a healthy run at the levels measured on this machine (notes/SCIENCE.md),
then inject one failure at a known step; every expectation (the step an alert fires,
its severity, when it clears) is derived by hand from the rule's documented thresholds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from monitor.config import DetectorsConfig, LevelRule, MonitorConfig
from monitor.detectors import build_detectors
from monitor.detectors.base import robust_z
from monitor.detectors.nonfinite import factor_of
from monitor.errors import UserError
from monitor.records import AlertDraft, Cleared

CFG = DetectorsConfig()


def healthy(n: int, seed: int, on_policy: bool = True) -> list[dict[str, float]]:
    """A noisy but healthy run: every canonical metric a detector watches."""
    rng = np.random.default_rng(seed)

    def ln(center: float, sigma: float) -> np.ndarray:
        return center * np.exp(rng.normal(0.0, sigma, n))

    t = np.arange(n) / n
    reward = np.clip(0.2 + 0.4 * t + rng.normal(0, 0.05, n), 0, 1)  # learning
    entropy = (1.0 - 0.5 * t) * np.exp(rng.normal(0, 0.05, n))  # slowly sharpening
    cols = {
        "mismatch/kl_k1": ln(1e-3, 0.25),
        "mismatch/ratio_p99": 1.0 + ln(0.1, 0.2),
        "mismatch/ratio_p01": 1.0 - ln(0.1, 0.2),
        "mismatch/ratio_max": np.exp(rng.uniform(5, 14, n)),  # isolated outlier tokens
        "mismatch/chi2_token": ln(0.01, 0.3),
        "mismatch/chi2_seq": ln(0.1, 0.3),
        "mismatch/ess": 1.0 - ln(0.02, 0.3),
        "staleness/kl_k3": np.zeros(n) if on_policy else ln(2e-3, 0.3),
        "staleness/mask_frac": np.zeros(n) if on_policy else ln(0.02, 0.3),
        "routing/mismatch_train_infer": ln(0.01, 0.2),
        "routing/mismatch_stale": np.zeros(n) if on_policy else ln(0.01, 0.2),
        "approx/seq_residual": ln(0.01, 0.3),
        "policy/entropy": entropy,
        "optim/grad_norm": ln(1.0, 0.3),
        "optim/loss": rng.normal(0, 0.1, n),
        "response/len_mean": ln(20.0, 0.05),
        "response/trunc_frac": ln(0.01, 0.3),
        "reward/mean": reward,
    }
    steps = [{k: float(v[i]) for k, v in cols.items()} for i in range(n)]
    for i in range(0, n, 20):  # periodic held-out evaluation, noisy
        steps[i]["eval/acc"] = float(np.clip(0.2 + 0.4 * t[i] + rng.normal(0, 0.04), 0, 1))
    return steps


def run(stream, config: DetectorsConfig = CFG, only: str | None = None):
    """Feed a stream to fresh detectors; (step, AlertDraft | Cleared) in order."""
    detectors = [d for d in build_detectors(config) if only is None or d.name == only]
    out = []
    for step, scalars in enumerate(stream):
        for d in detectors:
            out += [(step, x) for x in d.update(step, scalars)]
    return out


def fired(events, detector: str | None = None) -> list[tuple[int, str]]:
    return [
        (s, x.severity)
        for s, x in events
        if isinstance(x, AlertDraft) and (detector is None or x.detector == detector)
    ]


def cleared(events, detector: str) -> list[int]:
    return [s for s, x in events if isinstance(x, Cleared) and x.detector == detector]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("on_policy", [True, False])
def test_a_healthy_noisy_run_raises_no_alert(seed, on_policy):
    assert fired(run(healthy(1000, seed, on_policy))) == []


def test_robust_z_matches_a_hand_computation():
    hist = [1.0, 2.0, 3.0, 4.0, 100.0]  # median 3, |dev| = 2 1 0 1 97 -> MAD 1
    z, med, scale = robust_z(6.0, hist, sigma_floor=0.0)
    assert (med, scale) == (3.0, 1.4826)
    assert z == pytest.approx(3.0 / 1.4826, rel=1e-15)
    assert robust_z(3.5, [3.0] * 10, sigma_floor=0.05) == (10.0, 3.0, 0.05)  # flat: the floor


def test_mismatch_kl_spike_fires_critical_at_once_then_clears_with_hysteresis():
    s = healthy(300, seed=4)
    for i in range(200, 205):
        s[i]["mismatch/kl_k1"] = 5e-2  # 50× baseline; above the warning level 2e-2, below 1e-1
    ev = run(s, only="train_inference_kl")
    assert fired(ev) == [(200, "critical")]  # z ≫ 10 and fold ≥ 2 → critical, not the level
    # back to ~1e-3 at 205: calm (z < 3 and < 0.8·2e-2) for 3 steps → cleared at 207
    assert cleared(ev, "train_inference_kl") == [207]
    alert = ev[0][1]
    assert alert.factor == "train_inference" and alert.metric == "mismatch/kl_k1"
    assert alert.baseline == pytest.approx(1e-3, rel=0.15)
    assert alert.window == 50 and "IS correction" in alert.remedy


def test_mismatch_level_escalates_and_does_not_flap_around_the_level():
    s = [{"mismatch/kl_k1": 0.021 if i % 2 else 0.019} for i in range(60)]
    s += [{"mismatch/kl_k1": 0.2}] * 3
    ev = run(s, only="train_inference_kl")
    # warning at step 1 (0.021 ≥ 2e-2); 0.019 is not below 0.8·2e-2, so it never clears;
    # the critical level 1e-1 at step 60 escalates once.
    assert fired(ev) == [(1, "warning"), (60, "critical")]
    assert cleared(ev, "train_inference_kl") == []


def test_slow_mismatch_creep_is_caught_by_cusum_not_by_the_rolling_baseline():
    rng = np.random.default_rng(5)
    n = 400
    creep = np.where(np.arange(n) < 100, 0.0, np.log(4.0) * (np.arange(n) - 100) / 300)
    kl = 1e-3 * np.exp(creep + rng.normal(0, 0.25, n))  # 4× over 300 steps, max 4e-3
    ev = run([{"mismatch/kl_k1": float(v)} for v in kl])
    drift = fired(ev, "train_inference_kl_drift")
    assert len(drift) == 1 and drift[0][1] == "warning"
    # a shift of ~1.5σ (fold ≥ 1.5 is the other condition) appears near step 100 + 300·ln1.5/ln4
    assert 150 < drift[0][0] < 300
    assert fired(ev, "train_inference_kl") == []  # the rolling baseline follows the creep


# Severity by hand: the level tier, unless the jump is also ≥ z_crit = 10 robust σ (and
# ≥ min_fold) on log scale. E.g. ESS 0.98 → 0.5 at σ_floor 0.05: z = ln(1.96)/0.05 = 13.5.
# Off-policy staleness 2e-3 (σ 0.3) → 2e-2: z ≈ ln(10)/0.3 ≈ 7.7, so the warning tier.
@pytest.mark.parametrize(
    ("detector", "metric", "value", "severity"),
    [
        ("train_inference_ratio_p99", "mismatch/ratio_p99", 2.5, "warning"),
        ("train_inference_ratio_p99", "mismatch/ratio_p99", 6.0, "critical"),
        ("train_inference_ratio_p01", "mismatch/ratio_p01", 0.4, "warning"),
        ("train_inference_ratio_p01", "mismatch/ratio_p01", 0.1, "critical"),
        ("train_inference_chi2", "mismatch/chi2_token", 0.6, "critical"),  # 60× baseline
        ("train_inference_ess", "mismatch/ess", 0.5, "critical"),
        ("train_inference_ess", "mismatch/ess", 0.2, "critical"),
        ("staleness_kl", "staleness/kl_k3", 0.02, "warning"),
        ("staleness_mask_frac", "staleness/mask_frac", 0.15, "warning"),
        ("staleness_mask_frac", "staleness/mask_frac", 0.35, "critical"),
        ("routing_train_infer", "routing/mismatch_train_infer", 0.2, "critical"),
        ("routing_stale", "routing/mismatch_stale", 0.055, "warning"),
        ("approx_residual", "approx/seq_residual", 0.3, "critical"),  # 30× baseline
        ("truncation", "response/trunc_frac", 0.3, "warning"),
    ],
)
def test_breakdown_detectors_fire_on_their_factor(detector, metric, value, severity):
    s = healthy(200, seed=6, on_policy=False)
    for i in range(150, 160):
        s[i][metric] = value
    ev = run(s, only=detector)
    assert fired(ev) == [(150, severity)]
    factor = getattr(CFG, detector).factor
    assert ev[0][1].factor == factor == factor_of(metric) or metric.startswith("response/")
    assert cleared(ev, detector)  # recovered at 160 → cleared a few steps later


def test_staleness_warns_on_levels_from_exactly_zero_on_policy():
    s = healthy(100, seed=7, on_policy=True)  # kl_k3 == 0 throughout: floor, no noise
    s[60]["staleness/kl_k3"] = 5e-3  # 50× the floor but below the 1e-2 level: z needs min 2×
    ev = run(s, only="staleness_kl")
    assert fired(ev) == [(60, "critical")]  # far above a flat floor: a real change
    s[60]["staleness/kl_k3"] = 1e-5  # below the 1e-4 noise floor: invisible
    assert fired(run(s, only="staleness_kl")) == []


def test_entropy_collapse_and_blowup_need_two_steps_and_a_fold_of_two():
    base = healthy(200, seed=8)
    crash = [dict(x) for x in base]
    for i in range(120, 200):
        crash[i]["policy/entropy"] = 0.05
    assert fired(run(crash, only="entropy_collapse")) == [(121, "critical")]  # persist 2
    one = [dict(x) for x in base]
    one[120]["policy/entropy"] = 0.05  # a single step is not a collapse
    assert fired(run(one, only="entropy_collapse")) == []
    mild = [dict(x) for x in base]
    for i in range(120, 200):
        mild[i]["policy/entropy"] *= 0.7  # −30 %: far in z (σ = 5 %), but less than 2×
    assert fired(run(mild, only="entropy_collapse")) == []
    blow = [dict(x) for x in base]
    for i in range(120, 200):
        blow[i]["policy/entropy"] = 4.0
    assert fired(run(blow, only="entropy_blowup")) == [(121, "critical")]


def test_grad_norm_spike_fires_on_one_step_of_10x_not_on_2x():
    s = healthy(200, seed=9)
    s[100]["optim/grad_norm"] = 10.0
    s[150]["optim/grad_norm"] = 2.0
    ev = run(s, only="grad_norm_spike")
    assert [x for x, _ in fired(ev)] == [100]
    assert ev[0][1].factor == "optimisation" and "roll back" in ev[0][1].remedy


def test_warmup_hides_change_alerts_but_not_levels():
    s = [{"optim/grad_norm": 1.0, "mismatch/kl_k1": 1e-3} for _ in range(30)]
    s[5]["optim/grad_norm"] = 100.0  # before 20 baseline steps: no baseline yet
    s[6]["mismatch/kl_k1"] = 0.5  # the critical level applies from step one
    assert fired(run(s, only="grad_norm_spike")) == []
    assert fired(run(s, only="train_inference_kl")) == [(6, "critical")]


def test_cooldown_after_clearing():
    s = [{"optim/grad_norm": 1.0} for _ in range(120)]
    for spike in (40, 50, 90):
        s[spike]["optim/grad_norm"] = 50.0
    ev = run(s, only="grad_norm_spike")
    # 40 fires; calm 41-43 → cleared at 43; 50 is within the 20-step cooldown; 90 is not
    assert [x for x, _ in fired(ev)] == [40, 90]
    assert cleared(ev, "grad_norm_spike") == [43, 93]


def test_length_blowup_needs_a_sustained_1_5x_or_more():
    s = healthy(200, seed=10)
    for i in range(100, 200):
        s[i]["response/len_mean"] *= 2.0  # z = ln 2 / 0.05 ≈ 14 ≥ 10
    assert fired(run(s, only="length_blowup")) == [(101, "critical")]
    s = healthy(200, seed=10)
    for i in range(100, 200):
        s[i]["response/len_mean"] *= 1.3  # far in z, but less than 1.5×
    assert fired(run(s, only="length_blowup")) == []


def test_reward_collapse_from_its_peak_warning_then_critical():
    s = [{"reward/mean": 0.6} for _ in range(100)]
    s += [{"reward/mean": 0.1} for _ in range(40)]
    ev = run(s, only="reward_collapse")
    # EWMA(α=0.1) from 0.6 toward 0.1: after k steps 0.1 + 0.5·0.9^k. drop = 0.5·(1−0.9^k)/0.6
    # ≥ 0.3 at k = 5 (0.9^5 = 0.590 → 0.341), ≥ 0.5 at k = 9 (0.9^9 = 0.387 → 0.511)
    assert fired(ev) == [(104, "warning"), (108, "critical")]
    assert "fallen" in ev[0][1].message and ev[0][1].baseline == pytest.approx(0.6)


def test_no_reward_collapse_without_a_peak_or_on_a_plateau():
    rng = np.random.default_rng(11)
    flat_low = [{"reward/mean": float(abs(rng.normal(0.02, 0.02)))} for _ in range(300)]
    assert fired(run(flat_low, only="reward_collapse")) == []  # never gained 0.05
    plateau = [{"reward/mean": float(np.clip(rng.normal(0.5, 0.1), 0, 1))} for _ in range(500)]
    assert fired(run(plateau, only="reward_collapse")) == []


def test_eval_accuracy_collapse_counts_only_evaluated_steps():
    s = [{} for _ in range(200)]
    for i, acc in zip(
        range(0, 200, 20), [0.3, 0.4, 0.45, 0.5, 0.5, 0.5, 0.1, 0.05, 0.05, 0.05], strict=True
    ):
        s[i]["eval/acc"] = acc
    ev = run(s, only="eval_collapse")
    # EWMA(α=0.5): ..., 0.4875 (peak at 100), 0.29375 at 120 → drop 0.40 → warning;
    # 0.171875 at 140 → drop 0.65 → critical
    assert fired(ev) == [(120, "warning"), (140, "critical")]


def test_nonfinite_opens_once_per_metric_and_clears():
    s = [{"optim/loss": 0.1, "x/aux": 1.0} for _ in range(10)]
    s[3]["optim/loss"] = math.nan
    s[4]["optim/loss"] = math.inf
    s[4]["x/aux"] = -math.inf
    ev = run(s, only="nonfinite")
    assert fired(ev) == [(3, "critical"), (4, "warning")]
    assert cleared(ev, "nonfinite") == [5, 5]
    assert factor_of("x/aux") == "optimisation" and factor_of("routing/x") == "routing"


def test_nonfinite_values_never_poison_other_baselines():
    s = healthy(120, seed=12)
    for i in range(60, 70):
        s[i]["optim/grad_norm"] = math.nan
    assert fired(run(s, only="grad_norm_spike")) == []


def test_every_rule_watches_a_canonical_metric():
    canonical = {
        "mismatch/kl_k1", "mismatch/ratio_p99", "mismatch/ratio_p01", "mismatch/ratio_max",
        "mismatch/chi2_token", "mismatch/chi2_seq", "mismatch/ess", "staleness/kl_k3",
        "staleness/mask_frac", "routing/mismatch_train_infer", "routing/mismatch_stale",
        "approx/seq_residual", "policy/entropy", "optim/grad_norm", "response/len_mean",
        "response/trunc_frac", "reward/mean", "eval/acc",
    }  # fmt: skip
    watched = {
        getattr(CFG, f.name).metric for f in dataclasses.fields(CFG) if f.name != "nonfinite"
    }
    assert watched == canonical


def test_config_overrides_are_strict_and_typed():
    cfg = MonitorConfig.from_dict(
        {"detectors": {"train_inference_kl": {"warn_level": 5e-2, "persist": 2}},
         "remediation": {"max_attempts": 1, "icepop_band": [0.4, 4]},
         "histograms": [{"pattern": "*", "lo": 0, "hi": 1, "bins": 10}]}
    )  # fmt: skip
    rule = cfg.detectors.train_inference_kl
    assert (rule.warn_level, rule.persist, rule.crit_level) == (5e-2, 2, 1e-1)  # rest kept
    assert cfg.remediation.icepop_band == (0.4, 4.0) and cfg.remediation.max_attempts == 1
    assert cfg.histograms[0].bins == 10 and cfg.histograms[0].lo == 0.0
    for bad, msg in [
        ({"detectors": {"nope": {}}}, "'monitor.detectors.nope' is unknown"),
        ({"detectors": {"train_inference_kl": {"warn_levl": 1}}}, "did you mean 'warn_level'"),
        ({"detectors": {"train_inference_kl": {"persist": "2"}}}, "expected an integer"),
        ({"detectors": {"train_inference_kl": {"direction": "up"}}}, "expected one of 'high'"),
        ({"remediation": {"icepop_band": [1]}}, "expected a list of 2 items"),
        ({"store": 3}, "'monitor.store': expected a mapping"),
    ]:
        with pytest.raises(UserError, match=msg):
            MonitorConfig.from_dict(bad)
    off = MonitorConfig.from_dict({"detectors": {"grad_norm_spike": {"enabled": False}}})
    assert "grad_norm_spike" not in {d.name for d in build_detectors(off.detectors)}


def test_a_custom_rule_with_levels_only():
    rule = LevelRule("x/y", "outcome", "low", "do something", warn_level=0.5, z_warn=None)
    cfg = dataclasses.replace(CFG, truncation=rule)
    s = [{"x/y": 1.0}] * 5 + [{"x/y": 0.4}] + [{"x/y": 0.7}] * 3
    ev = run(s, cfg, only="truncation")
    assert fired(ev) == [(5, "warning")]
    assert cleared(ev, "truncation") == [8]  # 0.7 > 0.5/0.8 = 0.625 for 3 steps
