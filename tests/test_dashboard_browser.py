"""The served dashboard in a real headless Chromium while a run is being written.

`start_dashboard` serves the app on a free loopback port; a background thread logs steps
through `Monitor.log`, as a trainer does. One Playwright page in Debian's Chromium
(bench/browser.py) loads the Live page, waits for it to show the run (the first load
after a cold server start can stay blank in headless Chromium, so it reloads once if
needed), then, without any reload, waits for a larger "last step N" to appear: the page
refreshed itself. A marker set in `window` proves the page was not reloaded. The
screenshot goes to tmp_path.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from bench.browser import chromium_available, chromium_page, page_text, wait_until
from dashboard.serve import dashboard_url, start_dashboard, wait_until_ready
from monitor import Monitor

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not chromium_available(),
        reason="chromium or playwright missing: apt-get install -y chromium; the dev extra",
    ),
]
# the page's last "last step N" once N > after (an object: step 0 is falsy in JavaScript)
LAST_STEP_AFTER = r"""after => {
  const found = [...document.body.innerText.matchAll(/last step (\d+)/g)];
  const n = found.length ? Number(found[found.length - 1][1]) : -1;
  return n > after && {step: n};
}"""
# the number of Plotly charts drawn once there are at least n
CHARTS = "n => (k => k >= n && k)(document.querySelectorAll('.js-plotly-plot').length)"


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
                {
                    "reward/mean": 0.3 + 0.001 * step,
                    "mismatch/kl_k1": 1e-3,
                    "policy/entropy": 1.0,
                    "optim/grad_norm": 1.0,
                },
                {"log_rho": rng.normal(0, 0.1, 64)},
            )
            step += 1
            stop.wait(period_s)


def last_step(page, after: int = -1, timeout_s: float = 60) -> int | None:
    found = wait_until(page, LAST_STEP_AFTER, timeout_s, arg=after)
    return None if found is None else found["step"]


def test_live_page_updates_in_a_real_browser_without_reload(tmp_path: Path):
    runs = tmp_path / "runs"
    runs.mkdir()
    stop = threading.Event()
    thread = threading.Thread(target=writer, args=(runs / "live-run", stop), daemon=True)
    thread.start()
    port = free_port()
    proc = start_dashboard(
        runs,
        "127.0.0.1",
        port,
        token="tok-in-env-only",
        refresh_s=1.0,
        log_file=tmp_path / "server.log",
    )
    try:
        url = dashboard_url("127.0.0.1", port)
        wait_until_ready(url, proc, timeout_s=90)
        # the token reaches the app through its environment, never its command line
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"tok-in-env-only" not in cmdline and b"--server.headless" in cmdline
        assert b"tok-in-env-only" in Path(f"/proc/{proc.pid}/environ").read_bytes()

        with chromium_page() as page:
            live = url + "live?run=live-run"
            page.goto(live)
            first = last_step(page)
            if first is None:  # cold start: the first load can stay blank
                page.goto(live)
                first = last_step(page)
            assert first is not None, page_text(page)[-2000:]
            assert "live-run" in page_text(page)
            page.evaluate("window.__minirl_marker = 42")
            newer = last_step(page, after=first)
            assert newer is not None and newer > first, page_text(page)[-2000:]
            assert page.evaluate("window.__minirl_marker") == 42  # same page: no reload
            charts = wait_until(page, CHARTS, timeout_s=60, arg=3)
            assert charts and charts >= 3
            shot = tmp_path / "live.png"
            page.screenshot(path=shot)
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
