"""`Monitor`: the metrics layer's entry point for a training loop (ours or anyone's).

Per step it writes the scalars and distributions to the run store in one transaction,
runs the detectors, stores their alerts, and (if enabled) lets the remediation policy
turn alerts into pending actions; then it hands the step to the optional Prometheus
exporter and webhook notifier. It does not train, apply actions (the trainer does, at a
step boundary, then calls `resolve`) or serve anything itself.

    mon = Monitor("runs/r1", config=cfg, controls=RunControls(mini_batches=4, clip=False))
    for step in range(n):
        mon.log(step, {"mismatch/kl_k1": 1e-3, "reward/mean": 0.4}, {"log_ratio": lr})
        for action in mon.pending_actions():
            ok = apply(action)  # the trainer's job
            mon.resolve(action.id, "applied" if ok else "rejected", "why")
    mon.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from core.controls import RunControls
from core.errors import UserError
from monitor.config import MonitorConfig
from monitor.detectors import DetectorSet
from monitor.remediation import run_health
from monitor.remediation.actions import apply_to_controls
from monitor.remediation.healthy import Scores, Verdict, judge, last_healthy
from monitor.remediation.policy import RemediationPolicy
from monitor.store.histograms import bin_values, spec_for
from monitor.store.reader import RunReader
from monitor.store.records import Action, Alert, Cleared, Event
from monitor.store.run_store import RunStore
from monitor.store.schema import MAX_STEP, name_problem

log = logging.getLogger("minirl.monitor")


class Exporter(Protocol):
    """Receives every step after it is stored (e.g. Prometheus gauges)."""

    def observe(self, step: int, scalars: Mapping[str, float], alerts: Sequence[Alert]) -> None: ...


class Notifier(Protocol):
    """Receives every new alert after it is stored (e.g. a webhook)."""

    def notify(self, alert: Alert) -> None: ...


class _NullExporter:
    def observe(self, step: int, scalars: Mapping[str, float], alerts: Sequence[Alert]) -> None:
        pass


class _NullNotifier:
    def notify(self, alert: Alert) -> None:
        pass


def _to_float(name: Any, value: Any) -> float:
    problem = name_problem(name)
    if problem is not None:
        raise UserError(problem)
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"metric {name!r:.80}: value {value!r:.80} is not a number") from None


class Monitor:
    """Run store + detectors + remediation policy + optional exporter/notifier, for one run.

    `config` is the resolved run config (stored as JSON); `controls` are the knobs the
    remediation policy reasons about (`RunControls`, or a mapping of its fields: an
    unknown knob is an error). An existing store is only
    reopened with `resume=True` (nothing recorded is ever overwritten by accident).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        config: dict[str, Any] | None = None,
        controls: RunControls | Mapping[str, Any] | None = None,
        monitor_config: MonitorConfig | None = None,
        remediation: bool = False,
        prometheus_port: int | None = None,
        exporter: Exporter | None = None,
        notifier: Notifier | None = None,
        resume: bool = False,
    ) -> None:
        self.cfg = monitor_config or MonitorConfig()
        given = None if controls is None else RunControls.of(controls)
        self.store = RunStore.open(
            run_dir,
            busy_timeout_s=self.cfg.store.busy_timeout_s,
            synchronous=self.cfg.store.synchronous,
        )
        self.run_dir = str(run_dir)
        self._closed = False
        last = self.store.last_step()
        started = self.store.meta_json("started")
        if started and not resume:
            self.store.close()
            where = f"last step {last}" if last is not None else "no steps yet"
            raise UserError(
                f"{self.run_dir} already holds a run ({where}); resume it or choose a new run dir"
            )
        self.controls = given or RunControls.stored(self.store.meta_json("controls"))
        with self.store.transaction():
            if config is not None or not started:
                self.store.set_meta("config", config or {})
            self.store.set_meta("controls", self.controls.to_data())
            self.store.set_meta("started", True)
            kind = "resume" if started else "start"
            self.store.insert_event(last, kind, {"pid": os.getpid()}, time.time())
        self.run_id = self.store.run_id()
        self.detectors = DetectorSet(self.cfg.detectors)
        self.policy = RemediationPolicy(self.cfg.remediation) if remediation else None
        if exporter is None and prometheus_port is not None:
            exporter = _prometheus_exporter(Path(run_dir).resolve().name, prometheus_port)
        self._exporter: Exporter = exporter or _NullExporter()
        self._notifier: Notifier = notifier or _NullNotifier()
        self._crashed = False
        if started and last is not None:
            self._replay(last)

    # ------------------------------------------------------------------ per step
    def log(
        self,
        step: int,
        scalars: Mapping[str, float],
        distributions: Mapping[str, Sequence[float]] | None = None,
    ) -> list[Alert]:
        """Store one step (one transaction), run the detectors, return the new alerts.

        NaN is stored as NULL and ±inf as IEEE infinities (store.py); both also raise
        the non-finite detector. Logging the same step twice merges (later values win);
        a step before the last one is an error (use `truncate_after` to rewind).
        """
        self._check_open()
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            raise UserError(f"step must be an integer in 0..2^53, got {step!r:.80}")
        last = self.store.last_step()
        if last is not None and step < last:
            raise UserError(
                f"step {step} is before the last logged step {last}; call "
                f"truncate_after({step - 1}) first when resuming or rolling back"
            )
        values = {name: _to_float(name, v) for name, v in scalars.items()}
        hists = {
            name: bin_values(v, spec_for(name, self.cfg.histograms))
            for name, v in (distributions or {}).items()
        }
        changes = self.detectors.update(step, values)
        now = time.time()
        new: list[Alert] = []
        cleared: list[Alert] = []
        with self.store.transaction():
            self.store.write_step(step, values, now)
            for name, row in hists.items():
                self.store.write_histogram(step, name, row)
            for change in changes:
                if isinstance(change, Cleared):
                    cleared += self.store.clear_alerts(step, change.detector, change.metric)
                else:
                    alert_id = self.store.insert_alert(step, change, now)
                    new.append(Alert(**vars(change), id=alert_id, step=step, time=now))
        due = []  # remediation in its own transaction, after the step's: healthy_lr reads it
        if self.policy is not None and self.policy.ripe(step):
            due = self.policy.due(step, self.store.open_alerts(), self.store.all_actions())
        if self.policy is not None and (new or due):
            with self.store.transaction():
                self._remediate(step, [*new, *due], now)
        self._hand_off(step, values, new, cleared)
        return new

    def _remediate(self, step: int, alerts: list[Alert], now: float) -> None:
        history = self.store.all_actions()
        open_alerts = self.store.open_alerts()
        controls = self.controls
        if any(a.severity == "critical" for a in alerts):  # a breakdown may lower the lr
            controls = dataclasses.replace(controls, lr_healthy=self.healthy_lr())
        drafts = self.policy.decide(step, alerts, controls, history, open_alerts)
        for draft in drafts:
            self.store.insert_action(
                draft.kind, draft.params, draft.reason, "policy", draft.alert_id, now
            )
        for skipped in self.policy.skipped:
            self.store.insert_event(step, "remediation_skipped", skipped, now)

    def _hand_off(
        self, step: int, values: dict[str, float], alerts: list[Alert], cleared: list[Alert]
    ) -> None:
        """The exporter sees the step (new alerts, and cleared ones with `cleared_step`
        set), the notifier each new alert, after it is safely stored. Their failures are
        logged, never raised: monitoring must not stop training."""
        try:
            self._exporter.observe(step, values, [*alerts, *cleared])
        except Exception as err:  # a broken exporter must not kill the run
            log.warning("exporter failed at step %d: %r", step, err)
        for alert in alerts:
            try:
                self._notifier.notify(alert)
            except Exception as err:  # same for the notifier
                log.warning("notifier failed for alert %d: %r", alert.id, err)

    # ------------------------------------------------------------------ actions
    def pending_actions(self) -> list[Action]:
        """Pending actions, oldest first: from the policy and requested from outside."""
        self._check_open()
        return self.store.pending_actions()

    def request_action(
        self,
        kind: str,
        params: Mapping[str, Any] | None,
        reason: str,
        source: Literal["policy", "dashboard", "user"] = "dashboard",
        alert_id: int | None = None,
    ) -> Action:
        """Queue an action (validated by actions.py); a pending one of the same kind is
        returned instead of queueing a duplicate."""
        self._check_open()
        with self.store.transaction():
            for action in self.store.pending_actions():
                if action.kind == kind:
                    return action
            return self.store.insert_action(kind, params, reason, source, alert_id, time.time())

    def resolve(
        self, action_id: int, status: Literal["applied", "rejected"], detail: str
    ) -> Action:
        """Record the trainer's outcome; on 'applied' the controls follow the action."""
        self._check_open()
        if status not in ("applied", "rejected"):
            raise UserError(f"status must be 'applied' or 'rejected', got {status!r}")
        with self.store.transaction():
            action = self.store.resolve_action(action_id, status, str(detail), time.time())
            if status == "applied":
                self.controls = apply_to_controls(self.controls, action.kind, action.params)
                self.store.set_meta("controls", self.controls.to_data())
        return action

    def update_controls(self, controls: RunControls | Mapping[str, Any]) -> None:
        """Record knobs the run changed by itself (a scripted incident, an operator's
        change outside the action queue), so the remediation policy reasons on them."""
        self._check_open()
        self.controls = RunControls.of(controls)
        with self.store.transaction():
            self.store.set_meta("controls", self.controls.to_data())

    # ------------------------------------------------------------------ run life
    def event(self, kind: str, detail: dict[str, Any] | None = None) -> Event:
        """Record a run event (start, resume, checkpoint, rollback, stop, crash...)."""
        self._check_open()
        problem = name_problem(kind, "event kind")
        if problem is not None:
            raise UserError(problem)
        if detail is not None and not isinstance(detail, Mapping):
            raise UserError(f"event {kind}: detail must be a mapping, got {type(detail).__name__}")
        step, now = self.store.last_step(), time.time()
        try:  # the store encodes the detail; a detail JSON cannot hold is rolled back
            with self.store.transaction():
                event_id = self.store.insert_event(step, kind, detail or {}, now)
        except (ValueError, TypeError, RecursionError) as err:
            raise UserError(f"event {kind}: detail cannot be stored as JSON ({err})") from None
        if kind == "crash":
            self._crashed = True
        return Event(event_id, step, kind, dict(detail or {}), now)

    def last_step(self) -> int | None:
        return self.store.last_step()

    def last_healthy_step(self, candidates: Sequence[int]) -> int | None:
        """The latest of `candidates` (e.g. checkpoint steps) measured healthy (see
        `healthy_checkpoint`). Where a `rollback {}` without a step goes; None if none is."""
        verdict = self.healthy_checkpoint(candidates)
        return None if verdict is None else verdict.step

    def healthy_checkpoint(self, candidates: Sequence[int]) -> Verdict | None:
        """The verdict (step, score, best, noise, reason) on the latest healthy candidate,
        or None: its held-out score (`eval/acc`, else the training reward) within noise of
        the run's best so far, and no warning or critical alert open when it was taken.
        A symptom's alert counts from `remediation.onset_margin` steps before it opened
        (its signal started to move earlier), a setting's from its own step."""
        self._check_open()
        return last_healthy(self.judge_checkpoints(candidates))

    def judge_checkpoints(self, candidates: Sequence[int]) -> list[Verdict]:
        """A verdict on each candidate, oldest first (why each is or is not healthy)."""
        self._check_open()
        margin = self.cfg.remediation.onset_margin
        with RunReader(self.run_dir) as r:
            return judge(list(candidates), run_health.scores(r), run_health.precursors(r, margin))

    def scores(self) -> Scores:
        """(step, held-out accuracy) of every evaluation, else the training reward."""
        with RunReader(self.run_dir) as reader:
            return run_health.scores(reader)

    def healthy_lr(self) -> float | None:
        """The lr the run was measured healthy after (`run_health.healthy_lr`)."""
        with RunReader(self.run_dir) as reader:
            return run_health.healthy_lr(reader, self.cfg.remediation.onset_margin)

    def episode_start(self) -> int | None:
        """Where the episode of the open warning/critical alerts began (None: no episode):
        the first step of any, less `remediation.onset_margin` for a symptom (its alert
        opens a few steps after the signal started to move); a setting that moved (the
        lr, the mini-batches per rollout) is exact, so its alert's step is the start."""
        margin = self.cfg.remediation.onset_margin
        return min(
            (
                run_health.opened(a, margin)
                for a in self.store.open_alerts()
                if run_health.is_precursor(a.severity, a.detector)
            ),
            default=None,
        )

    def truncate_after(self, step: int) -> dict[str, int]:
        """Drop scalars, histograms and alerts of steps > `step`, record it as an event,
        and rebuild the detectors' baselines from the steps kept. For `--resume` after a
        crash, whose steps after the checkpoint are about to be logged again. Not for a
        rollback: the rolled-back branch is evidence, so after a rollback keep counting
        steps forward and record a 'rollback' event instead. Actions are kept (the audit
        trail). Returns the number of rows dropped per table."""
        self._check_open()
        if isinstance(step, bool) or not isinstance(step, int):
            raise UserError(f"truncate_after needs an integer step, got {step!r}")
        with self.store.transaction():
            dropped = self.store.delete_after(step)
            self.store.insert_event(
                step, "truncate", {"after_step": step, "dropped": dropped}, time.time()
            )
        self.detectors = DetectorSet(self.cfg.detectors)
        if self.store.last_step() is not None:
            self._replay(self.store.last_step())
        return dropped

    def _replay(self, last: int) -> None:
        """Feed the last stored steps through fresh detectors (alerts discarded), so a
        resumed run keeps its baselines instead of warming up again."""
        for step, values in self.store.recent_scalars(last - self.cfg.resume_replay_steps + 1):
            self.detectors.update(step, values)

    def close(self) -> None:
        """Record the end of the run (unless it crashed) and close the store. Idempotent."""
        if self._closed:
            return
        try:  # a full disk fails the event: the store and the hooks are closed all the same
            if not self._crashed:
                with self.store.transaction():
                    self.store.insert_event(self.store.last_step(), "close", {}, time.time())
        finally:
            for hook in (self._exporter, self._notifier):
                closer = getattr(hook, "close", None)
                if callable(closer):
                    closer()
            self.store.close()
            self._closed = True

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and not self._closed:
            with contextlib.suppress(UserError):  # a full disk: `exc` is the error to see
                self.event("crash", {"error": f"{exc_type.__name__}: {exc}"[:500]})
                self._crashed = True
            with contextlib.suppress(UserError):
                self.close()
            return
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise UserError("this Monitor is closed")


def _prometheus_exporter(run_name: str, port: int) -> Exporter:
    """The Prometheus exporter of monitor/alerting/prometheus.py (imported only when asked for)."""
    try:
        from monitor.alerting.prometheus import PrometheusExporter
    except ImportError as err:
        raise UserError(f"the Prometheus exporter is not available: {err}") from None
    return PrometheusExporter(run=run_name, port=port)


__all__ = ["Exporter", "Monitor", "Notifier"]
