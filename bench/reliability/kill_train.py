"""SIGKILL of `minirl train` at every phase, then the documented recovery command.

Phases: start-up (during imports, before the store exists), cold start (its temporary
cache folder exists), before the first checkpoint (steps stored, no checkpoint yet),
mid-step (inside a step after a few), during a checkpoint write (its temporary file
exists, not yet renamed) and during a rollback (requested at a step boundary, in
progress). The windows of the last two are held open by the instrumented trainer
(child.py). Recovery is always `minirl train CONFIG --run-dir RUN --resume`, the command
the README documents. Checks: the run finishes; its steps are exactly 0..N (no committed
step lost, none twice); every scalar but timings equals the uninterrupted run's, bit for
bit (resume exact); no temporary file is left in the run or the cold-start cache.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.reliability import procs
from core.typed_config import yaml_dump

PHASES = (
    "start-up",
    "cold start",
    "before the first checkpoint",
    "mid-step",
    "during a checkpoint write",
    "during a rollback",
)
STEPS, ROLLBACK_AT = 8, 6


def tiny_config(cache: Path) -> dict:
    """A run of a few seconds: a tiny MoE, 8 steps, a checkpoint every 2."""
    return {
        "name": "reliability",
        "seed": 0,
        "checkpoint_every": 2,
        "keep_checkpoints": 3,
        "model": {"arch": "qwen3_moe"},
        "task": {
            "kind": "add",
            "digits": 2,
            "heldout_size": 16,
            "verifier": "bench.reliability.verifiers:starts_with_digit",
        },
        "cold_start": {
            "steps": 4,
            "stop_at_sampled_acc": None,
            "batch_size": 16,
            "cache_dir": str(cache),
        },
        "sampling": {"n": 8, "max_new_tokens": 6},
        "engine": {"inference": "torch", "inference_dtype": "bf16"},
        "train": {"steps": STEPS, "prompts_per_step": 4, "mini_batches": 2},
        "eval": {"every": 2, "samples": 1, "mode": "sampled"},
    }


@dataclass
class Trial:
    phase: str
    killed_at: str
    """What the store held when the kill landed."""
    ok: bool
    lost: list[int]
    duplicated: int
    mismatched: list[str]
    leftovers: list[str]
    rerun: int
    """Steps committed before the kill and run again from the last checkpoint."""


def _child(config: Path, run: Path, marker: Path, log: Path, *flags: str, resume: bool = False):
    code = "import sys; from bench.reliability.child import main; sys.exit(main(sys.argv[1:]))"
    train = (str(config), "--run-dir", str(run), "--quiet", *(("--resume",) if resume else ()))
    args = (str(marker), *flags, "--", *train)
    return procs.python(code, *args, log=log)


def _steps(run: Path) -> list[int]:
    try:
        conn = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True, timeout=2)
        try:
            return [r[0] for r in conn.execute("SELECT step FROM steps ORDER BY step")]
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def scalars(run: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every scalar but timings (perf/*), as the reader gives them."""
    from monitor import RunReader

    with RunReader(run) as reader:
        names = [n for n in reader.metric_names() if not n.startswith("perf/")]
        return reader.scalars(names)


def compare(run: Path, baseline: dict) -> tuple[list[int], int, list[str]]:
    """(steps missing from 0..N, steps stored twice, metrics that differ from baseline)."""
    steps = _steps(run)
    lost = sorted(set(range(STEPS + 1)) - set(steps))
    got = scalars(run)
    bad = [
        name
        for name, (s, v) in baseline.items()
        if name not in got
        or not np.array_equal(got[name][0], s)
        or not np.array_equal(got[name][1], v, equal_nan=True)
    ]
    return lost, len(steps) - len(set(steps)), bad


def _leftovers(*folders: Path) -> list[str]:
    pats = ("step_*.tmp[0-9]*", ".tmp-*")
    return sorted(p.name for f in folders if f.is_dir() for pat in pats for p in f.rglob(pat))


def run_baselines(work: Path, cache: Path) -> dict[str, dict]:
    """The uninterrupted runs every trial is compared with: plain, and with the rollback."""
    out = {}
    work.mkdir(parents=True, exist_ok=True)
    for name, flags in (("plain", ()), ("rollback", ("--rollback-at", str(ROLLBACK_AT)))):
        config = work / f"{name}.yaml"
        config.write_text(yaml_dump(tiny_config(cache)))
        run = work / f"baseline-{name}"
        code = _child(config, run, work / "marker", work / f"baseline-{name}.log", *flags).wait()
        if code != 0:
            raise RuntimeError(f"baseline {name} failed ({code}); see {work}/baseline-{name}.log")
        out[name] = scalars(run)
    return out


