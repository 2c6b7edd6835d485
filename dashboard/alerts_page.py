"""The Alerts and actions page: what the detectors saw, what was done, and operator requests.

A timeline puts each alert on the row of the IS factor it blames (open → cleared), the
actions above, and the run's induced incidents and rollbacks on top, over the whole run;
tables give the evidence (metric, value, baseline, window), message and remedy of each
alert, the status, reason and outcome of each action (the audit trail), and the
incidents (scripted on purpose, labelled as induced) and rollbacks with their checks.
The operator can request any remediation kind (monitor/remediation/actions.py), rollback and stop
included: the request is written with `monitor.request_action` as a pending row, and the
trainer applies or rejects it at its next step boundary, which shows up here as its
status.
Requests are refused when the app is exposed beyond loopback without the token
(settings.write_permission). The action parameters are validated by the monitor only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from core.errors import UserError
from core.vocabulary import IS_POLICIES, REPLAY_MODES, WEIGHT_QUANTS
from dashboard import charts
from dashboard.data import RunEntry, fingerprint, load_records, summarize
from dashboard.marks import action_marks, incident_marks, rollback_marks
from dashboard.ui import (
    guard,
    one_run,
    operator_permission,
    settings,
)
from monitor import RunReader, request_action
from monitor.analysis.event_text import event_text, number_text, params_text
from monitor.remediation.actions import KINDS
from monitor.store.records import Action, Alert, Event


@dataclass(frozen=True)
class Field:
    """One parameter input of an action form; `optional` ones may be left empty."""

    key: str
    widget: str  # 'bool' | 'float' | 'int' | 'choice' | 'band'
    default: Any = None
    optional: bool = False
    choices: tuple[str, ...] = ()
    help: str = ""


FORMS: dict[str, tuple[Field, ...]] = {
    "set_is_correction": (Field("enabled", "bool", True),
                          Field("cap", "float", None, True, help="TIS cap C > 1 (paper: 5)")),
    "set_is_policy": (Field("policy", "choice", "token_tis", choices=IS_POLICIES),
                      Field("cap", "float", None, True, help="> 1"),
                      Field("band", "band", None, True, help="[lo < 1 < hi], e.g. IcePop 0.5, 5")),
    "set_clip": (Field("enabled", "bool", True),
                 Field("eps_low", "float", None, True, help="in (0, 1); paper 0.2"),
                 Field("eps_high", "float", None, True, help="> 0; paper 0.27")),
    "set_routing_replay": (Field("mode", "choice", "R2", choices=REPLAY_MODES),),
    "set_mini_batches": (Field("n", "int", 1),),
    "set_mini_batches_cap": (Field("n", "int", 1, help="held for the rest of the run"),),
    "set_length_norm": (Field("enabled", "bool", False),),
    "scale_lr": (Field("factor", "float", 0.5, help="in (0, 10]"),),
    "set_lr_cap": (Field("lr", "float", 1e-6, help="> 0; held for the rest of the run"),),
    "set_rollout_quant": (Field("weight_quant", "choice", "none", choices=WEIGHT_QUANTS),),
    "set_rollout_quant_floor": (Field("weight_quant", "choice", "none", choices=WEIGHT_QUANTS,
                                      help="held for the rest of the run"),),
    "rollback": (Field("step", "int", None, True,
                       help="empty: the last healthy checkpoint"),),
    "stop": (),
}  # fmt: skip
DESTRUCTIVE = ("rollback", "stop")


def _param_inputs(kind: str) -> dict[str, Any]:
    """Widgets for one kind's params; empty optional fields are left out."""
    params: dict[str, Any] = {}
    for f in FORMS[kind]:
        label = f"{f.key}{' (optional)' if f.optional else ''}"
        if f.widget == "bool":
            params[f.key] = st.checkbox(label, value=bool(f.default), help=f.help or None)
        elif f.widget == "choice":
            params[f.key] = st.selectbox(label, f.choices, index=f.choices.index(f.default))
        elif f.widget == "int":
            value = st.number_input(
                label, value=f.default, step=1, min_value=0, help=f.help or None
            )
            if value is not None:
                params[f.key] = int(value)
        elif f.widget == "float":
            value = st.number_input(label, value=f.default, format="%.4g", help=f.help or None)
            if value is not None:
                params[f.key] = float(value)
        elif f.widget == "band":
            lo = st.number_input("band low (optional)", value=None, format="%.4g", help=f.help)
            hi = st.number_input("band high (optional)", value=None, format="%.4g")
            if lo is not None or hi is not None:
                params[f.key] = [lo, hi]  # a half-filled band is refused by the monitor
    return params


def _alert_rows(alerts: list[Alert], last_step: int) -> list[dict[str, Any]]:
    rows = []
    for a in alerts:
        end = last_step if a.cleared_step is None else max(a.step, a.cleared_step)
        text = (
            f"#{a.id} {a.severity} · {a.detector} · step {a.step}<br>{a.message}"
            f"<br>{a.metric} = {a.value:.4g}, baseline {a.baseline:.4g}"
        )
        rows.append(
            {"step": a.step, "end": end, "factor": a.factor, "severity": a.severity, "text": text}
        )
    return rows


def _alert_table(alerts: list[Alert]) -> list[dict[str, Any]]:
    return [
        {
            "id": a.id,
            "step": a.step,
            "cleared": "open" if a.cleared_step is None else str(a.cleared_step),
            "severity": a.severity,
            "blamed factor": a.factor,
            "detector": a.detector,
            "metric": a.metric,
            "value": number_text(a.value),
            "baseline": number_text(a.baseline),
            "window": a.window,
            "message": a.message,
            "remedy": a.remedy,
        }
        for a in reversed(alerts)
    ]


