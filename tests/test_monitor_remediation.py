"""The remediation policy (the table in monitor/remediation/policy.py), its limits, its audit
trail in the store, and the action kinds' validation (monitor/remediation/actions.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from alert_factory import make_alert

from core.controls import RunControls
from monitor import Monitor, MonitorConfig, RunReader, UserError
from monitor.config import RemediationConfig
from monitor.remediation.actions import KINDS, apply_to_controls, validate
from monitor.remediation.policy import RemediationPolicy
from monitor.store.records import Action, Alert

CONTROLS = {
    "is_policy": "none",
    "is_cap": 5.0,
    "clip": True,
    "eps_low": 0.2,
    "eps_high": 0.27,
    "routing_replay": "none",
    "mini_batches": 1,
    "length_norm": False,
    "lr": 3e-4,
    "rollout_quant": "none",
    "moe": True,
}


def alert(
    detector="mismatch_kl", factor="train_inference", severity="warning", step=10, id=1, value=1.0
):
    return make_alert(
        detector=detector,
        severity=severity,
        metric="m",
        value=value,
        baseline=0.1,
        factor=factor,
        message="m = 1 (10× baseline)",
        id=id,
        step=step,
    )


def decide(alerts, controls=CONTROLS, history=(), open_alerts=(), step=10, **cfg):
    policy = RemediationPolicy(RemediationConfig(**cfg))
    drafts = policy.decide(step, alerts, controls, list(history), open_alerts)
    return [(d.kind, d.params) for d in drafts], policy.skipped


def with_(**kw):
    return {**CONTROLS, **kw}


def crit(factor: str, detector: str = "breakdown", **kw) -> Alert:
    return alert(detector, factor, "critical", **kw)


def test_a_rollout_precision_floor_holds_against_what_sets_it_later():
    floored = apply_to_controls(CONTROLS, "set_rollout_quant_floor", {"weight_quant": "fp8_e4m3"})
    assert floored.rollout_quant == "none"  # finer than the floor: untouched
    coarser = apply_to_controls(floored, "set_rollout_quant", {"weight_quant": "fp4"})
    assert coarser.rollout_quant == "fp8_e4m3"  # an incident's FP4 is held at the floor
    same_bits = apply_to_controls(floored, "set_rollout_quant", {"weight_quant": "fp8_e5m2"})
    assert same_bits.rollout_quant == "fp8_e5m2"  # as fine as the floor: allowed
    dropped = apply_to_controls(
        with_(rollout_quant="fp4"), "set_rollout_quant_floor", {"weight_quant": "none"}
    )
    assert dropped.rollout_quant == "none"  # a floor above the current format lifts it


def test_a_rollout_precision_drop_is_answered_by_finer_rollouts_not_by_the_loss():
    """bf16 -> FP8 rollouts with IS correction off: the setting is put back (and held),
    not the IS correction turned on; the same drop on a run with a floor as fine already
    asks for nothing more at the warning tier."""
    drop = make_alert(
        detector="rollout_precision_drop",
        severity="warning",
        metric="engine/rollout_bits",
        value=8.0,
        baseline=15.999999999999998,  # a log-scale median: 16 give or take the rounding
        factor="train_inference",
        message="bits fell",
        id=1,
        step=40,
    )
    kinds, _ = decide([drop], with_(rollout_quant="fp8_e5m2"))
    assert kinds == [("set_rollout_quant_floor", {"weight_quant": "none"})]
    four = dataclasses.replace(drop, value=4.0, baseline=8.0)
    assert decide([four])[0] == [("set_rollout_quant_floor", {"weight_quant": "fp8_e4m3"})]
    held = with_(rollout_quant_floor="none")
    assert decide([drop], held)[0] == []
    # a breakdown blamed on it, the floor already in place: the recipe's next step
    crash = dataclasses.replace(drop, detector="breakdown", severity="critical", id=2)
    kinds, _ = decide([crash], with_(rollout_quant_floor="none", is_policy="token_tis"))
    assert kinds == [("rollback", {}), ("set_is_policy", {"policy": "token_tis", "cap": 2.5})]


def test_a_precursor_only_restores_a_recommended_setting():
    # IS correction off: a precursor records the advice; only a breakdown turns it on
    kinds, skipped = decide([alert()])
    assert kinds == [] and [s["kind"] for s in skipped] == ["set_is_correction"]
    assert "only at a breakdown" in skipped[0]["why"] and skipped[0]["alert_id"] == 1
    approx = alert("residual_rise", "approximation")
    assert decide([approx])[0] == [] and decide([approx])[1][0]["kind"] == "set_is_correction"
    assert len(decide([alert(), dataclasses.replace(approx, id=2)])[1]) == 1  # once a step
    crash = decide([crit("train_inference")])[0]
    assert crash == [("rollback", {}), ("set_is_correction", {"enabled": True, "cap": 5.0})]
    kinds, skipped = decide([crit("train_inference", id=3), alert()])  # together: no advice
    assert ("set_is_correction", {"enabled": True, "cap": 5.0}) in kinds and skipped == []
    # already corrected: a warning alone changes nothing (no tightening on a precursor)
    assert decide([alert()], with_(is_policy="token_tis"))[0] == []
    s = alert("staleness_kl", "staleness")
    clip_on = ("set_clip", {"enabled": True, "eps_low": 0.2, "eps_high": 0.27})
    assert decide([s], with_(clip=False, mini_batches=4))[0] == [clip_on]
    assert decide([s], with_(mini_batches=4))[0] == []
    r = alert("routing_stale", "routing")
    assert decide([r], with_(mini_batches=1))[0] == []  # on-policy: R2 no-op, R3 no gain
    assert decide([r], with_(mini_batches=2))[0] == [("set_routing_replay", {"mode": "R2"})]
    assert decide([r], with_(mini_batches=4))[0] == [("set_routing_replay", {"mode": "R3"})]
    assert decide([r], with_(mini_batches=4, routing_replay="R2"))[0] == []
    assert decide([alert("grad_norm", "optimisation")])[0] == []
    # length normalisation breaks the approximation: off on any precursor
    got = decide([alert()], with_(length_norm=True))[0]
    assert got == [("set_length_norm", {"enabled": False})]


def test_a_breakdown_rolls_back_and_fixes_its_factor_escalating_each_time():
    rollback = ("rollback", {})
    ti = crit("train_inference")
    assert decide([ti])[0] == [rollback, ("set_is_correction", {"enabled": True, "cap": 5.0})]
    on = with_(is_policy="token_tis", is_cap=5.0)
    assert decide([ti], on)[0] == [rollback, ("set_is_policy", {"policy": "token_tis", "cap": 2.5})]
    tight = with_(is_policy="seq_tis", is_cap=2.5)  # 2.5 × 0.5 < min_cap 2 → band masking
    assert decide([ti], tight)[0] == [
        rollback,
        ("set_is_policy", {"policy": "icepop", "band": [0.5, 5.0]}),
    ]
    assert decide([ti], with_(is_policy="icepop"))[0] == [rollback]  # nothing left to automate
    st = crit("staleness")
    dense = {"moe": False}  # an MoE at 8 mini-batches also gets R3 (the recipe, below)
    assert decide([st], with_(mini_batches=8, **dense))[0] == [
        rollback,
        ("set_mini_batches_cap", {"n": 4}),
    ]
    # clipping alone does not undo 8×: back on, and the next step of the recipe too
    assert [k for k, _ in decide([st], with_(clip=False, mini_batches=8, **dense))[0]] == [
        "rollback",
        "set_clip",
        "set_mini_batches_cap",
    ]
    ti_off = decide([ti], with_(mini_batches=8, **dense))[0]  # IS off: turning it on is the fix
    assert ti_off == [rollback, ("set_is_correction", {"enabled": True, "cap": 5.0})]
    ro = crit("routing")
    assert decide([ro], with_(mini_batches=4))[0][1] == ("set_routing_replay", {"mode": "R3"})
    assert decide([ro], with_(mini_batches=2, routing_replay="R2"))[0][1] == (
        "set_routing_replay",
        {"mode": "R3"},
    )
    on_policy = decide([ro], with_(is_policy="token_tis", is_cap=5.0))[0]
    assert on_policy[1] == ("set_is_policy", {"policy": "token_tis", "cap": 2.5})
    ap = crit("approximation")
    assert decide([ap], with_(is_policy="token_tis", mini_batches=4))[0][1] == (
        "set_mini_batches_cap",
        {"n": 2},
    )


def test_a_routing_breakdown_with_replay_in_place_is_fixed_by_what_drifted():
    """With R3 already in place, routing that drifts across mini-batches (π_old → π_θ) is
    a staleness problem: fewer mini-batches; a training-inference routing mismatch keeps
    the IS fix; the breakdown's own metric ("precursors") names neither."""
    r3 = with_(mini_batches=4, routing_replay="R3", is_policy="token_tis", is_cap=5.0)
    breakdown = make_alert(
        detector="breakdown", severity="critical", metric="precursors", factor="routing", id=9
    )

    def routing(metric: str, step: int, id: int) -> Alert:
        return make_alert(
            detector="r", severity="warning", metric=metric, factor="routing", step=step, id=id
        )

    drift = routing("routing/mismatch_stale", 5, 1)
    engines = routing("routing/mismatch_train_infer", 7, 2)
    got, _ = decide([breakdown], r3, open_alerts=[engines, drift])  # drift opened first
    assert got == [("rollback", {}), ("set_mini_batches_cap", {"n": 2})]
    got, _ = decide(
        [breakdown], r3, open_alerts=[routing("routing/mismatch_train_infer", 3, 3), drift]
    )
    assert got == [("rollback", {}), ("set_is_policy", {"policy": "token_tis", "cap": 2.5})]
    on_policy = with_(mini_batches=1, routing_replay="R3", is_policy="token_tis", is_cap=5.0)
    got, _ = decide([breakdown], on_policy, open_alerts=[drift])
    assert got == [("rollback", {}), ("set_is_policy", {"policy": "token_tis", "cap": 2.5})]


