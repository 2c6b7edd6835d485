"""Healthy checkpoints measured on a real store: the monitor, the drop detector, the
dashboard's story and `analyze` judge health and recovery against the run's best."""

from pathlib import Path

from dashboard.story import _back_to
from monitor import Monitor
from monitor.analysis.analyze import analyze_run
from monitor.analysis.recovery import episode_starts
from monitor.config import MonitorConfig
from monitor.remediation.healthy import noise_band
from monitor.store.reader import RunReader

CONTROLS = {"is_policy": "none", "clip": True, "mini_batches": 1, "lr": 1e-6}

# the off-policy run: a peak at 20, fallen 90 % by 40, an alert only at 45
EVALS = {0: 0.242, 10: 0.255, 20: 0.26, 30: 0.12, 40: 0.022, 50: 0.043}


def _run(tmp_path: Path, evals: dict[int, float], alert_from: int | None) -> Monitor:
    mon = Monitor(tmp_path / "r", controls=CONTROLS)
    for step in range(max(evals) + 1):
        values = {"reward/mean": 0.3, "mismatch/kl_k1": 1e-3}
        if alert_from is not None and step >= alert_from:
            values["mismatch/kl_k1"] = 0.5  # a precursor opens a few steps later
        if step in evals:
            values["eval/acc"] = evals[step]
        mon.log(step, values)
    return mon


def test_a_rollback_never_restores_a_checkpoint_more_than_noise_below_the_best(tmp_path):
    mon = _run(tmp_path, EVALS, alert_from=45)
    ckpts = [0, 10, 20, 30, 40, 50]
    verdict = mon.healthy_checkpoint(ckpts)
    scores = [v for s, v in mon.scores() if s <= verdict.step]
    best_before = max(v for s, v in mon.scores() if s < 45)
    assert verdict.step == 20 and verdict.healthy
    assert verdict.score >= best_before - noise_band(scores)
    assert "within noise" in verdict.reason
    # the old rule took the last checkpoint before the alert: 40, at 0.022
    why = {v.step: v for v in mon.judge_checkpoints(ckpts)}
    assert not why[30].healthy and "below the best 0.26" in why[30].reason
    assert not why[40].healthy and not why[50].healthy
    assert mon.last_healthy_step(ckpts) == 20
    mon.close()


