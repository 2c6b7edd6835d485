"""Episodes and markers (dashboard/marks.py), how they are drawn (dashboard/overlays.py)
and the run's story (dashboard/story.py), on hand-built alert timelines and on a run the
real Monitor wrote (detectors and remediation on).

What must hold for a reader of the live page: an info level (a mismatch large since step
1) never shades anything; an episode runs from its first warning to the step its last
alert cleared and is labelled with the factor it blames; alerts get one marker per
episode, not one per alert; actions, rollbacks and induced incidents sit at the step
boundary where they happened, each drawn differently and labelled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from alert_factory import make_alert
from stream_factory import IS_OFF, kl_jump

from dashboard import charts
from dashboard import marks as mk
from dashboard.marks import Span
from dashboard.overlays import ACTION_COLORS, INCIDENT_COLOR, ROLLBACK_COLOR
from dashboard.story import story
from monitor import Monitor, RunReader
from monitor.store.records import Action, Event


def alert(step, cleared=None, severity="warning", factor="train_inference", aid=1, det="x"):
    return make_alert(
        detector=det,
        severity=severity,
        metric="mismatch/kl_k3",
        value=0.04,
        factor=factor,
        id=aid,
        step=step,
        time=0.0,
        cleared_step=cleared,
    )


def action(aid, kind, status, step, resolved=None, source="policy", **params):
    return Action(aid, kind, params, "why", source, None, status, step, 0.0, resolved_step=resolved)


# ----------------------------------------------------------------------------- episodes


def test_episodes_merge_overlaps_and_never_come_from_info():
    alerts = [
        alert(1, None, severity="info", aid=9),  # a level since step 1: never shaded
        alert(10, cleared=15, factor="staleness"),  # steps 10..14
        alert(12, cleared=20, severity="critical", factor="routing", aid=2),  # 12..19
        alert(20, cleared=22, aid=3),  # touches: 20..21 joins
        alert(40, None, aid=4),  # open: to the last step
        alert(50, cleared=50, aid=6),  # cleared at once, inside the open episode
    ]
    spans = mk.breakdown_spans(alerts, last_step=60)
    assert spans == [
        Span(10, 21, "critical", ("staleness", "routing", "train_inference"), "staleness"),
        Span(40, 60, "warning", ("train_inference",), "train_inference", open=True),
    ]
    assert mk.breakdown_spans([alert(1, None, severity="info")], last_step=60) == []
    one = mk.breakdown_spans([alert(5, None)], last_step=None)
    assert one == [Span(5, 5, "warning", ("train_inference",), "train_inference", open=True)]


def test_a_breakdown_names_the_episode_whatever_opened_it():
    alerts = [
        alert(30, None, factor="optimisation", det="grad_norm"),
        alert(31, None, factor="staleness", aid=2, det="staleness_kl"),
        alert(33, None, severity="critical", factor="staleness", aid=3, det="breakdown"),
    ]
    [span] = mk.breakdown_spans(alerts, last_step=50)
    assert (span.label, span.severity, span.start, span.end) == ("staleness", "critical", 30, 50)
    # an outcome alert turning critical does not take the name from the precursor
    outcome = [alert(30, None, factor="routing"), alert(35, None, "critical", "outcome", 2)]
    assert mk.breakdown_spans(outcome, 40)[0].label == "routing"


def test_limit_spans_merges_the_closest_first():
    spans = [Span(s, s + 1, "warning", ("x",), "x") for s in (0, 10, 13, 30, 31, 100)]
    spans = mk.merge_spans(spans, gap=1)  # 30..31 and 31..32 touch
    assert len(spans) == 5
    limited = mk.limit_spans(spans, 3)
    assert [(s.start, s.end) for s in limited] == [(0, 14), (30, 32), (100, 101)]
    assert mk.limit_spans(spans, 10) == spans
    # evenly spaced alerts: exactly max_spans spans, not one span over the whole run
    even = [
        Span(s, s + 20, "critical" if s == 500 else "warning", ("x",))
        for s in range(0, 10_000, 500)
    ]
    limited = mk.limit_spans(even, 5)
    assert len(limited) == 5 and limited[0].start == 0 and limited[-1].end == 9520
    assert sum(sp.end - sp.start for sp in limited) < 10_000
    assert limited[0].severity == "critical"  # the worst severity survives the merge


# ----------------------------------------------------------------------------- markers


def test_one_alert_marker_per_episode_and_one_where_it_turned_critical():
    alerts = [alert(s, None, aid=s, factor="staleness") for s in range(30, 40)]
    alerts.append(alert(41, None, "critical", "staleness", aid=99, det="breakdown"))
    alerts.append(alert(2, None, severity="info", aid=100))
    marks = mk.alert_marks(alerts, last_step=60)
    assert [(m.step, m.kind, m.level, m.label) for m in marks] == [
        (30, "alert", "warning", "staleness"),
        (41, "critical", "critical", "critical"),
    ]
    assert marks[0].text.count("#") == 8 and "and 3 more" in marks[0].text  # hover: capped
    assert "blamed: staleness" in marks[0].text and "#100" not in marks[0].text


def test_actions_rollbacks_and_incidents_sit_at_the_step_boundary():
    acts = [
        action(1, "set_is_correction", "pending", 5, source="dashboard", enabled=True),
        action(2, "set_clip", "applied", 6, resolved=8, enabled=True),
        action(3, "set_mini_batches", "rejected", 6, resolved=8, n=0),
    ]
    marks = mk.action_marks(acts, last_step=9)
    assert [(m.step, m.level, m.label) for m in marks] == [
        (9, "pending", "IS on"),
        (8.5, "applied", "clip on"),
        (8.5, "rejected", "mini-batches 0"),
    ]
    assert "set_is_correction (enabled=True) · pending · from dashboard" in marks[0].text
    events = [
        Event(1, 29, "incident", {"note": "induced incident at step 30: clipping switched off"}),
        Event(2, 29, "incident", {"note": "induced incident at step 30: mini-batches jump to 8"}),
        Event(3, 38, "rollback", {"to_step": 30, "eval_acc_after": 0.41, "eval_acc_before": 0.41}),
        Event(4, 38, "checkpoint", {"step": 38}),
    ]
    [inc] = mk.incident_marks(events)
    assert inc.step == 29.5 and inc.label.startswith("induced: clipping switched off; mini")
    [rb] = mk.rollback_marks(events)
    assert (rb.step, rb.label) == (38.5, "rolled back to step 30") and "0.410" in rb.text


def test_health_and_info_levels():
    assert mk.health([]) == "healthy"
    assert mk.health([alert(1, severity="info")]) == "healthy"
    assert mk.health([alert(1), alert(2, severity="critical")]) == "critical"
    notes = mk.info_levels([alert(1, severity="info"), alert(3, 9, severity="info"), alert(4)])
    assert notes == ["mismatch/kl_k3 0.04 (train_inference, since step 1)"]


def test_figure_draws_actions_rollbacks_and_incidents_differently():
    events = [
        Event(1, 29, "incident", {"note": "induced incident at step 30: clipping off"}),
        Event(2, 38, "rollback", {"to_step": 30}),
    ]
    marks = [
        *mk.alert_marks([alert(33, None, factor="staleness")], 50),
        *mk.action_marks([action(1, "set_clip", "applied", 38, resolved=38, enabled=True)], 50),
        *mk.incident_marks(events),
        *mk.rollback_marks(events),
    ]
    spans = mk.breakdown_spans([alert(33, None, factor="staleness")], 50)
    x = np.arange(51)
    fig = charts.line_figure("r", {"reward/mean": (x, x / 50)}, spans=spans, marks=marks)
    lines = {(s.x0, s.line.color, s.line.dash) for s in fig.layout.shapes if s.type == "line"}
    assert lines == {
        (38.5, ACTION_COLORS["applied"], "solid"),
        (29.5, INCIDENT_COLOR, "dashdot"),
        (38.5, ROLLBACK_COLOR, "dash"),
    }
    [shade] = [s for s in fig.layout.shapes if s.type == "rect"]
    assert (shade.x0, shade.x1) == (32.5, 50.5)
    labels = {a.text: a.x for a in fig.layout.annotations}
    assert labels == {"induced incident": 29.5, "rolled back to step 30": 38.5}
    texts = {t.name: list(t.text) for t in fig.data[1:]}
    assert texts["alert: warning"] == ["staleness"] and texts["action: applied"] == ["clip on"]
    sides = {t.name: list(t.textposition) for t in fig.data[1:] if t.textposition}
    # labels in the last third of the chart go left of their marker (not off the chart)
    assert sides == {"alert: warning": ["middle right"], "action: applied": ["middle left"]}
    assert all(t.yaxis == "y2" for t in fig.data[1:])


# ----------------------------------------------------------------------------- a real run


def test_story_of_a_monitored_run_with_an_incident_and_remediation(tmp_path: Path):
    """A Monitor-written run: a large mismatch from step 1 (info), a scripted incident at
    step 30 that makes it stale, the detectors' precursor and the policy's action."""
    mon = Monitor(tmp_path / "r", controls={"clip": True, "mini_batches": 1}, remediation=True)
    rng = np.random.default_rng(0)
    for step in range(1, 46):
        if step == 30:
            mon.event(
                "incident",
                {
                    "kind": "set_clip",
                    "note": "induced incident at step 30: clipping switched off",
                    "induced": True,
                },
            )
            mon.update_controls({"clip": False, "mini_batches": 1})
        stale = step >= 30
        mon.log(
            step,
            {
                "mismatch/kl_k1": 0.05 * (1 + 0.05 * rng.standard_normal()),  # level: info
                "staleness/kl_k3": (0.02 if stale else 1e-4) * (1 + 0.05 * rng.standard_normal()),
                "reward/mean": 0.4 + 0.002 * step,
            },
        )
        for a in mon.pending_actions():
            mon.resolve(a.id, "applied", "done")
    with RunReader(tmp_path / "r") as reader:
        alerts, actions, events = reader.alerts(), reader.actions(), reader.events()
    mon.close()
    assert any(a.severity == "info" and a.step <= 5 for a in alerts)
    [span] = mk.breakdown_spans(alerts, 45)
    assert span.start > 30 and span.label == "staleness"  # not shaded from step 1
    evals = [(20, 0.40), (40, 0.38), (45, 0.42)]
    lines = story(alerts, actions, events, 45, evals)
    assert lines[0].startswith("step 29→30 · **induced incident** (scripted): clipping")
    assert f"step {span.start} · ▲ **episode** (warning), blamed: **staleness**" in lines[1]
    [act] = [t for t in lines if "◆ action **set_clip**" in t]
    assert "**applied** (policy)" in act and lines.index(act) == 2
    # back within noise of the best evaluation before the episode: step 45, not 40
    assert lines[-1] == (
        "step 45 · ✓ held-out accuracy 0.420: back at its pre-episode level "
        "(within noise 0.01 of its best 0.400, at step 20)"
    )


def test_story_says_what_the_policy_held_back(tmp_path: Path):
    """IS correction off and a training-inference precursor: no action, the advice told."""
    mon = Monitor(tmp_path / "r", controls=IS_OFF, remediation=True)
    for step, metrics in kl_jump(end=None):
        mon.log(step, metrics)
    with RunReader(tmp_path / "r") as reader:
        alerts, actions, events = reader.alerts(), reader.actions(), reader.events()
    mon.close()
    assert actions == []
    lines = story(alerts, actions, events, 59)
    [held] = [t for t in lines if "held back" in t]
    [warn] = [a for a in alerts if a.severity == "warning"]
    assert held == (
        f"step {warn.step} · ◇ held back: set_is_correction (cap=5.0, enabled=True): IS "
        "correction is off: recommended on; applied automatically only at a breakdown"
    )
    assert lines.index(held) == 1  # right after the episode it answers