def test_an_optimisation_breakdown_caps_the_lr_at_half_its_pre_episode_value():
    lr_rise = make_alert(
        detector="lr_rise",
        metric="optim/lr",
        value=1e-3,
        baseline=2e-4,
        window=30,
        factor="optimisation",
        message="lr rose",
        id=5,
        step=48,
    )
    cause = crit("optimisation", value=3.0)
    # a breakdown blamed on the optimisation with the lr rising: half the lr before it rose
    kinds, _ = decide([cause], with_(lr=1e-3), open_alerts=[lr_rise])
    assert kinds == [("rollback", {}), ("set_lr_cap", {"lr": 1e-4})]
    kinds, _ = decide([cause], with_(lr=1e-3))  # no rising lr known: half the current one
    assert kinds == [("rollback", {}), ("set_lr_cap", {"lr": 5e-4})]
    kinds, _ = decide(
        [
            lr_rise.__class__(
                **{**vars(lr_rise), "severity": "critical", "detector": "breakdown", "id": 6}
            )
        ],
        with_(lr=1e-3),
    )
    assert kinds == [("rollback", {}), ("set_lr_cap", {"lr": 1e-4})]  # 0.5 × the baseline 2e-4
    kinds, _ = decide([cause], with_(lr=1e-3, lr_cap=4e-4))  # a cap already: lowered from it
    assert kinds == [("rollback", {}), ("set_lr_cap", {"lr": 2e-4})]
    # a schedule that ramped the lr from the start (no rising alert): half the lr the run
    # was last measurably healthy at, when that is lower than the current one
    kinds, _ = decide([cause], with_(lr=1e-3, lr_healthy=3e-4))
    assert kinds == [("rollback", {}), ("set_lr_cap", {"lr": 1.5e-4})]
    kinds, _ = decide([cause], with_(lr=1e-3, lr_healthy=2e-3))  # never above the current
    assert kinds == [("rollback", {}), ("set_lr_cap", {"lr": 5e-4})]