def test_a_run_falling_from_its_start_is_a_collapse_and_its_start_is_healthy(tmp_path):
    """The lr too high from the start: held-out accuracy never rises above its first
    evaluation. The eval collapse rule counts the starting level as the peak."""
    falling = {s: max(0.0, 0.242 - 0.03 * (s // 10)) for s in range(0, 101, 10)}
    mon = _run(tmp_path, falling, alert_from=None)
    with RunReader(tmp_path / "r") as reader:
        crit = [a for a in reader.alerts() if a.detector == "eval_collapse"]
    assert crit and crit[0].severity == "critical" and crit[0].baseline == 0.242
    first = crit[0].step
    assert mon.last_healthy_step([0, 10, 20, 50, 100]) == 0
    mon.close()
    without = MonitorConfig.from_dict({"detectors": {"eval_collapse": {"from_start": False}}})
    mon = Monitor(tmp_path / "old", controls=CONTROLS, monitor_config=without)
    for step, acc in falling.items():
        mon.log(step, {"eval/acc": acc})
    with RunReader(tmp_path / "old") as reader:
        late = [a for a in reader.alerts() if a.detector == "eval_collapse"]
    assert not late or (late[0].step > first and late[0].baseline < 0.242)  # later, lower peak
    mon.close()


def test_dashboard_and_analyze_never_call_a_collapsed_state_recovered(tmp_path):
    evals = [(s, v) for s, v in EVALS.items()]
    # the episode begins at 45; the pre-episode best is 0.26, not the fallen 0.022 at 40
    assert _back_to(evals, 45, 46) is None
    assert _back_to([*evals, (60, 0.258)], 45, 46)[1] == (60, 0.258)
    mon = _run(tmp_path, EVALS, alert_from=45)
    mon.close()
    rec = analyze_run(str(tmp_path / "r")).recovery
    assert rec is not None and rec["recovered"] is False
    assert rec["eval_acc"] == 0.043 and "pre-episode best 0.26" in rec["why"]


def test_a_warning_the_run_outgrew_is_not_the_episode_its_end_is_judged_by(tmp_path):
    """A public run's shape: a precursor opens and clears while nothing is learned yet
    (held-out 0.001), the run learns to 0.43, then collapses to 0 with a second episode.
    Judged from the first episode it is "back at 0.001"; from the last it lost it all."""
    evals = {0: 0.001, 10: 0.0, 20: 0.002, 30: 0.001, 40: 0.15, 50: 0.3, 60: 0.42}
    evals |= {70: 0.43, 80: 0.41, 90: 0.1, 100: 0.0, 110: 0.0}
    mon = Monitor(tmp_path / "r", controls=CONTROLS)
    for step in range(111):
        kl = 0.5 if 25 <= step < 32 or step >= 85 else 1e-3
        values = {"reward/mean": 0.3, "mismatch/kl_k1": kl}
        if step in evals:
            values["eval/acc"] = evals[step]
        mon.log(step, values)
    mon.close()
    analysis = analyze_run(str(tmp_path / "r"))
    first, last = episode_starts(analysis.alerts)
    assert first < 32 < 85 <= last
    rec = analysis.recovery
    assert rec is not None and rec["episode_start"] == last and rec["recovered"] is False
    assert "pre-episode best 0.43" in rec["why"]


def test_episodes_begin_where_no_earlier_alert_is_open():
    def alert(step, cleared, detector="grad_norm", severity="warning"):
        return {"step": step, "cleared_step": cleared, "detector": detector, "severity": severity}

    alerts = [
        alert(0, None, detector="unclipped_off_policy"),  # a setup rule: how the run was set up
        alert(10, 20),
        alert(15, 30),  # opened while 10's is open: the same episode, now to 30
        alert(30, 31),  # opened the step 15's cleared: touching, still that episode
        alert(32, 33),  # opened after everything before it cleared: a new episode
        alert(40, 41, severity="info"),  # info is no episode
        alert(50, None),
        alert(60, 61, severity="critical"),  # 50's never cleared: still its episode
    ]
    assert episode_starts(alerts) == [10, 32, 50]
    assert episode_starts([]) == []


def test_analyze_tells_the_recovery_verdict_and_a_fork_experiment(tmp_path):
    from monitor.cli.analyze import _text

    mon = _run(tmp_path, EVALS, alert_from=45)
    mon.event(
        "fork_experiment",
        {
            "from_step": 20,
            "k": 4,
            "candidates": [
                {"name": "policy fix", "score": 0.2},
                {"name": "lr halved", "score": 0.3},
            ],
            "chosen": "lr halved",
            "cost_steps": 8,
        },
    )
    mon.close()
    text = _text(analyze_run(str(tmp_path / "r")))
    assert "recovery: NOT recovered at step 50" in text and "pre-episode best 0.26" in text
    assert "fork experiment from the checkpoint of step 20: 2 remedies × 4 steps" in text
    assert "chose lr halved; cost 8 extra steps" in text


def test_the_healthy_lr_is_one_the_run_was_measured_healthy_after(tmp_path):
    """An lr ramped from the start: healthy at 0, 10 and 20, fallen after. A lowered lr
    is measured from the lr at 10 (the evaluation at 20 vouches for it), not from 20's
    (whose own updates nothing vouched for yet) nor the ramp's peak; an evaluation inside
    the episode under way does not count."""
    mon = Monitor(tmp_path / "r", controls=CONTROLS)
    for step in range(51):
        values = {"reward/mean": 0.3, "optim/lr": 1e-5 * step}
        if step in EVALS:
            values["eval/acc"] = EVALS[step]
        mon.log(step, values)
    assert mon.healthy_lr() == 1e-5 * 10
    mon.close()

    mon = Monitor(tmp_path / "w", controls=CONTROLS)  # healthy at 0 and 10 only
    for step in range(41):
        values = {"reward/mean": 0.3, "optim/lr": 1e-5 * step}
        if step in (0, 10, 20, 30, 40):
            values["eval/acc"] = {0: 0.24, 10: 0.25}.get(step, 0.02)
        mon.log(step, values)
    assert mon.healthy_lr() == 1e-5 * 10  # step 0 vouches for no update: 10's own lr
    mon.close()

    evals = {0: 0.24, 10: 0.25, 20: 0.26, 30: 0.26, 40: 0.26}
    mon = Monitor(tmp_path / "e", controls=CONTROLS)
    for step in range(41):  # a precursor opens at 33, its signal moving from ~28
        values = {"reward/mean": 0.3, "optim/lr": 1e-5 * step, "mismatch/kl_k1": 1e-3}
        if step >= 28:
            values["mismatch/kl_k1"] = 0.5
        if step in evals:
            values["eval/acc"] = evals[step]
        mon.log(step, values)
    start = mon.episode_start()
    assert start is not None and 20 < start <= 30
    assert mon.healthy_lr() == 1e-5 * 10  # 30 and 40 are in the episode: 20 is the last
    mon.close()


def test_a_breakdowns_lr_cap_reads_the_alert_that_raised_it(tmp_path):
    """An lr ramped from the start, the reward falling from step 29 and the held-out score
    with it (0.31, 0.33, 0.27, 0.06 at 10-40). The critical's lr cap is measured from the
    lr at 10 (vouched for by 20, the last healthy evaluation), not from 30's: the decision
    sees the critical being raised, so the fallen evaluation at 40 is not taken for noise
    that would make 30 healthy."""
    evals = {10: 0.31, 20: 0.33, 30: 0.27, 40: 0.06}
    mon = Monitor(tmp_path / "r", remediation=True, controls={**CONTROLS, "lr": 6e-4})
    for step in range(1, 61):
        reward = 0.25 * min(step, 20) / 20 if step <= 29 else max(0.0, 0.25 - 0.02 * (step - 29))
        values = {"reward/mean": reward, "optim/lr": 6e-4 * min(step - 1, 32) / 32}
        if step in evals:
            values["eval/acc"] = evals[step]
        mon.log(step, values)
    caps = [a for a in mon.store.all_actions() if a.kind == "set_lr_cap"]
    mon.close()
    assert caps, "no breakdown"
    assert caps[0].params["lr"] == 0.5 * 6e-4 * 9 / 32, caps[0].reason


def test_an_outcome_falls_episode_begins_where_the_fall_began(tmp_path):
    """The reward peaks near step 25 and falls slowly, the held-out score with it (0.43
    at 20, 0.29 at 30, 0.09 at 50); the reward's critical comes only at 68. The alert
    says where the fall began (`since`, where the smoothed reward last stood at its
    peak), so the episode starts there: the evaluations of the fall are not taken for
    noise, the rollback goes to 20 (not 40, 0.30), and the lr cap is measured from 10's."""
    evals = {10: 0.37, 20: 0.43, 30: 0.29, 40: 0.30, 50: 0.09}
    mon = Monitor(tmp_path / "r", remediation=True, controls={**CONTROLS, "lr": 6e-4})
    critical = None
    for step in range(1, 71):
        wobble = 0.03 * (1 if step % 2 else -1)
        level = 0.35 * min(step, 20) / 20 if step <= 25 else 0.35 - 0.006 * (step - 25)
        values = {"reward/mean": level + wobble, "optim/lr": 6e-4 * min(step - 1, 40) / 40}
        if step in evals:
            values["eval/acc"] = evals[step]
        for alert in mon.log(step, values):
            if alert.severity == "critical":
                critical = alert
                verdict = mon.healthy_checkpoint([10, 20, 30, 40, 50, 60])
    assert critical is not None and critical.detector == "reward_collapse"
    margin = mon.cfg.remediation.onset_margin
    assert critical.since is not None and 25 <= critical.since < critical.step - margin
    assert mon.episode_start() == critical.since
    assert verdict.step == 20 and verdict.noise < 0.05
    [cap] = [a for a in mon.store.all_actions() if a.kind == "set_lr_cap"]
    assert cap.params["lr"] == 0.5 * 6e-4 * 9 / 40
    with RunReader(tmp_path / "r") as reader:  # stored, and read back
        assert [a.since for a in reader.alerts()] == [critical.since]
    mon.close()


def test_a_setup_warning_is_not_an_episode_and_leaves_checkpoints_healthy(tmp_path):
    """A run set up length-normalised is warned at step 1 and the warning stays open (a
    trainer that cannot be changed from outside). It says how the run is configured, not
    that it is unwell: no episode starts with it, the checkpoints before a later
    precursor stay healthy, and a precursor's episode starts where its signal moved."""
    from monitor.detectors.rules import LENGTH_NORM

    evals = {10: 0.30, 20: 0.40, 30: 0.42, 40: 0.20}
    mon = Monitor(tmp_path / "r")
    for step in range(1, 41):
        values = {"reward/mean": 0.3, LENGTH_NORM: 1.0, "mismatch/kl_k1": 1e-3}
        if step >= 33:
            values["mismatch/kl_k1"] = 0.5
        if step in evals:
            values["eval/acc"] = evals[step]
        mon.log(step, values)
        if step == 30:
            assert [a.detector for a in mon.store.open_alerts()] == ["length_normalised"]
            assert mon.episode_start() is None
    verdict = mon.healthy_checkpoint([10, 20, 30, 40])
    start = mon.episode_start()
    mon.close()
    assert verdict is not None and verdict.step == 30
    assert start is not None and 30 < start <= 35
