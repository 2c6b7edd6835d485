"""monitor: the metrics layer — run store, detectors, remediation, Prometheus, analysis.

Imports neither torch nor our other packages, so any trainer can use it:

    from monitor import Monitor, RunReader
"""

from core.errors import UserError
from monitor.config import MonitorConfig
from monitor.monitor import Monitor
from monitor.store.reader import RunReader, list_runs
from monitor.store.records import Action, Alert, AlertDraft, Cleared, Event, RunMeta, RunSummary
from monitor.store.run_store import RunStore, request_action

__all__ = [
    "Action",
    "Alert",
    "AlertDraft",
    "Cleared",
    "Event",
    "Monitor",
    "MonitorConfig",
    "RunMeta",
    "RunReader",
    "RunStore",
    "RunSummary",
    "UserError",
    "list_runs",
    "request_action",
]