def test_a_staleness_breakdown_after_more_mini_batches_caps_them_where_they_were():
    rose = make_alert(
        detector="mini_batches_rise",
        metric="staleness/mini_batches",
        value=8.0,
        baseline=2.0,
        factor="staleness",
        message="mini-batches rose",
        id=5,
        step=43,
    )
    st = crit("staleness", step=57, id=6)
    rollback = ("rollback", {})
    eight = with_(mini_batches=8, moe=False)
    assert decide([st], eight, open_alerts=[rose])[0] == [
        rollback,
        ("set_mini_batches_cap", {"n": 2}),  # back to the 2 before they rose, not 8 // 2
    ]
    assert decide([st], eight)[0] == [rollback, ("set_mini_batches_cap", {"n": 4})]
    # already at (or below) the number before the rise: halve
    assert decide([st], with_(mini_batches=2), open_alerts=[rose])[0] == [
        rollback,
        ("set_mini_batches_cap", {"n": 1}),
    ]
    # an outcome alert is fixed for the setting that moved, though a symptom opened first
    early_routing = alert("routing_stale", "routing", step=3, id=1)
    crash = crit("outcome", "reward_collapse", step=60, id=7)
    kinds, _ = decide([crash], eight, open_alerts=[early_routing, rose])
    assert kinds == [rollback, ("set_mini_batches_cap", {"n": 2})]