def _action_table(actions: list[Action]) -> list[dict[str, Any]]:
    return [
        {
            "id": a.id,
            "kind": a.kind,
            "params": params_text(a.params),
            "status": a.status,
            "source": a.source,
            "requested at step": a.step,
            "resolved at step": a.resolved_step,
            "alert": a.alert_id,
            "reason": a.reason,
            "trainer said": a.detail,
        }
        for a in reversed(actions)
    ]


@guard
def history_body(path: str, name: str) -> None:
    """Timeline and tables (a fragment: refreshes while the run is live)."""
    summary = summarize(path)
    rec = load_records(path, fingerprint(summary))
    last = summary.last_step or 0
    alerts, actions = list(rec.alerts), list(rec.actions)
    n_open = sum(a.cleared_step is None for a in alerts)
    st.markdown(
        f"**{name}** · last step {summary.last_step} · {len(alerts)} alert(s), "
        f"{n_open} open · {len(actions)} action(s), "
        f"{summary.n_pending_actions} pending"
    )
    run_marks = [*incident_marks(rec.events), *rollback_marks(rec.events)]
    fig = charts.timeline_figure(
        _alert_rows(alerts, last), action_marks(actions, last), run_marks, summary.last_step
    )
    st.plotly_chart(fig, key="timeline")
    st.markdown("#### Alerts (newest first)")
    if alerts:
        st.dataframe(_alert_table(alerts), hide_index=True, width="stretch")
    else:
        st.caption("no alerts yet")
    st.markdown("#### Actions (newest first)")
    if actions:
        st.dataframe(_action_table(actions), hide_index=True, width="stretch")
    else:
        st.caption("no actions yet")
    events = _event_table(rec.events)
    if events:
        st.markdown("#### Induced incidents, rollbacks and actions held back")
        st.dataframe(events, hide_index=True, width="stretch")
    forks = _fork_table(rec.events)
    if forks:
        st.markdown("#### Remedies tried on forks (the run continued with the ✓ one)")
        st.dataframe(forks, hide_index=True, width="stretch")


def _fork_table(events: tuple[Event, ...]) -> list[dict[str, Any]]:
    """One row per candidate of each fork experiment: what it changed, its fork's
    held-out accuracy and alerts, its score, and whether the run continued with it."""
    rows = []
    for e in events:
        if e.kind != "fork_experiment":
            continue
        d = e.detail
        for c in d.get("candidates", []):
            rows.append(
                {
                    "after step": e.step,
                    "from checkpoint": d.get("from_step"),
                    "fork steps": d.get("k"),
                    "remedy": c.get("name"),
                    "changes": "; ".join(
                        f"{kind} ({params_text(params)})" for kind, params in c.get("actions", [])
                    ),
                    "held-out acc": c.get("eval_acc"),
                    "alerts": c.get("alerts"),
                    "score": c.get("score"),
                    "chosen": "✓" if c.get("name") == d.get("chosen") else "",
                    "experiment cost (steps)": d.get("cost_steps"),
                }
            )
    return rows


def _event_table(events: tuple[Event, ...]) -> list[dict[str, Any]]:
    """Incidents (scripted, said so), rollbacks with the held-out accuracy check, and the
    policy's actions held back (advice it leaves to a breakdown or to the user, limits)."""
    return [
        {"after step": e.step, "event": e.kind, "what": what}
        for e in events
        if (what := event_text(e.kind, e.detail)) is not None
    ]


def request_form(run: RunEntry, alerts: list[Alert]) -> None:
    """The operator's request: kind, params, reason → a pending action row."""
    s = settings()
    st.subheader("Request a remediation action")
    st.caption(
        "Written to the run's store as a pending action; the trainer applies it at the next "
        "step boundary (a pending action of the same kind is not duplicated)."
    )
    if run.summary.status != "live":
        st.info(
            f"Run {run.name} is {run.summary.status}: a request waits in its store until "
            "the run is resumed."
        )
    allowed, why = operator_permission(s, key="token-actions")
    if not allowed:
        st.warning(why)
    requestable = [k for k in KINDS if k != "advice"]  # advice is the monitor's to give
    kind = st.selectbox("Action kind", requestable, key="action-kind")
    with st.form("action-form"):
        params = _param_inputs(kind)
        open_ids = [None, *[a.id for a in reversed(alerts) if a.cleared_step is None]]
        alert_id = st.selectbox(
            "In response to alert", open_ids, format_func=lambda i: "none" if i is None else f"#{i}"
        )
        reason = st.text_input("Reason", value=f"operator request from the dashboard: {kind}")
        confirm = True
        if kind in DESTRUCTIVE:
            confirm = st.checkbox(f"Yes, {kind} this run")
        submitted = st.form_submit_button("Request action", disabled=not allowed)
    if not submitted:
        return
    if not allowed:  # the button is disabled, but never trust the client
        st.error(why)
        return
    if not confirm:
        st.error(f"tick 'Yes, {kind} this run' to confirm")
        return
    try:
        with RunReader(run.path) as reader:
            before = {a.id for a in reader.actions()}
        action = request_action(
            run.path, kind, params, reason, source="dashboard", alert_id=alert_id
        )
    except UserError as err:
        st.error(f"not requested: {err}")
        return
    if action.id not in before:
        st.success(
            f"action #{action.id} {action.kind} is {action.status}: the trainer applies "
            "it at the next step boundary"
        )
    else:
        st.info(f"an action of kind {action.kind} is already {action.status} (#{action.id})")


def render() -> None:
    s = settings()
    st.title("Alerts and actions")
    run = one_run(s, "alerts")
    live = run.summary.status == "live"
    st.fragment(history_body, run_every=s.refresh_s if live else None)(run.path, run.name)
    rec = load_records(run.path, fingerprint(run.summary))
    request_form(run, list(rec.alerts))
