"""Webhook notifier: POSTs each alert as JSON, from a background thread.

`notify(alert)` only puts the alert on a bounded queue and returns: the training step never
waits on the network. A daemon thread sends each payload, retrying failures (connection
errors, timeouts, HTTP 5xx and 429) with exponential backoff; other 4xx are final. When the
queue is full the alert is dropped, counted in `dropped`, and a warning is logged — a
stalled receiver can cost alerts, never training time.

Payloads: the alert's fields as JSON (`format="json"`), or Slack's incoming-webhook shape
`{"text": ...}` (`format="slack"`, which Mattermost, Discord's /slack endpoint and most chat
tools accept). Deliberately not here: alert routing, grouping or silencing — that is
Alertmanager's job, fed by the Prometheus rules (`rules.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import queue
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Literal

from core.errors import UserError

log = logging.getLogger(__name__)

PayloadFormat = Literal["json", "slack"]
_RETRYABLE_HTTP = {429, 500, 502, 503, 504}
_SEVERITY_MARK = {"info": "ℹ️", "warning": "⚠️", "critical": "🚨"}


def _finite(value: Any) -> Any:
    """A JSON value for a field: JSON has no NaN/inf (sent as strings, so strict receivers
    accept the payload) and no numpy or other objects (sent as numbers or strings)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, (float, *np_number_types())):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    return str(value)


def np_number_types() -> tuple[type, ...]:
    """numpy's scalar types if numpy is loaded (the monitor never needs to import it here)."""
    np = sys.modules.get("numpy")
    return (np.floating, np.integer) if np is not None else ()


def check_url(url: object) -> str:
    """`url` if it is an http(s) URL with a host, else a UserError saying what is wrong."""
    text = str(url)
    parts = urllib.parse.urlsplit(text) if text.isprintable() and " " not in text else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"webhook url {text[:200]!r}: expected http://HOST/... or https://HOST/...")
    try:
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as err:
        raise UserError(f"webhook url {text[:200]!r}: {err}") from None
    return text


def alert_payload(alert: Any, run: str, fmt: PayloadFormat = "json") -> dict[str, Any]:
    """The JSON body for one alert (any dataclass with the fields of `records.Alert`)."""
    fields = dataclasses.asdict(alert) if dataclasses.is_dataclass(alert) else dict(alert)
    fields = {key: _finite(value) for key, value in fields.items()}
    if fmt == "json":
        return {"source": "minirl", "run": run, "alert": fields}
    mark = _SEVERITY_MARK.get(fields.get("severity", ""), "")
    text = (
        f"{mark} *{fields.get('severity', '?')}* `{fields.get('detector', '?')}` on run "
        f"`{run}` at step {fields.get('step', '?')}: {fields.get('message', '')}\n"
        f"metric `{fields.get('metric', '?')}` = {fields.get('value')} "
        f"(baseline {fields.get('baseline')}), factor: {fields.get('factor', '?')}\n"
        f"remedy: {fields.get('remedy', '')}"
    )
    return {"text": text}


class WebhookNotifier:
    """Sends alerts to one URL without ever blocking the caller.

    `max_retries` retries after the first attempt, waiting `backoff_s · 2^k` (capped at
    `max_backoff_s`) before retry k. `close()` waits up to `timeout_s` for the queue to drain.
    """

    def __init__(
        self,
        url: str,
        run: str = "",
        format: PayloadFormat = "json",
        queue_size: int = 256,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        request_timeout_s: float = 5.0,
    ) -> None:
        check_url(url)
        if format not in ("json", "slack"):
            raise UserError(f"webhook format must be 'json' or 'slack', got {format!r}")
        self.url, self.run, self.format = url, run, format
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        self.request_timeout_s = request_timeout_s
        self.sent = 0
        self.failed = 0
        """Payloads given up on after all retries (or a non-retryable HTTP status)."""
        self.dropped = 0
        """Alerts dropped because the queue was full."""
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="minirl-webhook", daemon=True)
        self._thread.start()

    def notify(self, alert: Any) -> bool:
        """Queue one alert; False (and a warning) if it had to be dropped."""
        try:
            self._queue.put_nowait(alert_payload(alert, self.run, self.format))
        except queue.Full:
            self.dropped += 1
            log.warning(
                "webhook queue full (%d); alert dropped (%d dropped so far)",
                self._queue.maxsize,
                self.dropped,
            )
            return False
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Let queued alerts go out for up to `timeout_s`, then stop the thread."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        self._stop.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)  # wake the thread
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()) + 0.1)

    # The worker -------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            payload = self._queue.get()
            try:
                if payload is not None:
                    self._deliver(payload)
            finally:
                self._queue.task_done()

    def _deliver(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        for attempt in range(self.max_retries + 1):
            if attempt and self._stop.wait(
                min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
            ):
                break  # closing: do not sleep through the remaining backoff
            error = self._post(body)
            if error is None:
                self.sent += 1
                return
            retryable, reason = error
            if not retryable:
                log.warning("webhook %s rejected an alert: %s", self.url, reason)
                break
            log.info("webhook attempt %d to %s failed: %s", attempt + 1, self.url, reason)
        self.failed += 1
        log.warning("webhook gave up on an alert after %d attempt(s)", attempt + 1)

    def _post(self, body: bytes) -> tuple[bool, str] | None:
        """None on success, else (retryable, reason)."""
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout_s) as response:
                response.read()
            return None
        except urllib.error.HTTPError as err:
            return err.code in _RETRYABLE_HTTP, f"HTTP {err.code}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
            return True, str(getattr(err, "reason", err))
        except Exception as err:  # the sender thread must outlive any reply
            return False, f"{type(err).__name__}: {err}"