def test_outcome_and_nonfinite_alerts_fix_the_precursor_that_opened_first():
    early_routing = alert("routing_stale", "routing", step=3, id=1)
    later_is = alert("mismatch_kl", "train_inference", step=7, id=2)
    crash = crit("outcome", "reward_collapse", step=10, id=3)
    kinds, _ = decide([crash], with_(mini_batches=4), open_alerts=[later_is, early_routing])
    assert kinds == [("rollback", {}), ("set_routing_replay", {"mode": "R3"})]
    kinds, _ = decide([crit("optimisation", "nonfinite")], with_(lr=2e-4))
    assert kinds == [("rollback", {}), ("set_lr_cap", {"lr": 1e-4})]
    # a warning from a collapse detector is not a collapse
    assert decide([alert("reward_collapse", "outcome", "warning")])[0] == []


def test_info_alerts_never_act():
    assert decide([alert(severity="info")])[0] == []
    assert decide([alert(severity="warning")], min_severity="critical")[0] == []


def past(kind, step, status="applied", source="policy", id=1):
    return Action(id, kind, {}, "earlier", source, None, status, step, 0.0)


def test_limits_pending_attempts_cooldown_and_rollbacks():
    a, off = [alert("staleness_kl", "staleness")], with_(clip=False)

    def go(history, step=10):
        return decide(a, off, history=history, step=step)

    kinds, skipped = go([past("set_clip", 5, status="pending", source="dashboard")])
    assert kinds == [] and "already pending" in skipped[0]["why"]
    kinds, skipped = go([past("set_clip", s, id=i) for i, s in enumerate([0, 100, 200])], 400)
    assert kinds == [] and "limit of 3" in skipped[0]["why"]
    kinds, skipped = go([past("set_clip", 0)], step=14)
    assert kinds == [] and "cooldown" in skipped[0]["why"]
    assert go([past("set_clip", 0)], step=15)[0] != []
    # requests from the dashboard do not use up the policy's attempts
    assert go([past("set_clip", s, source="dashboard") for s in (0, 1, 2)], step=300)[0]
    crash = [alert("nonfinite", "optimisation", "critical")]
    two = [past("rollback", 0, id=1), past("rollback", 100, id=2)]
    kinds, skipped = decide(crash, history=two, step=500)
    assert ("rollback", {}) not in kinds and any("rollback" in s["why"] for s in skipped)
    assert ("set_lr_cap", {"lr": 1.5e-4}) in kinds  # the rest of the recipe still goes


