"""`minirl bench speed`: what the toolkit costs, measured side by side in one run.

    minirl bench speed [CONFIG] [--set key=value ...] [--quick] [--skip PART ...]
    minirl bench speed --setup-trl        # once: TRL in its own venv, bench/.venv-trl

On the run config's tiny model after its (cached) cold start (default: configs/demo.yaml),
one process measures, in this order, with the load average noted at start and end:

1. diagnostics overhead: `rl_step` + `Monitor.log` with `train.diagnostics` on and off,
   alternated on the same warmed-up engines, same prompts and seeds per pair, the policy
   restored to the same θ before every call (so both arms do the same work but for the
   diagnostics). Reported: medians, paired overheads with bootstrap 95 % intervals
   (whole step; step without its rollout, which is identical work in both arms), the
   difference by part of the step, and a cProfile of a diagnostics-on step;
2. trainer step vs TRL's GRPOTrainer (`vs_trl.py`, `trl_step.py`, bench/.venv-trl): the
   same checkpoint, prompts, group size, max new tokens and updates per rollout, rounds
   of TRL then ours back to back, each round from the cold-start weights;
3. rollout throughput, vLLM vs PyTorch engine (`bench/engines.py`'s `measure`);
4. run-store write throughput and long-run load time (`bench/store.py`).

Writes Markdown (--out) with the exact command and machine facts, and every raw timing
beside it (same name, .json). It deliberately owns no measurement code of parts 3-4 (it
imports the bench scripts) and does not tune anything.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.engines import VARIANTS, measure
from bench.store import bench_write, best, build_long, metric_names
from monitor.errors import UserError
from bench.speed.stats import median_ci, median_ratio_ci
from bench.speed.vs_trl import setup_trl_venv, trl_comparison, trl_python

REPO = Path(__file__).resolve().parents[2]
PARTS = ("diagnostics", "trl", "vllm", "store")
TARGET_OVERHEAD = 0.03  # issue 7: diagnostics under 3 % of the step time


@dataclasses.dataclass(frozen=True)
class Effort:
    """How many repetitions each part makes (full mode vs --quick)."""

    pairs: int = 40
    warmup: int = 2
    trl_rounds: int = 5
    trl_steps: int = 3
    engine_repeats: int = 5
    write_steps: int = 2000
    load_steps: int = 100_000


QUICK = Effort(pairs=4, warmup=1, trl_rounds=1, trl_steps=2, engine_repeats=2,
               write_steps=200, load_steps=5000)  # fmt: skip


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# --------------------------------------------------------------------------- set-up


@dataclasses.dataclass
class Setup:
    """The warmed-up pieces every part shares."""

    cfg: Any
    ckpt: Path
    task: Any
    policy: Any
    engine: Any
    controls: Any
    snapshot: dict

    def examples(self, i: int) -> list:
        """Example set i: the same prompts for every arm and trainer that uses index i."""
        return self.task.sample_train(self.cfg.train.prompts_per_step, seed=f"speed:{i}")


def _setup(cfg: Any, threads: int) -> Setup:
    import torch

    from trainer.coldstart import cold_start
    from trainer.controls import Controls
    from trainer.engines.factory import make_inference_engine
    from trainer.engines.training import TrainingEngine
    from trainer.tasks import make_task

    torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)
    start = cold_start(cfg.model, cfg.task, cfg.cold_start, eval_cfg=cfg.eval, progress=True)
    policy = TrainingEngine(start.path, cfg.engine, cfg.optim)
    engine = make_inference_engine(start.path, cfg.engine)
    controls = Controls(cfg.loss, cfg.train.mini_batches, cfg.train.routing_replay)
    snapshot = copy.deepcopy(policy.state_dict())
    return Setup(cfg, Path(start.path), make_task(cfg.task), policy, engine, controls, snapshot)


def _timed_step(s: Setup, i: int, diagnostics: bool, mon: Any, step: int) -> dict[str, float]:
    """One `rl_step` on example set i (seed i) from the snapshot weights, logged to `mon`."""
    from trainer.step import rl_step

    tc = s.cfg.train
    s.policy.load_state_dict(s.snapshot)
    examples = s.examples(i)
    c0, t0 = time.process_time(), time.perf_counter()
    result = rl_step(
        examples, s.policy, s.engine, s.task, s.controls, s.cfg.sampling, seed=i,
        advantage_baseline=tc.advantage_baseline, advantage_std_norm=tc.advantage_std_norm,
        diagnostics=diagnostics,
    )  # fmt: skip
    t1 = time.perf_counter()
    mon.log(step, result.scalars, result.distributions)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    sc = result.scalars
    return {
        "wall": wall, "cpu": cpu, "log": time.perf_counter() - t1,
        "rollout": sc["perf/rollout_s"], "train": sc["perf/train_s"], "diag": sc["perf/diag_s"],
        "len": sc["response/len_mean"], "scalars": float(len(sc)),
    }  # fmt: skip


# --------------------------------------------------------------------------- 1. diagnostics


def diagnostics_overhead(s: Setup, effort: Effort, root: Path) -> dict[str, Any]:
    """Alternate diagnostics on/off (order flipped every pair) on the same prompts/seed."""
    from monitor import Monitor

    mons = {d: Monitor(root / f"diag_{'on' if d else 'off'}") for d in (True, False)}
    rows: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    try:
        for i in range(effort.warmup + effort.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            pair = {d: _timed_step(s, 1000 + i, d, mons[d], i + 1) for d in order}
            if i >= effort.warmup:
                for d in (True, False):
                    rows[d].append(pair[d])
            _say(f"diagnostics pair {i + 1}/{effort.warmup + effort.pairs}: on "
                 f"{pair[True]['wall']:.3f} s, off {pair[False]['wall']:.3f} s")  # fmt: skip
    finally:
        for m in mons.values():
            m.close()
    on, off = rows[True], rows[False]
    out: dict[str, Any] = {"rows": rows}
    pairs = list(zip(on, off, strict=True))
    for key in ("wall", "cpu"):
        out[f"{key}_paired"] = median_ci([a[key] / b[key] - 1 for a, b in pairs])
        out[f"{key}_of_medians"] = median_ratio_ci([r[key] for r in on], [r[key] for r in off])
    # where the difference goes: paired differences of each part, as shares of the
    # median diagnostics-off step
    base = _med([r["wall"] for r in off])
    out["parts"] = {
        part: tuple(x / base for x in median_ci([a[part] - b[part] for a, b in pairs]))
        for part in ("rollout", "train", "diag", "log")
    }
    # the rollout is the same work in both arms (same seed, weights, prompts): its
    # difference is pure noise, so the step without it measures the overhead more tightly
    net = [((a["wall"] - a["rollout"]) - (b["wall"] - b["rollout"])) / base for a, b in pairs]
    out["net_paired"] = median_ci(net)
    # the one cost hidden inside the noisy updates: routing recorded in their forwards
    out["recording"] = tuple(x / base for x in _recording_cost(s, effort.pairs))
    out["profile"] = _profile_step(s, steps=3)
    return out


def _recording_cost(s: Setup, pairs: int) -> tuple[float, float, float]:
    """Seconds that recording e^π_θ adds to one rollout's updates (forward + backward of
    each mini-batch, as in section 5), measured alone: record on/off alternated on one
    rollout's batch. Median per-pair difference and its 95 % interval; 0 for a dense
    model, which records nothing."""
    if not s.policy.is_moe:
        return (0.0, 0.0, 0.0)
    from trainer.evaluate import encode_prompts

    s.policy.load_state_dict(s.snapshot)
    prompts = encode_prompts(s.policy.tokenizer, [ex.prompt for ex in s.examples(0)])
    ro = s.engine.generate(prompts, s.cfg.sampling, seed=0)
    batches = s.cfg.train.mini_batches
    rows = ro.batch_size // batches

    def updates(record: bool) -> float:
        t0 = time.perf_counter()
        for m in range(batches):
            mb = slice(m * rows, (m + 1) * rows)
            logp, _, _ = s.policy.forward_logprobs(
                ro.input_ids[mb], ro.attention_mask[mb], ro.response_mask[mb], record=record
            )
            (-logp.sum()).backward()
            s.policy.model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    updates(True), updates(False)  # warm-up
    diffs = []
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        t = {flag: updates(flag) for flag in order}
        diffs.append(t[True] - t[False])
    return median_ci(diffs)


def _profile_step(s: Setup, steps: int) -> list[tuple[str, float, float]]:
    """Where a diagnostics-on `rl_step` spends its time, under cProfile: what it calls
    directly, plus every public function of `minirl/` and `trainer/engines/` (those behind
    a no_grad wrapper are not direct callees). (name, ms per step, calls per step)."""
    import cProfile
    import pstats

    from trainer.step import rl_step

    prof = cProfile.Profile()
    for i in range(steps):
        s.policy.load_state_dict(s.snapshot)
        examples = s.examples(2000 + i)
        prof.enable()
        rl_step(examples, s.policy, s.engine, s.task, s.controls, s.cfg.sampling, seed=i)
        prof.disable()
    stats = pstats.Stats(prof).stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    rows: dict[str, tuple[str, float, float]] = {}
    for (file, _, func), (_, ncalls, _, cum, callers) in stats.items():
        path = Path(file)
        name = f"{path.parent.name}/{path.name}:{func}" if file != "~" else func
        ours = path.parent.name in ("minirl", "engines") and REPO in path.parents
        if ours and not func.startswith(("_", "<")):  # no_grad-wrapped ones hide behind a wrapper
            rows[name] = (name, 1e3 * cum / steps, ncalls / steps)
        for (cfile, _, cfunc), (_, calls, _, ccum) in callers.items():
            if cfunc == "rl_step" and cfile.endswith("step.py") and func != "decorate_context":
                rows[name] = (name, 1e3 * ccum / steps, calls / steps)
    return sorted(rows.values(), key=lambda r: -r[1])


# --------------------------------------------------------------------------- 3-4. bench scripts


def engine_throughput(s: Setup, effort: Effort, args: argparse.Namespace) -> list[dict]:
    from trainer.evaluate import encode_prompts

    prompts = encode_prompts(s.policy.tokenizer, [ex.prompt for ex in s.examples(0)])
    ns = argparse.Namespace(threads=args.threads, vllm_threads=args.vllm_threads,
                            repeats=effort.engine_repeats)  # fmt: skip
    wanted = ["PyTorch fp32", "PyTorch bf16"]
    if "vllm" not in args.skip:
        wanted += ["vLLM fp32", "vLLM bf16"]
    s.policy.load_state_dict(s.snapshot)
    rows = []
    for variant in VARIANTS:
        if variant[0] in wanted:
            rows.append(measure(*variant, s.ckpt, prompts, s.cfg.sampling, s.policy, ns))
            _say(f"engine {variant[0]}: {rows[-1]['tok_per_s']:.0f} tokens/s")
    return rows


def store_speed(effort: Effort, root: Path) -> dict[str, float]:
    names = metric_names(80)
    out = {f"write_{d}": bench_write(root, effort.write_steps, names, dist=d)
           for d in (False, True)}  # fmt: skip
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


# --------------------------------------------------------------------------- entry point


def _say(text: str) -> None:
    print(f"[bench speed] {text}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl bench speed", description=__doc__.split("\n")[0])
    p.add_argument("config", nargs="?", default=str(REPO / "configs" / "demo.yaml"))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--quick", action="store_true", help="a minute or two: few repetitions")
    p.add_argument("--skip", action="append", default=[], choices=PARTS,
                   help="leave a part out (vllm: the vLLM rows of part 3)")  # fmt: skip
    p.add_argument("--pairs", type=int, help="diagnostics on/off pairs (default 40, quick 4)")
    p.add_argument("--trl-rounds", type=int, help="TRL/ours rounds (default 5, quick 1)")
    p.add_argument("--trl-steps", type=int, help="timed rollouts per round (default 3)")
    p.add_argument("--load-steps", type=int, help="steps of the long store (default 100000)")
    p.add_argument("--threads", type=int, help="torch threads, training side and TRL "
                   "(default: the run config's threads)")  # fmt: skip
    p.add_argument("--vllm-threads", type=int, default=1, help="torch threads inside vLLM")
    p.add_argument("--trl-python", help="Python of TRL's environment (bench/.venv-trl)")
    p.add_argument("--setup-trl", action="store_true", help="create bench/.venv-trl and exit")
    p.add_argument("--out", help="Markdown output (default bench/results/speed.md; quick: "
                   "bench/results/speed-quick.md)")  # fmt: skip
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.setup_trl:
        return setup_trl_venv()
    effort = QUICK if args.quick else Effort()
    overrides = {
        k: v
        for k, v in (
            ("pairs", args.pairs),
            ("trl_rounds", args.trl_rounds),
            ("trl_steps", args.trl_steps),
            ("load_steps", args.load_steps),
        )
        if v is not None
    }
    effort = dataclasses.replace(effort, **overrides)  # fmt: skip
    if min(effort.pairs, effort.trl_rounds, effort.trl_steps) < 1:
        raise UserError("--pairs, --trl-rounds and --trl-steps must be >= 1")
    if effort.load_steps < 1000 or effort.load_steps % 1000:
        raise UserError(f"--load-steps {effort.load_steps}: a positive multiple of 1000 "
                        "(the long store is written in 1000-step transactions)")  # fmt: skip
    if "trl" not in args.skip:
        trl_python(args.trl_python)  # fail before the long parts, not after them
    default_out = "speed-quick.md" if args.quick else "speed.md"
    out = Path(args.out) if args.out else REPO / "bench" / "results" / default_out

    from trainer.config import load_config
    from bench.speed.report import machine_facts, render

    cfg = load_config(args.config, args.set)
    args.threads = args.threads or cfg.threads or os.cpu_count() or 1
    load0, t_start = os.getloadavg(), time.perf_counter()
    results: dict[str, Any] = {}
    s = _setup(cfg, args.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="minirl-speed-") as tmp:
            root = Path(tmp)
            if "diagnostics" not in args.skip:
                results["diagnostics"] = diagnostics_overhead(s, effort, root)
            if "trl" not in args.skip:
                results["trl"] = trl_comparison(s, effort, args.trl_python, args.threads, root)
            results["engines"] = engine_throughput(s, effort, args)
            if "store" not in args.skip:
                results["store"] = store_speed(effort, root)
    finally:
        s.engine.close()
    argv_text = " ".join(shlex.quote(a) for a in argv)
    facts = machine_facts(load0, os.getloadavg(), time.perf_counter() - t_start, args)
    text = render(cfg, effort, results, facts, f"minirl bench speed {argv_text}".strip())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = {"command": f"minirl bench speed {argv_text}".strip(), "machine": facts,
           "effort": dataclasses.asdict(effort), "results": results}  # fmt: skip
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    print(text)
    _say(f"-> {out} (every timing: {out.with_suffix('.json').name})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
