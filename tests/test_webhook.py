"""The webhook notifier against a real local HTTP server: payloads, retries, never blocking."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from alert_factory import make_alert

from core.errors import UserError
from monitor.alerting.webhook import WebhookNotifier, alert_payload


class Receiver:
    """A local server answering POSTs with a scripted list of status codes (then 200)."""

    def __init__(self, statuses=(), hang: bool = False) -> None:
        self.statuses = list(statuses)
        self.hang = hang
        self.release = threading.Event()
        self.requests: list[tuple[float, dict, dict]] = []  # (time, headers, body)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((time.monotonic(), dict(self.headers), json.loads(body)))
                if receiver.hang:
                    receiver.release.wait(10)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver_factory():
    made = []

    def make(**kw):
        made.append(Receiver(**kw))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


# the critical alert the payload tests read back, field by field
ENTROPY_COLLAPSE = {
    "detector": "entropy_collapse",
    "severity": "critical",
    "metric": "policy/entropy",
    "value": 0.02,
    "baseline": math.nan,
    "factor": "optimisation",
    "message": "entropy fell 20x",
    "remedy": "roll back",
    "id": 7,
    "step": 120,
    "time": 1.5,
}


def _alert(**kw):
    return make_alert(**{**ENTROPY_COLLAPSE, **kw})


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_json_payload_reaches_the_server(receiver_factory):
    receiver = receiver_factory()
    notifier = WebhookNotifier(receiver.url, run="run-7")
    assert notifier.notify(_alert())
    assert _wait(lambda: notifier.sent == 1)
    notifier.close()
    (_, headers, body) = receiver.requests[0]
    assert headers["Content-Type"] == "application/json"
    assert body["source"] == "minirl" and body["run"] == "run-7"
    alert = body["alert"]
    assert alert["detector"] == "entropy_collapse" and alert["step"] == 120 and alert["id"] == 7
    assert alert["value"] == 0.02 and alert["remedy"] == "roll back"
    assert alert["baseline"] == "nan"  # strict JSON has no NaN
    assert alert["cleared_step"] is None


def test_slack_payload_is_a_text_message(receiver_factory):
    receiver = receiver_factory()
    notifier = WebhookNotifier(receiver.url, run="run-7", format="slack")
    notifier.notify(_alert())
    assert _wait(lambda: notifier.sent == 1)
    notifier.close()
    body = receiver.requests[0][2]
    assert set(body) == {"text"}
    for part in (
        "critical",
        "entropy_collapse",
        "run-7",
        "step 120",
        "entropy fell 20x",
        "roll back",
    ):
        assert part in body["text"]
    assert alert_payload(_alert(), "run-7", "slack") == body


def test_retries_5xx_with_exponential_backoff(receiver_factory):
    receiver = receiver_factory(statuses=[500, 503, 200])
    notifier = WebhookNotifier(receiver.url, backoff_s=0.1, max_retries=5)
    notifier.notify(_alert())
    assert _wait(lambda: notifier.sent == 1)
    notifier.close()
    times = [t for t, _, _ in receiver.requests]
    assert len(times) == 3
    gap1, gap2 = times[1] - times[0], times[2] - times[1]
    assert 0.1 <= gap1 < 0.5 and 0.2 <= gap2 < 0.8  # 0.1 s, then 0.2 s
    assert notifier.failed == 0


def test_gives_up_after_max_retries_and_does_not_retry_4xx(receiver_factory):
    receiver = receiver_factory(statuses=[500] * 10)
    notifier = WebhookNotifier(receiver.url, backoff_s=0.01, max_retries=2)
    notifier.notify(_alert())
    assert _wait(lambda: notifier.failed == 1)
    assert len(receiver.requests) == 3  # first attempt + 2 retries
    notifier.close()
    rejecting = receiver_factory(statuses=[400, 400])
    notifier = WebhookNotifier(rejecting.url, backoff_s=0.01, max_retries=5)
    notifier.notify(_alert())
    assert _wait(lambda: notifier.failed == 1)
    time.sleep(0.1)
    assert len(rejecting.requests) == 1
    notifier.close()


def test_unreachable_server_is_retried_then_dropped():
    notifier = WebhookNotifier("http://127.0.0.1:9/none", backoff_s=0.01, max_retries=2)
    notifier.notify(_alert())
    assert _wait(lambda: notifier.failed == 1)
    notifier.close()


def test_never_blocks_the_caller_when_the_server_hangs(receiver_factory, caplog):
    receiver = receiver_factory(hang=True)
    notifier = WebhookNotifier(receiver.url, queue_size=4, request_timeout_s=30)
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="monitor.alerting.webhook"):
        results = [notifier.notify(_alert(id=i)) for i in range(50)]
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, f"notify blocked for {elapsed:.2f} s"
    # one in flight (hanging), four queued, the rest dropped and counted
    assert _wait(lambda: len(receiver.requests) == 1)
    assert sum(results) in (4, 5) and notifier.dropped == 50 - sum(results)
    assert "alert dropped" in caplog.text
    start = time.perf_counter()
    notifier.close(timeout_s=0.3)
    assert time.perf_counter() - start < 1.0


def test_bad_url_and_format_are_rejected():
    with pytest.raises(UserError, match="http"):
        WebhookNotifier("ftp://example")
    with pytest.raises(UserError, match="format"):
        WebhookNotifier("http://127.0.0.1:1/", format="teams")