def test_a_breakdown_held_back_by_the_cooldown_is_acted_on_when_it_ends():
    """A collapse that resumed within the cooldown raises a critical that stays open and
    never fires again: it is decided again once the cooldown has passed, if still open
    and raised after the rollback was applied (one raised before is the same fall seen
    late, which the rollback undid)."""
    policy = RemediationPolicy(RemediationConfig(cooldown_steps=15))
    crash = alert("eval_collapse", "outcome", "critical", step=30, id=7)
    rollback = dataclasses.replace(past("rollback", 21, id=1), resolved_step=22)
    history = [rollback, past("set_lr_cap", 21, id=2)]
    assert policy.decide(30, [crash], CONTROLS, history, [crash]) == []
    assert {h["retry_at"] for h in policy.skipped} == {36}
    assert policy.due(35, [crash], history) == []  # not yet
    assert policy.due(36, [crash], history) == [crash]
    assert policy.due(37, [crash], history) == []  # handed back once
    drafts = policy.decide(36, [crash], CONTROLS, history, [crash])
    assert [d.kind for d in drafts][:1] == ["rollback"]
    # cleared before the cooldown ended: nothing to do
    policy.decide(30, [crash], CONTROLS, history, [crash])
    assert policy.due(40, [], history) == [] and policy.deferred == {}
    # raised before the rollback was applied: the fall the rollback undid
    late = alert("eval_collapse", "outcome", "critical", step=22, id=8)
    policy.decide(22, [late], CONTROLS, history, [late])
    assert 8 in policy.deferred and policy.due(36, [late], history) == []


def test_the_monitor_acts_on_a_collapse_that_resumed_within_the_cooldown(tmp_path):
    """The reward's critical at 39 is acted on; the held-out score's, at 44, comes within
    the cooldown and stays open: it is acted on when the cooldown ends (54), not never."""
    cfg = MonitorConfig.from_dict({"remediation": {"cooldown_steps": 15}})
    mon = Monitor(tmp_path / "r", controls=CONTROLS, monitor_config=cfg, remediation=True)
    criticals = []
    for i in range(100):
        wobble = 0.02 * math.sin(1.7 * i)
        values = {"reward/mean": max(0.0, 0.6 - 0.01 * i) + wobble}
        if i % 2 == 0:
            values["eval/acc"] = max(0.0, 0.5 - 0.012 * max(0, i - 20)) + wobble
        criticals += [(a.step, a.detector) for a in mon.log(i, values) if a.severity == "critical"]
        for a in mon.pending_actions():
            mon.resolve(a.id, "applied", "test")
    rollbacks = [a.step for a in mon.store.all_actions() if a.kind == "rollback"]
    mon.close()
    assert criticals == [(39, "reward_collapse"), (44, "eval_collapse")]
    assert rollbacks == [39, 54]


def _healthy_step(i: int, kl: float) -> dict[str, float]:
    noise = 1.0 + 0.05 * math.sin(1.7 * i)  # deterministic wobble
    return {"mismatch/kl_k1": kl * noise, "reward/mean": 0.5, "optim/grad_norm": noise}


def _episode(i: int, *starts: int) -> bool:
    """The mismatch KL is 500× its level for 10 steps from each start."""
    return any(s <= i < s + 10 for s in starts)


def test_monitor_remediation_is_off_by_default(tmp_path):
    mon = Monitor(tmp_path / "r", controls=CONTROLS)
    alerts = []
    for i in range(60):
        alerts += mon.log(i, _healthy_step(i, 0.5 if _episode(i, 40) else 1e-3))
    # the level is information (step 42: 3 steps ≥ 0.01); the change is a precursor
    # (the median of the last 3 moves at 41, then 3 in a row: step 43)
    assert [(a.step, a.detector, a.severity) for a in alerts] == [
        (42, "mismatch_level", "info"),
        (43, "mismatch_kl_k1", "warning"),
    ]
    assert mon.pending_actions() == []
    mon.close()


