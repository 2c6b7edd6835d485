"""Prometheus exporter: every scalar of a run as a gauge, plus the monitor's alert state.

Metric families (all labelled by `run`, the run directory's name):
- `minirl_metric{run, name}`: the latest value of each scalar under its canonical name.
  One family with a `name` label rather than one sanitised family per metric: our names
  contain '/', and sanitising could merge two metrics (`a/b`, `a_b`). NaN and ±inf are
  exported as they are.
- `minirl_step{run}`: the last logged step; `minirl_last_log_timestamp_seconds{run}`.
- `minirl_alert_open{run, detector, metric, severity, factor}`: 1 while a monitor alert
  is open, 0 once cleared, so the baseline-relative detectors, which PromQL cannot
  reproduce, reach Alertmanager through the `MinirlMonitorAlert` rule (`rules.py`).
- `minirl_alerts_total{run, detector, severity, factor}`: alerts raised, a counter.

Each exporter owns a `CollectorRegistry` (or takes one, for tests), so several runs in one
process never collide. The HTTP server binds 127.0.0.1 unless told otherwise. This module
does not evaluate alert rules.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

METRIC = "minirl_metric"
ALERT_OPEN = "minirl_alert_open"


class PrometheusExporter:
    """Gauges for one run; `observe` is what `Monitor.log` calls after each step."""

    def __init__(
        self,
        run: str,
        registry: CollectorRegistry | None = None,
        port: int | None = None,
        addr: str = "127.0.0.1",
    ) -> None:
        self.run = run
        self.registry = registry if registry is not None else CollectorRegistry()
        self._metric = Gauge(
            METRIC,
            "Latest value of a minirl scalar, by canonical name.",
            ["run", "name"],
            registry=self.registry,
        )
        self._step = Gauge("minirl_step", "Last logged step.", ["run"], registry=self.registry)
        self._last_log = Gauge(
            "minirl_last_log_timestamp_seconds",
            "Unix time of the last logged step.",
            ["run"],
            registry=self.registry,
        )
        self._alert_open = Gauge(
            ALERT_OPEN,
            "1 while a monitor alert is open, 0 once cleared.",
            ["run", "detector", "metric", "severity", "factor"],
            registry=self.registry,
        )
        self._alerts = Counter(
            "minirl_alerts",
            "Monitor alerts raised.",
            ["run", "detector", "severity", "factor"],
            registry=self.registry,
        )
        # (detector, metric) -> label values of its open alert, to zero it on clearing.
        self._open: dict[tuple[str, str], tuple[str, ...]] = {}
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        if port is not None:
            self.start(port, addr)

    def start(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve /metrics on addr:port (0 = any free port); returns the bound port."""
        if self._server is not None:
            raise RuntimeError(f"exporter already serving on port {self.port}")
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as err:
            from core.errors import UserError

            raise UserError(f"cannot serve Prometheus metrics on {addr}:{port}: {err}") from err
        self.port = self._server.server_port
        return self.port

    def observe(self, step: int, scalars: Mapping[str, float], alerts: Iterable[Any] = ()) -> None:
        """Set the gauges for one step; `alerts` are new (or newly cleared) `records.Alert`s."""
        with self._lock:
            for name, value in scalars.items():
                self._metric.labels(self.run, name).set(float(value))
            self._step.labels(self.run).set(step)
            self._last_log.labels(self.run).set(time.time())
            for alert in alerts:
                if getattr(alert, "cleared_step", None) is not None:
                    self._clear(alert.detector, alert.metric)
                    continue
                labels = (self.run, alert.detector, alert.metric, alert.severity, alert.factor)
                previous = self._open.get((alert.detector, alert.metric))
                if previous is not None and previous != labels:  # escalation: one open series
                    self._alert_open.labels(*previous).set(0)
                self._open[(alert.detector, alert.metric)] = labels
                self._alert_open.labels(*labels).set(1)
                self._alerts.labels(self.run, alert.detector, alert.severity, alert.factor).inc()

    def clear(self, detector: str, metric: str) -> None:
        """A detector declared its alert on `metric` over."""
        with self._lock:
            self._clear(detector, metric)

    def _clear(self, detector: str, metric: str) -> None:
        labels = self._open.pop((detector, metric), None)
        if labels is not None:
            self._alert_open.labels(*labels).set(0)

    def close(self) -> None:
        """Stop serving (the gauges stay readable from the registry)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server, self._thread = None, None