def trial(phase: str, work: Path, cache: Path, baselines: dict, rng: random.Random) -> Trial:
    """Kill a run in `phase`, recover it, check it."""
    run, marker, log = work / "run", work / "marker", work / "trial.log"
    for path in (run, marker):
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    own_cache = work / "cache-cold" if phase == "cold start" else cache
    shutil.rmtree(work / "cache-cold", ignore_errors=True)
    config = work / "trial.yaml"
    config.write_text(yaml_dump(tiny_config(own_cache)))
    flags: tuple[str, ...] = ()
    if phase == "during a checkpoint write":
        flags = ("--slow-checkpoint", "2")
    if phase == "during a rollback":
        flags = ("--rollback-at", str(ROLLBACK_AT), "--pause-in-rollback", "2")
    proc = _child(config, run, marker, log, *flags)
    landed = _wait_for_phase(phase, proc, run, marker, own_cache, rng)
    before = _steps(run)
    procs.stop(proc)
    ckpts = sorted(int(p.stem.split("_")[1]) for p in (run / "checkpoints").glob("step_*.pt"))
    left_after_kill = _leftovers(run, own_cache)
    # the documented recovery: the same command with --resume
    again = flags[:2] if "rollback" in phase else ()
    code = _child(config, run, marker, log, *again, resume=True).wait()
    base = baselines["rollback" if "rollback" in phase else "plain"]
    lost, dup, bad = compare(run, base) if code == 0 else (list(range(STEPS + 1)), 0, ["run"])
    left = _leftovers(run, own_cache)
    rerun = len([s for s in before if s > (ckpts[-1] if ckpts else -1)])
    ok = code == 0 and not lost and not dup and not bad and not left and landed is not None
    detail = f"{landed}; left then: {', '.join(left_after_kill) or 'nothing'}"
    return Trial(phase, detail, ok, lost, dup, bad, left, rerun)


def _wait_for_phase(
    phase: str, proc, run: Path, marker: Path, cache: Path, rng: random.Random
) -> str | None:
    """Block until the run is in `phase`; what showed it (None: it never got there)."""

    def stored(k: int) -> bool:
        return len(_steps(run)) > k

    if phase == "start-up":
        time.sleep(rng.uniform(0.05, 0.8))
        return "during imports" if proc.poll() is None else None
    if phase == "cold start":
        ok = procs.wait_for(lambda: any(cache.glob(".tmp-*")), 300, proc)
        return "cold-start folder in the cache" if ok else None
    if phase == "before the first checkpoint":
        ok = procs.wait_for(lambda: stored(1), 300, proc, poll_s=0.02)
        return f"steps {_steps(run)} stored, no checkpoint" if ok else None
    if phase == "mid-step":
        k = rng.randint(2, STEPS - 2)
        if not procs.wait_for(lambda: stored(k), 300, proc, poll_s=0.02):
            return None
        time.sleep(rng.uniform(0.0, 0.3))
        return f"inside step {len(_steps(run))} (after {k} stored)"
    text = "checkpoint-writing" if "checkpoint" in phase else "rollback"
    ok = procs.wait_for(lambda: marker.is_file() and text in marker.read_text(), 300, proc)
    if ok:
        time.sleep(rng.uniform(0.0, 1.5))
    return f"{marker.read_text().split()[-1] if ok else ''} ({text})" if ok else None


def main_loop(work: Path, reps: int, seed: int = 0, log=print) -> list[Trial]:
    """`reps` trials of every phase; baselines first (they fill the shared cache)."""
    cache = work / "cache"
    baselines = run_baselines(work, cache)
    rng = random.Random(seed)
    trials = []
    for phase in PHASES:
        for _ in range(reps):
            t = trial(phase, work, cache, baselines, rng)
            log(f"  kill train {phase}: {'ok' if t.ok else 'FAILED'} ({t.killed_at})")
            trials.append(t)
    return trials


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for t in main_loop(Path(tmp), int(sys.argv[1]) if len(sys.argv) > 1 else 1):
            print(t)
