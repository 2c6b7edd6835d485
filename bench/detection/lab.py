"""Running the lab's incident configs: every (config, seed) as its own `minirl train`.

`configs/lab/incidents/*.yaml` are a healthy off-policy run plus one scripted incident
with a known cause (or none: the `stable_*` twins). Runs go to `<out>/<config>/seed<k>`,
`jobs` at a time, each a subprocess with one torch thread. A finished run is skipped; an
interrupted one resumes from its last checkpoint (`--resume`), so the same command can
be run again after a kill. Used by `minirl bench detection --run-lab` and by the
remediation benchmark (with `train.remediation=true`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import REPO
from monitor.store.reader import RunReader

CONFIGS = REPO / "configs" / "lab" / "incidents"


def configs() -> list[str]:
    return sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem != "base")


def finished(run_dir: Path) -> bool:
    """A run whose last stop event says it ended (completed, stopped by an action, or
    non-finite): one interrupted (Ctrl-C, SIGTERM) is resumed, not finished."""
    if not (run_dir / "store.sqlite").exists():
        return False
    try:
        with RunReader(run_dir) as reader:
            stops = reader.events("stop")
    except Exception:  # an unreadable store is rerun from scratch by the caller
        return False
    return bool(stops) and stops[-1].detail.get("reason") != "interrupted"


def run_one(
    config: str, seed: int, out: Path, overrides: Sequence[str] = (), run_dir: Path | None = None
) -> tuple[str, int]:
    """Train (or resume) one run in `run_dir` (default `<out>/<config>/seed<k>`); returns
    (run dir, exit code)."""
    run_dir = run_dir or out / config / f"seed{seed}"
    if finished(run_dir):
        return str(run_dir), 0
    resume = (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir())
    if (run_dir / "store.sqlite").exists() and not resume:
        for path in run_dir.iterdir():  # started but nothing to resume from: start over
            if path.is_file():
                path.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "app.cli", "train", str(CONFIGS / f"{config}.yaml"),
        "--set", f"seed={seed}", "--run-dir", str(run_dir), "--quiet",
        *(arg for o in overrides for arg in ("--set", o)),
    ]  # fmt: skip
    if resume:
        cmd.append("--resume")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(run_dir / "train.log", "a") as log:
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    return str(run_dir), rc


def run_lab(
    names: Sequence[str], seeds: Sequence[int], out: Path, jobs: int, overrides: Sequence[str] = ()
) -> int:
    """Every (config, seed), `jobs` at a time; prints one line per run; 0 if all ended."""
    todo = [(c, s) for s in seeds for c in names]
    start, failed = time.monotonic(), 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for run_dir, rc in pool.map(lambda cs: run_one(*cs, out, overrides), todo):
            failed += rc != 0
            status = "ok" if rc == 0 else f"exit {rc} (see {run_dir}/train.log)"
            print(f"[{time.monotonic() - start:6.0f}s] {run_dir}: {status}", flush=True)
    return 1 if failed else 0
