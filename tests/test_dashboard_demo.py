"""`minirl demo` end to end in a real headless Chromium: the whole loop on the live page.

The demo runs as a user starts it (its own process, its config, its dashboard on a free
loopback port), shortened: the PyTorch inference engine, 16 prompts a step, evaluation
only before and after, 60 steps (25 after the incident: the charts refresh every 5 s, and
on a quiet machine 10 steps took less), about a minute on 2 busy cores; the
scripted incident is the demo's own (configs/demo.yaml: clipping off and 8 mini-batches
per rollout at step 35). The cold start is the demo's, cached where `make demo` caches
it (the first run on a machine trains it: ~1.5 min more).

While the run is still live, the Live page must show, without a reload: the induced
incident (in the run's story and as a labelled line on the charts), an episode opened by
the detectors with its blamed factor (shaded, with its marker), and an automatic action
applied (in the story and as a marker on the charts). Then Ctrl-C ends the demo, whose
terminal output announced the incident and sums up the actions.

`MINIRL_FULL_DEMO=1` also runs the full demo (vLLM, 70 steps, ~2-5 min) and, with
`MINIRL_DEMO_SCREENSHOTS=DIR`, saves the Live page once the loop is on it (the run still
live) and at the end, and the Alerts page at the end, to DIR (docs/images/demo_*.png
are made so).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.browser import chromium_available, chromium_page, page_text, wait_until
from dashboard.settings import ENV_REFRESH_S

ROOT = Path(__file__).resolve().parents[1]
T0 = time.monotonic()  # progress lines (pytest -s) count from here
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not chromium_available(),
        reason="chromium or playwright missing: apt-get install -y chromium; the dev extra",
    ),
]
SHORT = [
    "--engine",
    "torch",
    "--steps",
    "60",
    "--set",
    "train.prompts_per_step=16",
    "--set",
    "eval.every=0",
    "--set",
    "eval.samples=1",
]
# What the page shows of the loop, polled in the page: the story's lines (innerText) and
# the Plotly figures' own data (each chart's div carries its traces and layout).
LOOP = r"""() => {
  const text = document.body.innerText;
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const names = new Set(plots.flatMap(p => (p.data || []).map(t => t.name)));
  const labels = plots.flatMap(p => [...p.querySelectorAll('.annotation-text')]
    .map(t => t.textContent));
  const shaded = plots.some(p => ((p.layout || {}).shapes || []).some(s => s.type === 'rect'));
  const seen = {
    live: text.includes('● live'),
    finished: text.includes('○ finished'),
    incident_story: /induced incident \(scripted\): clipping switched off/.test(text),
    incident_line: labels.includes('induced incident'),
    episode_story: /▲ episode \((warning|critical)\), blamed: \w+/.test(text),
    episode_chart: shaded && (names.has('alert: warning') || names.has('alert: critical')),
    action_story: /◆ action \w+.* applied \(policy\)/.test(text),
    action_chart: names.has('action: applied'),
  };
  const all = ['incident_story', 'incident_line', 'episode_story', 'episode_chart',
               'action_story', 'action_chart'].every(k => seen[k]);
  return (all || seen.finished) && seen;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_demo(tmp_path: Path, args: list[str]) -> tuple[subprocess.Popen, Path, Path]:
    runs, log = tmp_path / "runs", tmp_path / "demo.log"
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", ENV_REFRESH_S: "1"}
    cmd = [sys.executable, "-m", "app.cli", "demo", "--runs-dir", str(runs), "--port", str(port)]
    # Ctrl-C reaches it as in a terminal (a background job inherits SIGINT ignored)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen(
        [*cmd, *args],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=default_sigint,
        start_new_session=True,  # its own group: whatever it leaves behind is ended with it
    )
    return proc, runs, log