def test_monitor_loop_acts_applies_and_audits(tmp_path):
    cfg = MonitorConfig.from_dict({"remediation": {"cooldown_steps": 30}})
    controls = with_(length_norm=True)
    mon = Monitor(tmp_path / "r", controls=controls, monitor_config=cfg, remediation=True)
    applied = []
    for i in range(200):
        mon.log(i, _healthy_step(i, 0.5 if _episode(i, 40, 100, 160) else 1e-3))
        for action in mon.pending_actions():  # the trainer's side of the contract
            mon.resolve(action.id, "applied", f"applied at step {i}")
            applied.append((i, action.kind, action.params))
    # the first precursor turns length normalisation off; the later ones find IS
    # correction off, which a precursor only advises (a warning never tightens anything)
    assert applied == [(43, "set_length_norm", {"enabled": False})]
    assert mon.controls.length_norm is False and mon.controls.is_policy == "none"
    mon.close()
    with RunReader(tmp_path / "r") as r:
        advice = r.events("remediation_skipped")
        assert [(e.step, e.detail["kind"]) for e in advice] == [
            (103, "set_is_correction"),
            (163, "set_is_correction"),
        ]
        actions = r.actions()
        assert [a.status for a in actions] == ["applied"]
        alerts = {a.id: a for a in r.alerts()}
        for a in actions:
            assert a.source == "policy" and a.alert_id in alerts
            assert alerts[a.alert_id].detector == "mismatch_kl_k1"
            assert a.reason.startswith("mismatch_kl_k1 (warning)")
        assert r.meta().controls["length_norm"] is False


def test_limits_survive_a_resume(tmp_path):
    cfg = MonitorConfig.from_dict({"remediation": {"max_attempts": 1, "cooldown_steps": 0}})
    controls = with_(length_norm=True)
    mon = Monitor(tmp_path / "r", controls=controls, monitor_config=cfg, remediation=True)
    for i in range(50):
        mon.log(i, _healthy_step(i, 0.5 if _episode(i, 30) else 1e-3))
    (first,) = mon.pending_actions()
    mon.resolve(first.id, "rejected", "the user said no")
    mon.close()
    mon = Monitor(tmp_path / "r", monitor_config=cfg, remediation=True, resume=True)
    for i in range(50, 100):
        mon.log(i, _healthy_step(i, 0.5 if _episode(i, 80) else 1e-3))
    assert mon.pending_actions() == []  # the one attempt was used before the resume
    mon.close()
    with RunReader(tmp_path / "r") as r:
        skipped = r.events("remediation_skipped")
        assert skipped and "limit of 1" in skipped[-1].detail["why"]


# --------------------------------------------------------------------------- action kinds


def test_every_kind_validates_and_applies_to_controls():
    cases = {
        "set_is_correction": (
            {"enabled": True, "cap": 3},
            {"is_policy": "token_tis", "is_cap": 3.0},
        ),
        "set_is_policy": (
            {"policy": "seq_mis", "band": (0.5, 2)},
            {"is_policy": "seq_mis", "is_band": [0.5, 2.0]},
        ),
        "set_clip": ({"enabled": True, "eps_high": 0.3}, {"eps_high": 0.3}),
        "set_routing_replay": ({"mode": "R3"}, {"routing_replay": "R3"}),
        "set_mini_batches": ({"n": 2}, {"mini_batches": 2}),
        "set_mini_batches_cap": ({"n": 2}, {"mini_batches_cap": 2}),  # 1 is below the cap
        "set_length_norm": ({"enabled": True}, {"length_norm": True}),
        "scale_lr": ({"factor": 0.5}, {"lr": 3e-4 * 0.5}),
        "set_lr_cap": ({"lr": 1e-4}, {"lr_cap": 1e-4}),
        "set_rollout_quant": ({"weight_quant": "fp4"}, {"rollout_quant": "fp4"}),
        "set_rollout_quant_floor": ({"weight_quant": "fp4"}, {"rollout_quant_floor": "fp4"}),
        "rollback": ({"step": 40}, {}),
        "stop": ({}, {}),
        "advice": ({"trainer": "verl", "overrides": ["a.b=1"], "step": 20}, {}),
    }
    assert set(cases) == set(KINDS)
    for kind, (params, changed) in cases.items():
        before = RunControls.of(CONTROLS).to_data()
        after = apply_to_controls(CONTROLS, kind, params).to_data()
        diff = {k: v for k, v in after.items() if before.get(k) != v}
        assert diff == changed, kind
    assert CONTROLS["is_policy"] == "none"  # the input is never mutated


