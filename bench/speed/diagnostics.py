"""Part 1 of `minirl bench speed`: what the per-step diagnostics cost.

`rl_step` + `Monitor.log` with `train.diagnostics` on and off, alternated on the same
warmed-up engines, same prompts and seeds per pair, the policy restored to the same θ
before every call, so both arms do the same work but for the diagnostics. Measured:
paired overheads with bootstrap 95 % intervals (whole step; step without its rollout,
which is identical work in both arms), the difference by part of the step, the cost of
recording routing in the updates alone, and a cProfile of a diagnostics-on step.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench import REPO
from bench.speed.fixture import Effort, Setup, say, timed_step
from bench.speed.stats import median_ci, median_ratio_ci


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def diagnostics_overhead(s: Setup, effort: Effort, root: Path) -> dict[str, Any]:
    """Alternate diagnostics on/off (order flipped every pair) on the same prompts/seed."""
    from monitor import Monitor

    mons = {d: Monitor(root / f"diag_{'on' if d else 'off'}") for d in (True, False)}
    rows: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    try:
        for i in range(effort.warmup + effort.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            pair = {d: timed_step(s, 1000 + i, d, mons[d], i + 1) for d in order}
            if i >= effort.warmup:
                for d in (True, False):
                    rows[d].append(pair[d])
            say(
                f"diagnostics pair {i + 1}/{effort.warmup + effort.pairs}: on "
                f"{pair[True]['wall']:.3f} s, off {pair[False]['wall']:.3f} s"
            )
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
