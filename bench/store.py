"""Run-store benchmark: write throughput through `Monitor.log`, load time of long series.

    minirl bench store [--write-steps 2000] [--load-steps 100000]

1. Write: `Monitor.log` with 80 scalars per step (all default detectors on, one SQLite
   transaction per step), with and without one 4096-value distribution per step.
2. Load: a 100k-step × 80-metric store (built through `RunStore` in 1000-step
   transactions, to keep the benchmark short; the file is the same as Monitor's), then
   `RunReader.scalars` for one, ten and all metrics, thinned views, and `list_runs`.
Results go to bench/results/store.md. Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import RESULTS
from monitor import Monitor, RunReader, list_runs
from monitor.config import DetectorsConfig
from monitor.store.run_store import RunStore

_RULES = [getattr(DetectorsConfig(), f) for f in DetectorsConfig.__dataclass_fields__]
CANONICAL = sorted({r.metric for r in _RULES if isinstance(getattr(r, "metric", None), str)})
"""The metrics the default detectors watch, one per rule that watches a single metric."""


def metric_names(n: int) -> list[str]:
    """The metrics the detectors watch, padded with other namespaced names up to n."""
    return CANONICAL + [f"extra/m{i:02d}" for i in range(n - len(CANONICAL))]


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_write(root: Path, steps: int, names: list[str], dist: bool) -> dict[str, float]:
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(-3, 0.2, (steps, len(names))))
    samples = rng.normal(0, 0.1, (8, 4096))
    mon = Monitor(root / f"write_{int(dist)}")
    t = time.perf_counter()
    for step in range(steps):
        scalars = dict(zip(names, values[step].tolist(), strict=True))
        mon.log(step, scalars, {"log_ratio": samples[step % 8]} if dist else None)
    elapsed = time.perf_counter() - t
    mon.close()
    return {
        "steps_per_s": steps / elapsed,
        "scalars_per_s": steps * len(names) / elapsed,
        "ms_per_step": 1e3 * elapsed / steps,
    }


def build_long(path: Path, steps: int, names: list[str]) -> float:
    store = RunStore.open(path)
    rng = np.random.default_rng(1)
    t = time.perf_counter()
    chunk = 1000
    for lo in range(0, steps, chunk):
        block = rng.normal(0, 1, (chunk, len(names)))
        with store.transaction():
            for i in range(chunk):
                store.write_step(lo + i, dict(zip(names, block[i].tolist(), strict=True)), 0.0)
    elapsed = time.perf_counter() - t
    store.close()
    return elapsed


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minirl bench store", description=__doc__.split("\n\n")[0])
    p.add_argument("--write-steps", type=int, default=2000)
    p.add_argument("--load-steps", type=int, default=100_000)
    p.add_argument("--metrics", type=int, default=80)
    p.add_argument("--out", type=Path, default=RESULTS / "store.md")
    args = p.parse_args(argv)
    names = metric_names(args.metrics)
    lines = [
        "# Run-store benchmark (`minirl bench store`)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared),"
        f" Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}.",
        f"Date: {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        w0 = bench_write(root, args.write_steps, names, dist=False)
        w1 = bench_write(root, args.write_steps, names, dist=True)
        lines += [
            f"## Write: `Monitor.log`, {args.metrics} scalars/step, {args.write_steps} steps,"
            " default detectors, one transaction per step",
            "",
            "| per step | steps/s | scalars/s | ms/step |",
            "|---|---|---|---|",
            f"| scalars only | {w0['steps_per_s']:.0f} | {w0['scalars_per_s']:.0f} |"
            f" {w0['ms_per_step']:.2f} |",
            f"| + one 4096-value distribution | {w1['steps_per_s']:.0f} |"
            f" {w1['scalars_per_s']:.0f} | {w1['ms_per_step']:.2f} |",
            "",
        ]
        print("\n".join(lines[-6:]), flush=True)
        run = root / "long"
        build_s = build_long(run, args.load_steps, names)
        size_mb = (run / "store.sqlite").stat().st_size / 2**20
        with RunReader(run) as r:
            one = best(lambda: r.scalars(names[0]))
            ten = best(lambda: r.scalars(names[:10]))
            every = best(lambda: r.scalars(names[:10], every=100, agg="max"))
            window = best(lambda: r.scalars(names[:10], start=args.load_steps - 1000))
            full = best(lambda: r.scalars(names), repeat=1)
            steps, values = r.scalars(names[0])[names[0]]
            assert steps.size == args.load_steps and values.dtype == np.float64
        t = time.perf_counter()
        with RunReader(run) as r:
            r.summary()
        open_s = time.perf_counter() - t
        listing = best(lambda: list_runs(root))
        lines += [
            f"## Load: {args.load_steps:,} steps × {args.metrics} metrics"
            f" ({args.load_steps * args.metrics:,} rows, {size_mb:.0f} MiB; built in"
            f" {build_s:.0f} s through `RunStore` in 1000-step transactions)",
            "",
            "| query (`RunReader`) | time |",
            "|---|---|",
            f"| one metric, all {args.load_steps:,} steps | {one * 1e3:.0f} ms |",
            f"| ten metrics, all steps | {ten * 1e3:.0f} ms |",
            f"| ten metrics, last 1000 steps | {window * 1e3:.1f} ms |",
            f"| ten metrics, `every=100, agg='max'` | {every * 1e3:.0f} ms |",
            f"| all {args.metrics} metrics, all steps | {full:.2f} s |",
            f"| open + `summary()` | {open_s * 1e3:.1f} ms |",
            f"| `list_runs` over the benchmark's 3 runs | {listing * 1e3:.1f} ms |",
            "",
            "Times are the best of 3 (all-metrics: one run), warm OS cache.",
        ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-14:]))
    print(f"-> {args.out}")
    return 0