@pytest.mark.parametrize(
    ("kind", "params", "msg"),
    [
        ("set_is_correction", {}, "missing param"),
        ("set_is_correction", {"enabled": 1}, "true or false"),
        ("set_is_correction", {"enabled": True, "cap": 1.0}, "cap must be > 1"),
        ("set_is_policy", {"policy": "magic"}, "must be one of"),
        ("set_is_policy", {"policy": "icepop", "band": [2, 5]}, r"band\[0\] must be in \(0, 1\)"),
        ("set_is_policy", {"policy": "icepop", "band": [0.5]}, "band must be"),
        ("set_is_policy", {"policy": "none", "cap": 5}, "takes no cap"),
        ("set_clip", {"enabled": True, "eps_low": 1.5}, "eps_low must be in"),
        ("set_routing_replay", {"mode": "R4"}, "must be one of"),
        ("set_mini_batches", {"n": 1.5}, "integer"),
        ("set_mini_batches", {"n": True}, "integer"),
        ("scale_lr", {"factor": 0}, r"in \(0, 10\]"),
        ("scale_lr", {"factor": 11}, r"in \(0, 10\]"),
        ("scale_lr", {"factor": math.nan}, r"in \(0, 10\]"),
        ("rollback", {"step": -1}, "≥ 0"),
        ("stop", {"now": True}, "unknown param"),
        ("advice", {"trainer": "verl"}, "missing param"),
        ("advice", {"trainer": "verl", "overrides": "a=1"}, "list of strings"),
        ("advice", {"trainer": "verl", "overrides": ["a=1", ""]}, "non-empty string"),
        ("advice", {"trainer": "", "overrides": []}, "non-empty string"),
        ("explode", {}, "unknown action kind"),
    ],
)
def test_bad_actions_are_one_line_errors(kind, params, msg):
    with pytest.raises(UserError, match=msg) as err:
        validate(kind, params)
    assert "\n" not in str(err.value)


def test_last_healthy_checkpoint_is_before_the_first_open_alert(tmp_path):
    mon = Monitor(tmp_path / "r", controls=CONTROLS)
    for i in range(100):
        kl = 0.05 if 60 <= i < 70 else 1e-3  # a precursor from 63, calm again from 71
        mon.log(i, {**_healthy_step(i, kl), "x/info": 1.0})
    assert mon.last_healthy_step([20, 40, 60, 80]) == 80  # the precursor cleared at 75
    for i in range(100, 130):
        mon.log(i, _healthy_step(i, 0.05 if i >= 110 else 1e-3))  # open from 113
    # the episode began 5 steps (onset_margin) before the alert: 108
    assert mon.last_healthy_step([20, 40, 100, 107, 108, 120]) == 107
    assert mon.last_healthy_step([108, 120]) is None
    mon.close()


def test_an_episode_begun_by_a_setting_starts_at_its_step(tmp_path):
    """A setting's alert is exact (it opens the step the setting moved), so the episode
    starts there, without the symptoms' onset margin: the checkpoint taken the step
    before the rise is healthy, the one at the rise is not."""
    mon = Monitor(tmp_path / "r", controls=CONTROLS)
    for i in range(60):
        mon.log(i, {**_healthy_step(i, 1e-3), "staleness/mini_batches": 8.0 if i >= 40 else 2.0})
    assert [a.detector for a in mon.store.open_alerts()] == ["mini_batches_rise"]
    assert mon.episode_start() == 40
    assert mon.last_healthy_step([20, 30, 39, 40, 50]) == 39
    mon.close()


def test_a_mini_batch_cap_holds_against_a_later_raise():
    """The staleness fix is a cap: the monitor's view lowers the knob to it at once and
    keeps it there when something (an incident, a request) raises it again."""
    capped = apply_to_controls({**CONTROLS, "mini_batches": 8}, "set_mini_batches_cap", {"n": 4})
    assert (capped.mini_batches, capped.mini_batches_cap) == (4, 4)
    raised = apply_to_controls(capped, "set_mini_batches", {"n": 8})
    assert raised.mini_batches == 4
    assert apply_to_controls(capped, "set_mini_batches", {"n": 2}).mini_batches == 2


