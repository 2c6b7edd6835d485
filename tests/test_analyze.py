"""`minirl analyze`: onset and precursor maths on hand-derived series, then a recorded
collapsing run (written through Monitor) end to end, its JSON and HTML, and bad input."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from stream_factory import IS_OFF, kl_jump
from torchless_cli import run_cli

from bench.browser import chromium_available, chromium_page, wait_until
from monitor.analysis.analyze import analyze_run
from monitor.analysis.collapse import (
    diverged_at,
    fall_z,
    find_onset,
    learned_at,
    running_median,
    smoothing_width,
)
from monitor.analysis.precursors import find_precursors, moved_at
from monitor.config import MonitorConfig
from monitor.monitor import Monitor

RULE = MonitorConfig().detectors.reward_collapse


# ------------------------------------------------------------------------------ maths


def test_running_median_matches_a_plain_loop():
    x = np.random.default_rng(0).normal(size=57)
    x[[3, 20]] = np.nan
    w = 7
    expected = []
    for i in range(len(x)):
        window = [v for v in x[max(0, i - 3) : i + 4] if not math.isnan(v)]
        expected.append(statistics.median(window))
    np.testing.assert_allclose(running_median(x, w), expected)


def test_onset_of_a_step_fall_is_the_step():
    # 0.5 for steps 0..49, 0 after: peak 0.5 (first at step 0), final 0, all gain lost;
    # the running median (w = 5) first drops below 0.5 − 0.2·0.5 at step 50 exactly.
    steps = np.arange(100)
    values = np.where(steps < 50, 0.5, 0.0)
    onset = find_onset(steps, values, "reward/mean", RULE)
    assert onset is not None
    assert (onset.step, onset.peak_step, onset.peak, onset.final, onset.drop) == (50, 0, 0.5, 0, 1)


def test_a_plus_minus_one_reward_counts_its_gain_from_where_it_started():
    """A verifier scoring +1/−1 (DAPO's) starts below the rule's zero. Its gain counts from
    the lowest point before the peak: a run learning −0.6 → −0.3 that falls to −0.95 has
    collapsed (from 0 it never gained anything), and one learning −0.6 → 0.15 that
    settles at 0.05 has lost 13 % of its gain, not 67 %."""
    steps = np.arange(150)
    learned_little = np.where(steps < 100, -0.6 + 0.3 * steps / 99, -0.95)
    onset = find_onset(steps, learned_little, "reward/mean", RULE)
    assert onset is not None and onset.step == 100
    # w = 7: the smoothed peak is v96 (windows 93-99 and 94-100 share their median), the
    # lowest smoothed point before it the first, the median of v0..v3, (v1 + v2) / 2
    v = learned_little
    low, peak = (v[1] + v[2]) / 2, v[96]
    assert (onset.peak_step, onset.peak) == (96, pytest.approx(peak))
    assert onset.drop == pytest.approx((peak + 0.95) / (peak - low))
    learned_then_dipped = np.where(steps < 100, -0.6 + 0.75 * steps / 99, 0.05)
    assert find_onset(steps, learned_then_dipped, "reward/mean", RULE) is None


def test_fall_z_is_the_gap_of_the_two_means_in_standard_errors():
    # 1 1 1 1 0 0 0 0: the changes are 0 0 0 1 0 0 0, median 0, so σ comes from their mean,
    # (1/7)·√π/2; the two means differ by 1 over σ·√(1/4 + 1/4)
    values = np.array([1.0] * 4 + [0.0] * 4)
    sigma = (1 / 7) * math.sqrt(math.pi) / 2
    assert fall_z(values, 4) == pytest.approx(1 / (sigma * math.sqrt(0.5)))
    # a short log before the onset: as many points before as there are (2), against all 6 after
    noisy = np.array([0.9, 0.7, 0.2, 0.0, 0.2, 0.0, 0.2, 0.0])
    sigma = 0.2 / 0.954  # median of |Δ| = 0.2, 0.5, 0.2, 0.2, 0.2, 0.2, 0.2
    expect = (0.8 - 0.1) / (sigma * math.sqrt(1 / 2 + 1 / 6))
    assert fall_z(noisy, 2) == pytest.approx(expect)
    assert fall_z(values, 0) == 0.0  # nothing before: no fall measured


def test_a_noisy_outcome_without_a_trend_has_no_onset():
    """A reward of a few prompts a step, with no trend: its running median's peak and its
    last window differ by more than half the "gain" by chance, which the rule without the
    noise test called a collapse (asserted here first, so the test cannot pass vacuously)."""
    rng = np.random.default_rng(3)
    steps = np.arange(160)
    values = np.clip(rng.normal(0.25, 0.3, 160), -0.5, 1.5)
    values[-12:] -= 0.25  # an unlucky tail, as noise gives one
    w = smoothing_width(len(values))
    smooth = running_median(values, w)
    peak, final = smooth.max(), np.median(values[-w:])
    assert (peak - final) / (peak - min(0.0, smooth[: smooth.argmax() + 1].min())) >= 0.5
    assert find_onset(steps, values, "reward/mean", RULE) is None
    # the same noise with a real fall (the level drops by 0.6, 2σ, for the last 60 steps)
    fell = values.copy()
    fell[100:] -= 0.6
    onset = find_onset(steps, fell, "reward/mean", RULE)
    assert onset is not None and 95 <= onset.step <= 105


def test_a_public_run_whose_reward_is_noise_is_not_a_collapse():
    """TRL GRPO on Wordle (alexchilton/CAS_NLP_MODULE4_GRPO, stage 2): a reward of a few games
    a step, between −2 and 2 with no trend; its last 27 steps average lower by chance."""
    path = Path(__file__).parents[1] / "bench/data/real/c6_caswordle_stage2_grpo.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    steps = np.array([r["step"] for r in rows if "reward" in r])
    values = np.array([r["reward"] for r in rows if "reward" in r], dtype=float)
    assert len(values) == 160
    assert find_onset(steps, values, "reward/mean", RULE) is None
    assert fall_z(values, 133) < RULE.noise_z


def test_no_onset_without_a_fall_or_without_a_gain():
    rng = np.random.default_rng(1)
    steps = np.arange(200)
    noisy_plateau = 0.5 + rng.normal(0, 0.05, 200)
    assert find_onset(steps, noisy_plateau, "reward/mean", RULE) is None
    # never learned: peak − zero below min_peak_gain, whatever happens after
    flat_zero = np.where(steps < 100, RULE.min_peak_gain / 2, 0.0)
    assert find_onset(steps, flat_zero, "reward/mean", RULE) is None
    # lost less than crit_drop of the gain: 0.6 → 0.4 is a third
    mild = np.where(steps < 100, 0.6, 0.4)
    assert find_onset(steps, mild, "reward/mean", RULE) is None
    # too short to say
    assert find_onset(steps[:10], np.zeros(10), "reward/mean", RULE) is None


def test_moved_at_finds_a_persistent_shift_on_log_scale():
    steps = np.arange(100)
    wobble = 1 + 0.01 * np.sin(steps)  # |log| wobble < 0.01, so the σ floor (0.05) rules
    values = 2.0 * wobble
    values[60:] *= 3.0  # log 3 / 0.05 ≈ 22 σ
    step, z, baseline, value, log_scale = moved_at(steps, values, baseline_end=40)
    assert (step, log_scale, value) == (60, True, 6.0 * wobble[60])
    assert z == pytest.approx(math.log(3 * wobble[60]) / 0.05, rel=0.05)
    assert baseline == pytest.approx(2.0, rel=0.01)
    # a single spike (or two) does not persist
    spiky = 2.0 * wobble
    spiky[[60, 61, 80]] *= 3.0
    assert moved_at(steps, spiky, baseline_end=40) is None
    # signed metrics are tested raw; a fall is a move too
    signed = np.where(steps < 70, 0.0, -1.0) + 0.01 * np.sin(steps)
    assert moved_at(steps, signed, baseline_end=40)[:1] == (70,)
    # a baseline mostly at one value (a clip share 0 on two steps of three): its spread is
    # that of the other points, not 0, so their own level is no move; far beyond it is
    sparse = np.where(steps % 3 == 0, 1e-3, 0.0)
    assert moved_at(steps, np.where(steps >= 60, 1e-3, sparse), baseline_end=40) is None
    step, z, baseline, *_ = moved_at(steps, np.where(steps >= 60, 0.05, sparse), baseline_end=40)
    assert (step, baseline) == (60, 0.0) and 50 < z < 200
    # non-finite values are infinitely far from any baseline
    broken = 2.0 * wobble
    broken[[50, 51, 52]] = np.nan
    step, z, *_ = moved_at(steps, broken, baseline_end=40)
    assert step == 50 and math.isinf(z)


# ------------------------------------------------------------------------------ a run


def collapsing_stream(n: int = 300, collapse: bool = True, seed: int = 0):
    """Reward climbs 0.2 → 0.6, then (collapse) falls to 0.05 over steps 220-240.
    Mismatch KL starts growing at step 150 (the cause), entropy falls from step 205,
    the gradient norm spikes at 230 (a consequence); staleness never moves."""
    rng = np.random.default_rng(seed)
    for t in range(n):
        reward = min(0.2 + 0.4 * t / 100, 0.6)
        kl = 1e-3 * math.exp(rng.normal(0, 0.1))
        entropy = math.exp(rng.normal(0, 0.03))
        grad_norm = math.exp(rng.normal(0, 0.1))
        if collapse:
            if t >= 220:
                reward = max(0.6 - 0.55 * (t - 220) / 20, 0.05)
            if t >= 150:
                kl *= math.exp((t - 150) / 15)
            if t >= 205:
                entropy *= math.exp(-(t - 205) / 10)
            if t == 230:
                grad_norm *= 20
        yield (
            t,
            {
                "reward/mean": float(np.clip(reward + rng.normal(0, 0.03), 0, 1)),
                "mismatch/kl_k1": kl,
                "policy/entropy": entropy,
                "staleness/kl_k3": 1e-4 * math.exp(rng.normal(0, 0.1)),
                "optim/grad_norm": grad_norm,
                "perf/step_s": 0.4 + rng.normal(0, 0.05),
            },
        )


def record(run_dir: Path, collapse: bool) -> Path:
    with Monitor(run_dir, remediation=True) as mon:
        for step, scalars in collapsing_stream(collapse=collapse):
            mon.log(step, scalars)
    return run_dir


@pytest.fixture(scope="module")
def collapsed_run(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("runs") / "collapsed", collapse=True)


def test_analyze_finds_the_onset_and_ranks_the_cause_first(collapsed_run):
    a = analyze_run(str(collapsed_run))
    assert a.outcome == "reward/mean"
    # a fifth of the 0.55 fall is done at step 220 + 20·0.2 = 224
    assert a.onset is not None and 220 <= a.onset.step <= 230
    assert a.onset.final < 0.1 and a.onset.drop > 0.8
    names = [p.metric for p in a.precursors]
    assert names[:2] == ["mismatch/kl_k1", "policy/entropy"]
    kl, entropy = a.precursors[:2]
    assert 150 <= kl.moved_step <= 175 and kl.direction == "up" and kl.factor == "train_inference"
    assert 205 <= entropy.moved_step <= 215 and entropy.direction == "down"
    assert kl.lead == a.onset.step - kl.moved_step > entropy.lead > 0
    # the spike after the onset, the quiet factor and timing are not precursors
    assert not {"optim/grad_norm", "staleness/kl_k3", "perf/step_s"} & set(names)
    assert a.first_factor == "train_inference"
    assert any(al["detector"] == "mismatch_kl_k1" for al in a.alerts)
    # the same detectors replayed post hoc open exactly the alerts stored live
    assert a.replay_agrees is True and a.replayed
    assert any(al["detector"] == "reward_collapse" for al in a.alerts)
    assert a.actions and all(ac["status"] == "pending" for ac in a.actions)


def test_a_healthy_run_has_no_onset(tmp_path):
    a = analyze_run(str(record(tmp_path / "healthy", collapse=False)))
    assert a.onset is None and a.precursors == [] and a.first_factor is None
    assert any("no collapse" in n for n in a.notes)


def test_diverged_at_is_the_start_of_the_non_finite_tail():
    steps = np.arange(10)
    nan, inf = math.nan, math.inf
    loss = (steps, np.array([1, 1, nan, 1, 1, 1, 1, nan, nan, nan], dtype=float))
    grad = (np.array([0, 5, 6, 9]), np.array([1.0, 1.0, inf, 1.0]))  # logged sparsely
    assert diverged_at(steps, {"optim/loss": loss}) == 7  # a NaN that healed is no divergence
    # grad norm inf at 6, loss NaN from 7: non-finite from 6 to the end (no row at 8 logs
    # the grad norm, and the finite 1.0 at 9 is one metric while the loss is NaN there)
    assert diverged_at(steps, {"optim/loss": loss, "optim/grad_norm": grad}) == 6
    assert diverged_at(steps, {"optim/grad_norm": grad}) is None  # finite at the end
    assert diverged_at(steps, {"reward/mean": loss}) is None  # only loss and gradient norm
    assert diverged_at(steps[:3], {"optim/loss": (steps[:3], np.full(3, nan))}) == 0


def test_a_run_that_diverged_with_its_outcome_still_up_is_a_collapse(tmp_path):
    """A TRL run's shape (a public one ends so): the reward holds to the last step,
    where the gradient norm and the loss turn NaN; the KL had climbed before."""
    with Monitor(tmp_path / "nan") as mon:
        for step, scalars in collapsing_stream(n=120, collapse=False):
            scalars["optim/loss"] = 0.1
            if step >= 90:
                scalars["mismatch/kl_k1"] *= math.exp((step - 90) / 3)
            if step >= 117:
                scalars["optim/grad_norm"] = scalars["optim/loss"] = math.nan
            mon.log(step, scalars)
    a = analyze_run(str(tmp_path / "nan"))
    assert a.onset is None and a.diverged == 117 and a.collapse_step == 117
    assert a.precursors and a.precursors[0].metric == "mismatch/kl_k1"
    assert 90 <= a.precursors[0].moved_step < 117
    data = a.to_dict()
    assert data["collapsed"] is True and data["diverged"] == 117
    out = run_cli("analyze", str(tmp_path / "nan"))
    assert out.returncode == 0, out.stderr
    assert "diverged: the loss or the gradient norm is non-finite from step 117" in out.stdout
    assert "no collapse found" not in out.stdout


def test_learned_at_is_where_the_outcome_first_reached_half_its_gain():
    steps = np.arange(200)
    reward = np.clip((steps - 80) / 20, 0, 1) * 0.6  # 0 until 80, 0.6 from 100
    reward[150:] = 0.05  # the fall: not part of what was learned before the onset
    assert learned_at(steps, reward, before=150) == 90  # 0.3 there: half of 0.6
    assert learned_at(steps, np.full(200, 0.4), before=150) == 0  # nothing to learn
    assert learned_at(steps, reward, before=0) is None


def test_what_moved_while_the_run_learned_is_no_precursor(tmp_path):
    """Taoger-Xu's public run, in shape: nothing learned for 80 steps, then the reward and
    with it the answers' length rise; the KL climbs from 170, the reward falls at 220. A
    baseline over the first half of the pre-onset steps (mostly before the run learned)
    ranked the length's rise with learning, 140 steps ahead, as the first precursor."""
    rng = np.random.default_rng(0)
    with Monitor(tmp_path / "learns") as mon:
        for t in range(300):
            reward = 0.6 * min(max((t - 80) / 20, 0), 1)
            if t >= 220:
                reward = max(0.6 - 0.55 * (t - 220) / 20, 0.05)
            kl = 1e-3 * math.exp(rng.normal(0, 0.1) + max(t - 170, 0) / 15)
            length = 100 + 300 * min(max((t - 80) / 20, 0), 1)
            mon.log(
                t,
                {
                    "reward/mean": float(np.clip(reward + rng.normal(0, 0.03), 0, 1)),
                    "mismatch/kl_k1": kl,
                    "response/len_mean": length * math.exp(rng.normal(0, 0.03)),
                    # bookkeeping that moves on every run: a counter, and a step time
                    # that grows with the answers
                    "epoch": t / 50,
                    "timing_s/step": length / 10 * math.exp(rng.normal(0, 0.03)) + t / 10,
                },
            )
    a = analyze_run(str(tmp_path / "learns"))
    assert a.onset is not None and 220 <= a.onset.step <= 230
    assert a.baseline_start is not None and 85 <= a.baseline_start <= 95
    names = [p.metric for p in a.precursors]
    assert names[0] == "mismatch/kl_k1" and "response/len_mean" not in names
    assert 170 <= a.precursors[0].moved_step < a.onset.step
    assert not {"epoch", "timing_s/step"} & set(names)


def test_no_precursors_when_the_run_learned_just_before_it_fell(tmp_path):
    """Learned at ~90, fallen from 100: 10 steps are too few for a baseline, and one from
    before it learned would list the learning as precursors."""
    with Monitor(tmp_path / "late") as mon:
        for t in range(160):
            reward = 0.6 * min(max((t - 80) / 20, 0), 1) if t < 100 else 0.02
            mon.log(t, {"reward/mean": reward, "response/len_mean": 100 + 3 * reward * 100})
    a = analyze_run(str(tmp_path / "late"))
    assert a.onset is not None and a.precursors == []
    (note,) = [n for n in a.notes if "too few for a baseline" in n]
    learned = int(note.split("had learned (step ")[1].split(")")[0])
    assert 85 <= learned <= 95 and note.startswith(f"only {a.onset.step - learned} steps")


def test_a_gradient_norm_of_zero_teaches_no_precursor_baseline():
    """Trainers log a gradient norm of 0 on steps with nothing to learn (every group's
    advantages 0). Zeros on two steps of three made the baseline 0, and the norm's usual
    0.5 a move of z ~ 10^11; they are left out as the live grad-norm rule leaves them."""
    rng = np.random.default_rng(0)
    steps = np.arange(200)
    reward = np.where(steps < 150, 0.8, 0.05) + rng.normal(0, 0.02, 200)
    usual = 0.5 * np.exp(rng.normal(0, 0.1, 200))
    grad = np.where((steps % 3 == 0) | (steps >= 100), usual, 0.0)  # every step learns from 100
    series = {"reward/mean": (steps, reward), "optim/grad_norm": (steps, grad)}
    _, _, found = find_precursors(series, 150, "reward/mean", MonitorConfig())
    assert found == []
    # a climb of the norm among its non-zero values is still a precursor
    climbed = np.where(steps >= 120, 20 * grad, grad)
    series["optim/grad_norm"] = (steps, climbed)
    _, _, (p,) = find_precursors(series, 150, "reward/mean", MonitorConfig())
    assert p.metric == "optim/grad_norm" and p.moved_step == 120 and p.direction == "up"
    assert p.baseline == pytest.approx(0.5, rel=0.15)


def test_other_names_of_the_reward_are_the_outcome_not_its_precursors():
    """verl's critic/rewards/mean, TRL's rewards/<function>/mean and reward_std fall with the
    reward (a Wordle run's own reward function listed 20 steps "before" its fall, the fall
    itself); the entropy moving first is still a precursor."""
    rng = np.random.default_rng(1)
    steps = np.arange(200)
    reward = np.where(steps < 150, 0.8, 0.05) + rng.normal(0, 0.02, 200)
    early = np.where(steps < 130, 0.8, 0.05) + rng.normal(0, 0.02, 200)  # a part falls first
    entropy = np.exp(rng.normal(0, 0.05, 200) + np.where(steps >= 120, 1.5, 0.0))
    series = {"reward/mean": (steps, reward), "policy/entropy": (steps, entropy)}
    for name in ("critic/rewards/mean", "train/rewards/wordle_reward_func/mean", "reward_std"):
        series[name] = (steps, early)
    _, _, found = find_precursors(series, 150, "reward/mean", MonitorConfig())
    assert [(p.metric, p.moved_step) for p in found] == [("policy/entropy", 120)]


def test_a_public_run_with_zero_gradient_norms_has_no_gradient_precursor(tmp_path):
    """TRL GRPO (Sunshine535/nips-grpo-dynamics, rho 1.0, seed 42), logged every 5 steps:
    the gradient norm is 0 on 27 of its 40 points. Before, `analyze` listed it as a
    precursor 10 steps ahead, "0.5559 vs baseline 0", |z| 5.6e11."""
    log = Path(__file__).parents[1] / "bench/data/real/nipsgrpo_exp1a_rho100_seed42.jsonl"
    out = run_cli("import", str(log), "--out", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr
    a = analyze_run(str(tmp_path / "run"))
    assert a.onset is not None and a.onset.step == 130
    assert a.precursors and "optim/grad_norm" not in [p.metric for p in a.precursors]


def test_cli_json_and_html(collapsed_run, tmp_path):
    report = tmp_path / "report.html"
    out = run_cli("analyze", str(collapsed_run), "--json", "--html", str(report))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    expected = analyze_run(str(collapsed_run))
    assert data["collapsed"] is True
    assert data["onset"]["step"] == expected.onset.step
    assert [p["metric"] for p in data["precursors"]] == [p.metric for p in expected.precursors]
    assert data["first_factor"] == "train_inference"
    assert len(data["alerts"]) == len(expected.alerts) and data["actions"]
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script src=" not in page  # plotly.js inlined: opens offline
    assert page.count("Plotly.newPlot") == 3  # outcome, precursors, IS factors
    assert f"onset at step {expected.onset.step}" in page
    text = run_cli("analyze", str(collapsed_run))
    assert text.returncode == 0 and "mismatch/kl_k1" in text.stdout
    assert "factor of the IS weight that broke first: train_inference" in text.stdout


def test_cli_says_what_changed_the_run_and_what_was_held_back(tmp_path):
    """An induced incident, a rollback and the IS advice a precursor leaves to a breakdown
    are printed in words, after the step they follow; bookkeeping events are not."""
    run = tmp_path / "changed"
    with Monitor(run, controls=IS_OFF, remediation=True) as mon:
        for step, metrics in kl_jump():
            mon.log(step, metrics)
            if step == 39:
                note = "induced incident at step 40: rollouts in FP4"
                mon.event("incident", {"kind": "set_rollout_quant", "note": note})
            if step == 55:
                mon.event("checkpoint", {"path": "ckpt/step55"})
                detail = {"to_step": 30, "eval_acc_after": 0.41, "eval_acc_before": 0.4}
                mon.event("rollback", detail)
    out = run_cli("analyze", str(run))
    assert out.returncode == 0, out.stderr
    events = out.stdout[out.stdout.index("events (") :].splitlines()
    assert events[0] == "events (3):"
    incident, advice, rollback = (line.split() for line in events[1:])
    assert incident[:4] == ["after", "step", "39", "incident"]
    assert " ".join(incident[4:]) == (
        "induced incident at step 40: rollouts in FP4 (scripted on purpose, not by the run)"
    )
    assert advice[:2] == ["after", "step"] and advice[3] == "remediation_skipped"
    assert 40 <= int(advice[2]) < 50  # the precursor of the KL spike, once
    assert "set_is_correction (cap=5.0, enabled=True): IS correction is off" in " ".join(advice)
    assert rollback[:4] == ["after", "step", "55", "rollback"]
    assert "checkpoint of step 30; held-out accuracy of the restored policy 0.41 " in (
        " ".join(rollback)
    )
    assert "ckpt/step55" not in out.stdout
    page = tmp_path / "report.html"
    assert run_cli("analyze", str(run), "--html", str(page)).returncode == 0
    assert "<td>rolled back to the checkpoint of step 30; held-out accuracy" in page.read_text()


def test_cli_bad_run_is_one_clear_line(tmp_path):
    out = run_cli("analyze", str(tmp_path / "nope"))
    assert out.returncode == 2
    assert "no run store" in out.stderr and "Traceback" not in out.stderr
    fake = tmp_path / "fake"
    fake.mkdir()
    from monitor.store.run_store import store_path

    store_path(fake).write_bytes(b"this is not a database at all" * 100)
    out = run_cli("analyze", str(fake))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_cli_unknown_outcome_metric(collapsed_run):
    out = run_cli("analyze", str(collapsed_run), "--metric", "reward/nope")
    assert out.returncode == 2 and "reward/nope" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.browser
@pytest.mark.skipif(
    not chromium_available(),
    reason="chromium or playwright missing: apt-get install -y chromium; the dev extra",
)
def test_html_report_renders_offline_in_a_real_browser(collapsed_run, tmp_path):
    from monitor.analysis.report import render_html

    report = tmp_path / "report.html"
    report.write_text(render_html(analyze_run(str(collapsed_run))))
    fetched: list[str] = []
    with chromium_page() as page:
        page.on("request", lambda request: fetched.append(request.url))
        page.goto(report.as_uri())
        drawn = "n => (k => k >= n && k)(document.querySelectorAll('.main-svg').length)"
        wait_until(page, drawn, timeout_s=60, arg=3)
        dom = page.content()
    assert dom.count('class="main-svg"') >= 3, dom[-2000:]  # Plotly drew the charts
    assert all(url.startswith(("file:", "data:", "blob:")) for url in fetched), fetched
