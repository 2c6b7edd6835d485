"""The served dashboard in a real headless Chromium while a run is being written.

`start_dashboard` serves the app on a free loopback port; a background thread logs steps
through `Monitor.log`, as a trainer does. One DevTools page session (bench/browser.py)
loads the Live page, waits for it to show the run (the first load after a cold server
start can stay blank in headless Chromium, so it reloads once if needed), then, without any
reload, waits for a larger "last step N" to appear: the page refreshed itself. A marker
set in `window` proves the page was not reloaded. The screenshot goes to tmp_path.
"""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from bench.browser import Browser, chromium_available
from dashboard.serve import dashboard_url, start_dashboard, wait_until_ready
from monitor import Monitor

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not chromium_available(), reason="chromium missing: apt-get install -y chromium"
    ),
]
LAST_STEP = re.compile(r"last step (\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def writer(run_dir: Path, stop: threading.Event, period_s: float = 0.3) -> None:
    """A trainer stand-in: one step per period until told to stop (its own Monitor:
    SQLite connections belong to the thread that opened them)."""
    rng = np.random.default_rng(0)
    with Monitor(run_dir, config={"writer": "browser test"}) as mon:
        step = 0
        while not stop.is_set():
            mon.log(
                step,
                {"reward/mean": 0.3 + 0.001 * step, "mismatch/kl_k1": 1e-3,
                 "policy/entropy": 1.0, "optim/grad_norm": 1.0},
                {"log_rho": rng.normal(0, 0.1, 64)},
            )  # fmt: skip
            step += 1
            stop.wait(period_s)


def last_step(text: str) -> int | None:
    found = LAST_STEP.findall(text)
    return int(found[-1]) if found else None


def test_live_page_updates_in_a_real_browser_without_reload(tmp_path: Path):
    runs = tmp_path / "runs"
    runs.mkdir()
    stop = threading.Event()
    thread = threading.Thread(target=writer, args=(runs / "live-run", stop), daemon=True)
    thread.start()
    port = free_port()
    proc = start_dashboard(runs, "127.0.0.1", port, token="tok-in-env-only", refresh_s=1.0,
                           log_file=tmp_path / "server.log")  # fmt: skip
    try:
        url = dashboard_url("127.0.0.1", port)
        wait_until_ready(url, proc, timeout_s=90)
        # the token reaches the app through its environment, never its command line
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"tok-in-env-only" not in cmdline and b"--server.headless" in cmdline
        assert b"tok-in-env-only" in Path(f"/proc/{proc.pid}/environ").read_bytes()

        with Browser(tmp_path / "profile") as browser:
            page = url + "live?run=live-run"
            browser.goto(page)
            first = browser.wait_for(last_step, timeout_s=60)
            if first is None:  # cold start: the first load can stay blank
                browser.goto(page)
                first = browser.wait_for(last_step, timeout_s=60)
            assert first is not None, browser.text()[-2000:]
            assert "live-run" in browser.text()
            browser.eval("window.__minirl_marker = 42")
            newer = browser.wait_for(
                lambda text: (n := last_step(text)) is not None and n > first and n, 60
            )
            assert newer is not None and newer > first, browser.text()[-2000:]
            assert browser.eval("window.__minirl_marker") == 42  # same page: no reload
            charts = browser.wait_for(
                lambda _: browser.eval("document.querySelectorAll('.js-plotly-plot').length"),
                timeout_s=60,
            )
            assert charts and charts >= 3
            shot = browser.screenshot(tmp_path / "live.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        from PIL import Image

        with Image.open(shot) as img:
            colours = img.convert("RGB").getcolors(maxcolors=1_000_000)
        assert colours is not None and len(colours) > 50  # not a blank page
    finally:
        stop.set()
        thread.join(timeout=10)
        proc.terminate()
        proc.wait(timeout=30)