def test_a_staleness_fix_that_did_not_hold_takes_the_next_step_on_a_warning():
    """Clipping came back (or the mini-batches were capped) and staleness rose again: the
    next precursor caps the mini-batches at half. Without an earlier staleness fix, or
    after one by an operator, a warning on a run in the recommended setting changes
    nothing; an on-policy run has no mini-batches to cut."""
    s = alert("staleness_kl", "staleness", step=60)
    four = with_(mini_batches=4)
    assert decide([s], four, history=[past("set_clip", 43)], step=60)[0] == [
        ("set_mini_batches_cap", {"n": 2})
    ]
    assert decide([s], four, history=[past("set_mini_batches_cap", 43)], step=60)[0] == [
        ("set_mini_batches_cap", {"n": 2})
    ]
    assert decide([s], four, step=60)[0] == []
    assert decide([s], four, history=[past("set_clip", 43, source="dashboard")], step=60)[0] == []
    assert decide([s], four, history=[past("set_is_correction", 43)], step=60)[0] == []
    assert decide([s], with_(mini_batches=1), history=[past("set_clip", 43)], step=60)[0] == []
    # the limits hold: a cap 10 steps ago is still cooling down
    kinds, skipped = decide([s], four, history=[past("set_mini_batches_cap", 50)], step=60)
    assert kinds == [] and "cooldown" in skipped[0]["why"]


def test_the_recipe_for_the_run_as_configured_applies_whatever_factor_is_blamed():
    """Set so from the start (no setting moved, no alert on it): an off-policy run without
    clipping gets it at any breakdown and at any precursor; FP4 rollouts without IS get IS
    at a breakdown; an MoE at 8 mini-batches gets R3; an outcome collapse with nothing to
    blame caps the lr and halves the mini-batches."""
    clip_on = ("set_clip", {"enabled": True, "eps_low": 0.2, "eps_high": 0.27})
    is_on = ("set_is_correction", {"enabled": True, "cap": 5.0})
    noclip4 = with_(clip=False, mini_batches=4, is_policy="token_tis", moe=False)
    # blamed on the training-inference factor (ESS moved first): the IS fix and clipping
    got = decide([crit("train_inference")], noclip4)[0]
    assert got == [
        ("rollback", {}),
        ("set_is_policy", {"policy": "token_tis", "cap": 2.5}),
        clip_on,
    ]
    # the same run at a precursor of any factor: clipping, and nothing else
    assert decide([alert()], noclip4)[0] == [clip_on]
    assert decide([alert("grad_norm", "optimisation")], noclip4)[0] == [clip_on]
    # IS off as well: the precursor records the IS advice and still turns clipping on
    kinds, skipped = decide([alert()], with_(clip=False, mini_batches=4, moe=False))
    assert kinds == [clip_on] and [s["kind"] for s in skipped] == ["set_is_correction"]
    assert decide([alert()], with_(clip=False, mini_batches=1))[0] == []  # on-policy: no need
    # an outcome collapse with no precursor open, configured 8× without clipping on an MoE
    crash = crit("outcome", "eval_collapse")
    got = dict(decide([crash], with_(clip=False, mini_batches=8, lr=1e-3))[0])
    assert got["set_clip"] == clip_on[1] and got["set_routing_replay"] == {"mode": "R3"}
    assert got["set_lr_cap"] == {"lr": 5e-4} and got["set_mini_batches_cap"] == {"n": 4}
    # FP4 rollouts without IS from the start: IS on at a breakdown blamed elsewhere
    fp4 = with_(rollout_quant="fp4", clip=True, mini_batches=1)
    got = decide([crit("staleness")], fp4)[0]
    assert is_on in got and "set_routing_replay" not in dict(got)
    assert is_on not in decide([crit("staleness")], with_(mini_batches=1))[0]  # bf16: not low
    # the lr too high from the start, on-policy: the lr cap at half, nothing else
    assert decide([crash], with_(lr=1.5e-3))[0] == [
        ("rollback", {}),
        ("set_lr_cap", {"lr": 7.5e-4}),
    ]
