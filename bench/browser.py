"""A headless Debian Chromium driven through the Chrome DevTools protocol (test helper).

One page session for the dashboard's real-browser test and benchmark: navigate, read the
rendered text, evaluate JavaScript, take screenshots, all without reloading, so a test
can see the live page update by itself. The protocol runs over a websocket
(`websockets`, a dependency of Streamlit). Not a test file and not part of the app.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_available() -> bool:
    return shutil.which("chromium") is not None


class Browser:
    """One headless Chromium with one page, driven over CDP."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 2000) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)  # a stale one from an earlier session
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: close() ends every child
        )
        self.ws = None
        self._stack = contextlib.ExitStack()
        self._ids = itertools.count(1)
        try:
            self._attach(port_file, width, height)
        except BaseException:
            self.close()
            raise

    def _attach(self, port_file: Path, width: int, height: int) -> None:
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t["type"] == "page"]
        url = pages[0]["webSocketDebuggerUrl"]
        self.ws = self._stack.enter_context(connect(url, max_size=2**28, open_timeout=10))
        self.call("Page.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def call(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result (events in between are dropped)."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        return self.eval("document.body ? document.body.innerText : ''") or ""

    def wait_for(self, check: Callable[[str], Any], timeout_s: float, poll_s: float = 0.25) -> Any:
        """Poll the page text until `check(text)` is truthy; return it (None on timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = check(self.text())
            if found:
                return found
            time.sleep(poll_s)
        return None

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self._stack.close()  # the websocket, if open
        self.ws = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)  # the group this Browser started
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