def wait_for_run(proc: subprocess.Popen, runs: Path, log: Path, timeout_s: float) -> Path:
    """The demo's run directory once its store holds a step (the page needs a run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        stores = list(runs.glob("demo-*/store.sqlite"))
        if stores and "step 1/" in log.read_text(errors="replace"):
            return stores[0].parent
        time.sleep(1)
    raise AssertionError("the demo logged no step in time:\n" + log.read_text()[-3000:])


def url_of(log: Path) -> str:
    line = next(ln for ln in log.read_text().splitlines() if ln.startswith("dashboard: "))
    return line.split()[1]


def watch_loop(
    proc,
    runs: Path,
    log: Path,
    timeout_s: float,
    shots: Path | None = None,
    to_the_end: bool = False,
) -> dict:
    """Open the Live page of the demo's run and wait, without reloading, until the loop is
    on it or the run is over (`to_the_end`: then also until the run has finished); returns
    what was seen."""
    run = wait_for_run(proc, runs, log, timeout_s=timeout_s)
    print(f"{time.monotonic() - T0:.0f} s: run {run.name} has a step", flush=True)
    with chromium_page(width=1400, height=2000) as page:
        live = f"{url_of(log)}live?run={run.name}"
        page.goto(live)
        if wait_until(page, "() => document.body.innerText.includes('last step')", 20) is None:
            page.goto(live)  # a cold server's first load can stay blank
        print(f"{time.monotonic() - T0:.0f} s: page loaded", flush=True)
        seen = wait_until(page, LOOP, timeout_s)
        print(f"{time.monotonic() - T0:.0f} s: loop seen {seen}", flush=True)
        assert seen is not None, page_text(page)[-3000:]
        if shots is not None:
            time.sleep(6)  # the charts' fragment redraws after the header's
            page.screenshot(path=str(shots / "demo_live_during.png"))
        if to_the_end or shots is not None:
            finished = "() => document.body.innerText.includes('○ finished')"
            assert wait_until(page, finished, 600) is not None, page_text(page)[-3000:]
        if shots is not None:
            time.sleep(6)  # the charts' fragment redraws after the header's
            page.screenshot(path=str(shots / "demo_live.png"))
            page.goto(f"{url_of(log)}alerts?run={run.name}")
            wait_until(page, "() => document.querySelectorAll('.js-plotly-plot').length", 60)
            time.sleep(2)
            page.screenshot(path=str(shots / "demo_alerts.png"))
    return seen


def stop(proc: subprocess.Popen, log: Path) -> str:
    """Ctrl-C, as a user ends the demo: the first one ends training if it is still going
    (the dashboard keeps serving), the next one the demo; its terminal output."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        proc.send_signal(signal.SIGINT)
        end = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < end:
            if "keeps serving" in log.read_text(errors="replace"):
                break
            time.sleep(0.5)
        time.sleep(0.5)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    with contextlib.suppress(ProcessLookupError):  # a dashboard left by a killed demo
        os.killpg(proc.pid, signal.SIGKILL)
    return log.read_text(errors="replace")


def check(seen: dict, out: str) -> None:
    assert not seen["finished"], f"the loop was not on the page while the run was live: {seen}"
    assert seen["live"], seen
    # the terminal announced the incident before training and summed up the actions
    assert "scripted: induced incident at step 35: clipping switched off" in out
    assert out.index("scripted: induced incident") < out.index("step 1/")
    assert "action  step" in out and "applied (policy)" in out.split("demo run ")[-1]


def test_demo_shows_incident_alert_and_action_live(tmp_path: Path):
    proc, runs, log = start_demo(tmp_path, SHORT)
    try:
        seen = watch_loop(proc, runs, log, timeout_s=240)
    finally:
        out = stop(proc, log)
    check(seen, out)


@pytest.mark.vllm
@pytest.mark.skipif(not os.environ.get("MINIRL_FULL_DEMO"), reason="MINIRL_FULL_DEMO=1: ~5 min")
def test_full_demo_shows_the_loop(tmp_path: Path):
    shots = os.environ.get("MINIRL_DEMO_SCREENSHOTS")
    proc, runs, log = start_demo(tmp_path, [])
    try:
        seen = watch_loop(
            proc, runs, log, timeout_s=600, shots=Path(shots) if shots else None, to_the_end=True
        )
        deadline = time.monotonic() + 60  # the run's end is stored before its summary prints
        while "keeps serving" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.5)
    finally:
        out = stop(proc, log)
    check(seen, out)
    # the rollback's undone steps are trained again (train.rollback_redo): 70 data positions
    back = re.search(r"rolled back to the checkpoint of step (\d+) \(at step (\d+)\)", out)
    assert back, out[-2000:]
    to_step, at = int(back[1]), int(back[2])
    assert f"demo run completed at step {70 + at - to_step}:" in out
