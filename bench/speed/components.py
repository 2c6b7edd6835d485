"""Parts 3-4 of `minirl bench speed`: rollout throughput per engine, run-store speed.

The measurement code is the component benchmarks' own (`bench/vllm.py`'s `measure`,
`bench/store.py`'s functions), run here on the shared set-up; nothing is duplicated.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.speed.fixture import Effort, Setup, say
from bench.store import bench_write, best, build_long, metric_names
from bench.vllm import VARIANTS, measure


def engine_throughput(s: Setup, effort: Effort, args: argparse.Namespace) -> list[dict]:
    from trainer.evaluate import encode_prompts

    prompts = encode_prompts(s.policy.tokenizer, [ex.prompt for ex in s.examples(0)])
    ns = argparse.Namespace(
        threads=args.threads, vllm_threads=args.vllm_threads, repeats=effort.engine_repeats
    )
    wanted = ["PyTorch fp32", "PyTorch bf16"]
    if "vllm" not in args.skip:
        wanted += ["vLLM fp32", "vLLM bf16"]
    s.policy.load_state_dict(s.snapshot)
    rows = []
    for variant in VARIANTS:
        if variant[0] in wanted:
            rows.append(measure(*variant, s.ckpt, prompts, s.cfg.sampling, s.policy, ns))
            say(f"engine {variant[0]}: {rows[-1]['tok_per_s']:.0f} tokens/s")
    return rows


def store_speed(effort: Effort, root: Path) -> dict[str, float]:
    names = metric_names(80)
    out = {
        f"write_{d}": bench_write(root, effort.write_steps, names, dist=d) for d in (False, True)
    }
    from monitor import RunReader

    run = root / "long"
    out["build_s"] = build_long(run, effort.load_steps, names)
    t = time.perf_counter()
    with RunReader(run) as r:
        out["open_s"] = time.perf_counter() - t
        out["one_s"] = best(lambda: r.scalars(names[0]))
        out["ten_s"] = best(lambda: r.scalars(names[:10]))
        out["all_s"] = best(lambda: r.scalars(names), repeat=1)
        steps, _ = r.scalars(names[0])[names[0]]
        if steps.size != effort.load_steps:
            raise RuntimeError(f"store returned {steps.size} steps, wrote {effort.load_steps}")
    out["size_mib"] = (run / "store.sqlite").stat().st_size / 2**20
    return out
