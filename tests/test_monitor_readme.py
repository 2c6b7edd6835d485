"""The README's example of `Monitor` in another trainer's loop runs as written."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from monitor.store.reader import RunReader

README = Path(__file__).resolve().parents[1] / "monitor" / "README.md"
SECTION = "## Using the monitor from your own trainer"


def _example() -> str:
    text = README.read_text()
    section = text[text.index(SECTION) :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs_and_alerts(tmp_path, monkeypatch, capsys):
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIRL_WEBHOOK_URL", f"http://127.0.0.1:{server.server_port}/")
    try:
        exec(compile(_example(), str(README), "exec"), {"__name__": "readme_example"})
    finally:
        server.shutdown()
        server.server_close()
    printed = capsys.readouterr().out
    assert "mismatch_kl_k1" in printed  # the late KL growth was caught
    with RunReader(tmp_path / "runs" / "grpo-7") as run:
        assert run.last_step() == 199
        names = set(run.metric_names())
        assert {"reward/mean", "policy/entropy", "mismatch/kl_k1", "my/own_metric"} <= names
        alerts = run.alerts()
        assert any(a.detector == "mismatch_kl_k1" for a in alerts)
        actions = run.actions()
        assert actions and all(a.status == "rejected" for a in actions)
        assert run.status() == "finished"
    assert len(received) == len(alerts)  # every alert reached the webhook, Slack-shaped
    assert all(set(body) == {"text"} for body in received)
