"""What the breakdown and change rules promise, pinned so that a hand edit to the rule fails.

The breakdown detector is driven here by its input alone (the other detectors' alert
changes), so each test states one promise: precursors expire after `horizon` steps, an
outcome warning is not a precursor, the critical stays open while any precursor is open,
and blame goes by factor specificity before order. The change rule's `admit_z` filter is
pinned on a stream whose numbers give the score by hand.
"""

from __future__ import annotations

from rule_factory import linear_rule

from monitor.detectors.base import Gate
from monitor.detectors.breakdown import BreakdownDetector, blame_rank
from monitor.detectors.change import ChangeDetector
from monitor.detectors.rules import SETTINGS, BreakdownRule
from monitor.store.records import AlertDraft, Cleared, Factor

RULE = BreakdownRule()  # min_signals 3, horizon 30, outcome_drop 0.25, extreme 1000


def warn(
    metric: str, factor: Factor = "staleness", detector: str | None = None, value: float = 1e3
) -> AlertDraft:
    """A precursor warning, by default 1000× its baseline (joint evidence of a run getting
    worse: `BreakdownRule.extreme`)."""
    return AlertDraft(
        detector=detector or metric.replace("/", "_"),
        severity="warning",
        metric=metric,
        value=value,
        baseline=1.0,
        window=20,
        factor=factor,
        message="",
        remedy="",
    )


def drive(script: dict[int, list], last: int, drops: dict[int, float] | None = None):
    """Feed `script` (step -> alert changes) to a fresh breakdown detector for steps
    0..last; the detector's output as (step, AlertDraft | Cleared)."""
    d = BreakdownDetector(RULE)
    out = []
    for step in range(last + 1):
        drop = (drops or {}).get(step, 0.0)
        out += [(step, x) for x in d.update(step, script.get(step, []), drop)]
    return out


def criticals(events) -> list[int]:
    return [s for s, x in events if isinstance(x, AlertDraft)]


# ---------------------------------------------------------------------------- horizon
def test_a_precursor_older_than_the_horizon_no_longer_counts():
    h = RULE.horizon
    two = [warn("staleness/kl_k3"), warn("staleness/mask_frac")]
    in_time = drive({0: two, h - 1: [warn("optim/grad_norm", "optimisation")]}, h + 5)
    assert criticals(in_time) == [h - 1]
    late = drive({0: two, h: [warn("optim/grad_norm", "optimisation")]}, h + 5)
    assert criticals(late) == []


def test_an_expired_precursor_does_not_join_a_falling_outcome():
    h = RULE.horizon
    one = {0: [warn("staleness/kl_k3")]}
    assert criticals(drive(one, h + 2, drops={h - 1: 0.6})) == [h - 1]
    assert criticals(drive(one, h + 2, drops={h: 0.6})) == []


# ---------------------------------------------------------------------------- outcome
def test_outcome_warnings_are_not_precursors():
    reward = warn("reward/mean", "outcome", detector="reward_collapse")
    two = [warn("staleness/kl_k3"), warn("optim/grad_norm", "optimisation")]
    assert criticals(drive({5: [*two, reward]}, 20)) == []
    assert criticals(drive({5: [reward]}, 20, drops={10: 0.9})) == []  # nothing but the outcome
    third = warn("policy/entropy", "optimisation")
    assert criticals(drive({5: [*two, third]}, 20)) == [5]  # the same with a real third


# ---------------------------------------------------------------------------- clearing
def test_the_critical_stays_open_while_any_precursor_is_open():
    a, b, c = warn("staleness/kl_k3"), warn("optim/grad_norm", "optimisation"), warn("x/len")
    script = {
        3: [a, b, c],
        10: [Cleared(a.detector, a.metric)],  # two still open: no longer joint evidence
        20: [Cleared(b.detector, b.metric)],
        80: [Cleared(c.detector, c.metric)],  # the last one, long after the horizon
    }
    ev = drive(script, 100)
    assert criticals(ev) == [3]  # raised once, not again while open
    assert [s for s, x in ev if isinstance(x, Cleared)] == [80]
    assert all(x.metric == "precursors" for _, x in ev if isinstance(x, Cleared))


def test_after_clearing_a_new_breakdown_is_raised_again():
    a, b, c = warn("staleness/kl_k3"), warn("optim/grad_norm", "optimisation"), warn("x/len")
    gone = [Cleared(x.detector, x.metric) for x in (a, b, c)]
    ev = drive({3: [a, b, c], 10: gone, 50: [a, b, c]}, 60)
    assert criticals(ev) == [3, 50]
    assert [s for s, x in ev if isinstance(x, Cleared)] == [10]


# ---------------------------------------------------------------------------- blame
def blamed(order: list[AlertDraft]) -> AlertDraft:
    """The critical raised when `order` opens one step apart (earliest first)."""
    ev = drive({i: [a] for i, a in enumerate(order)}, len(order))
    (_, crit), *_ = [(s, x) for s, x in ev if isinstance(x, AlertDraft)]
    return crit


def test_blame_goes_by_specificity_before_order():
    grad = warn("optim/grad_norm", "optimisation")
    resid = warn("approx/seq_residual", "approximation")
    stale = warn("staleness/kl_k3", "staleness")
    lr = warn("optim/lr", "optimisation", detector="lr_rise")
    crit = blamed([grad, resid, stale])  # the symptom first, the IS factor last
    assert crit.factor == "staleness" and "staleness moved first (staleness_kl_k3" in crit.message
    crit = blamed([grad, resid, warn("policy/entropy", "optimisation")])
    assert crit.factor == "approximation"  # the residual before the optimisation's symptoms
    crit = blamed([stale, resid, lr])  # a setting beats everything, whenever it moved
    assert "optimisation is the cause (lr_rise" in crit.message
    crit = blamed([grad, warn("x/len", "optimisation"), warn("y/z", "optimisation")])
    assert "(optim_grad_norm at step 0)" in crit.message  # within a tier, the earliest


def test_blame_rank_tiers():
    ranks = [
        blame_rank(SETTINGS[0], "optimisation", SETTINGS),
        blame_rank("routing/mismatch_stale", "routing", SETTINGS),
        blame_rank("approx/seq_residual", "approximation", SETTINGS),
        blame_rank("optim/grad_norm", "optimisation", SETTINGS),
    ]
    assert ranks == sorted(ranks) and len(set(ranks)) == 4
    assert len({blame_rank("m", f, ()) for f in ("train_inference", "staleness", "routing")}) == 1


# ---------------------------------------------------------------------------- change: admit_z
def probe(admit_z: float = 2.0) -> ChangeDetector:
    """Linear scale, spread floored at 1, no warm-up, gap, smoothing or persistence: the
    score of x against a baseline of zeros is x itself."""
    rule = linear_rule(
        "optimisation", "", warmup=0, gap=0, admit_z=admit_z, min_baseline=10, window=40
    )
    return ChangeDetector("probe", rule)


def feed(d: ChangeDetector, values: list[float]) -> list[tuple[int, AlertDraft]]:
    return [
        (i, x)
        for i, v in enumerate(values)
        for x in d.update(i, {"x/m": v})
        if isinstance(x, AlertDraft)
    ]


def test_a_remarkable_value_does_not_teach_the_baseline():
    values = [0.0] * 20 + [2.5] * 30 + [3.2]  # 2.5: above admit_z, below z
    ((step, alert),) = feed(probe(), values)
    assert step == 50 and alert.baseline == 0.0 and alert.window == 20
    assert feed(probe(admit_z=float("inf")), values) == []  # had they taught it, no alert


def test_an_unremarkable_value_does_teach_the_baseline():
    values = [0.0] * 20 + [1.5] * 30 + [3.2]  # 1.5 < admit_z: joins; median → 1.5
    assert feed(probe(), values) == []
    d = probe()
    feed(d, values)
    assert d.score() is not None and d.score()[2] == 1.5


def test_gate_fire_and_calm_are_independent_of_detectors():
    g = Gate(persist=2, clear_after=2, cooldown=5)
    assert [g.fire(0, "warning"), g.fire(1, "warning")] == [False, True]
    assert [g.calm(2), g.calm(3)] == [False, True] and not g.open


# ---------------------------------------------------------------------------- getting worse
def test_joint_precursors_page_only_with_a_setting_or_an_extreme_jump():
    mild = [warn(m, value=5.0) for m in ("staleness/kl_k3", "optim/grad_norm", "x/len")]
    assert criticals(drive({3: mild}, 10)) == []  # changing, not getting worse
    jump = [*mild[:2], warn("x/len", value=RULE.extreme)]
    assert criticals(drive({3: jump}, 10)) == [3]
    below = [*mild[:2], warn("x/len", value=RULE.extreme * 0.99)]
    assert criticals(drive({3: below}, 10)) == []
    fell = [*mild[:2], warn("policy/entropy", value=1.0 / RULE.extreme)]  # either way
    fell[2] = AlertDraft(**{**fell[2].__dict__, "baseline": 1.0})
    assert criticals(drive({3: fell}, 10)) == [3]
    setting = [*mild[:2], warn("optim/lr", value=1.5, detector="lr_rise")]
    assert criticals(drive({3: setting}, 10)) == [3]
    assert criticals(drive({3: mild[:1]}, 10, drops={5: 0.3})) == [5]  # the outcome confirms


def test_a_kl_that_was_zero_learns_its_baseline_from_its_own_level_not_a_floor():
    from monitor.detectors import DetectorSet
    from monitor.detectors.config import DetectorsConfig

    # on-policy at first (KL exactly 0), then an ordinary off-policy level of 3e-4..6e-4
    kl = [0.0] * 30 + [3e-4 * (1 + (i % 3)) for i in range(120)]
    d = DetectorSet(DetectorsConfig())
    events = [x for i, v in enumerate(kl) for x in d.update(i, {"staleness/kl_k1": v})]
    assert [x for x in events if isinstance(x, AlertDraft)] == []
    d = DetectorSet(DetectorsConfig())  # the same level rising tenfold later is flagged
    kl += [3e-3 * (1 + (i % 3)) for i in range(20)]
    events = [x for i, v in enumerate(kl) for x in d.update(i, {"staleness/kl_k1": v})]
    assert [x.detector for x in events if isinstance(x, AlertDraft)] == ["staleness_kl_k1"]


def test_sharpening_is_info_while_the_outcome_holds_and_a_warning_once_it_falls():
    from monitor.detectors import DetectorSet
    from monitor.detectors.config import DetectorsConfig

    def entropy_alerts(reward):
        d = DetectorSet(DetectorsConfig())
        rows = [
            {"policy/entropy": 1.0 if i < 60 else 0.2, "reward/mean": reward(i)} for i in range(100)
        ]
        return [
            x.severity
            for i, row in enumerate(rows)
            for x in d.update(i, row)
            if isinstance(x, AlertDraft) and x.detector == "entropy_drop"
        ]

    assert entropy_alerts(lambda i: 0.2 + 0.005 * i) == ["info"]  # learning: sharpening
    assert entropy_alerts(lambda i: 0.6 if i < 50 else 0.05) == ["warning"]  # falling
