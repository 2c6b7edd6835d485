"""The stability report's tables: per setting, per mechanism, π beside μ, per run."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from bench.lab.rows import SettingRow, pm
from bench.lab.summary import fmt, window_mean


def _arrow(pairs: Sequence[tuple[float, float]]) -> str:
    if not pairs:
        return "-"
    a = statistics.fmean(p[0] for p in pairs)
    b = statistics.fmean(p[1] for p in pairs)
    return f"{fmt(a)} → {fmt(b)} (×{b / a:.2f})" if a > 0 else f"{fmt(a)} → {fmt(b)}"


def _alerts(firsts: Sequence[tuple[int, str] | None]) -> str:
    return "; ".join(f"{a[0]} ({a[1]})" if a else "none" for a in firsts) or "-"


def setting_table(rows: Sequence[SettingRow]) -> list[str]:
    head = (
        "| setting | finished runs / planned | steps | held-out acc at 0 | peak | final | late |"
        " collapsed (onset steps) | entropy first → last 10 % | mismatch KL k1 first → last "
        "| first alert: step (detector), per seed | first collapse-detector alert |"
    )
    lines = [head, "|" + "---|" * 12]
    for row in rows:
        runs = row.runs
        steps = sorted({r.last_step for r in runs if r.last_step is not None})
        steps_s = (
            "-" if not steps else (str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}")
        )
        collapsed = [r for r in runs if r.collapsed]
        onsets = ", ".join(str(r.collapse_step) for r in collapsed)
        coll = f"{len(collapsed)}/{len(runs)}" + (f" ({onsets})" if onsets else "")
        alert_s = _alerts([r.first_alert for r in runs])
        coll_s = _alerts([r.first_collapse_alert for r in runs])
        lines.append(
            f"| {row.label} (`{row.name}`) | {len(runs)}/{row.planned}"
            f"{f' (+{len(row.in_progress)} running)' if row.in_progress else ''} | "
            f"{steps_s} | {pm(row.values('eval0'))} | {pm(row.values('peak_eval'))} | "
            f"{pm(row.values('final_eval'))} | {pm(row.values('late_eval'))} | {coll} | "
            f"{_arrow([r.entropy for r in runs if r.entropy])} | "
            f"{_arrow([r.kl for r in runs if r.kl])} | {alert_s} | {coll_s} |"
        )
    return lines


EARLY = (1, 20)
"""The RL steps of the mechanism table's early window (before most collapse onsets)."""
MECHANISM = (
    ("staleness/kl_k3", "staleness KL k3"),
    ("staleness/mask_frac", "clipped (masked) token share"),
    ("mismatch/ess", "IS weights' ESS"),
    ("approx/seq_residual", "first-order residual"),
    ("approx/grad_cosine", "grad cosine token vs sequence"),
    ("optim/grad_norm", "grad norm"),
)


def mechanism_table(rows: Sequence[SettingRow]) -> list[str]:
    """Per setting, the quantities the first-order argument blames, early and overall:
    staleness (how far π_θ moved from π_old), the clip mask, the IS weights' effective
    sample size, the residual the approximation drops, and how well the token surrogate's
    gradient points along the sequence-level one (a probe every 10 steps)."""
    a, b = EARLY
    head = "| setting | " + " | ".join(label for _, label in MECHANISM) + " |"
    lines = [head, "|" + "---|" * (len(MECHANISM) + 1)]
    for row in rows:
        if not row.runs:
            continue
        cells = []
        for name, _ in MECHANISM:
            early = [window_mean(r.series, name, a, b) for r in row.runs]
            whole = [window_mean(r.series, name, 1, 10**9) for r in row.runs]
            early = [x for x in early if x is not None]
            whole = [x for x in whole if x is not None]
            e = fmt(statistics.fmean(early)) if early else "-"
            w = fmt(statistics.fmean(whole)) if whole else "-"
            cells.append(f"{e} / {w}")
        lines.append(f"| {row.label} (`{row.name}`) | " + " | ".join(cells) + " |")
    return lines


def policy_table(rows: Sequence[SettingRow], evals: dict[str, dict]) -> list[str]:
    """Per setting: μ's final held-out accuracy (eval/acc, the inference engine) beside π's
    (the fp32 training weights at the last checkpoint, same prompts and settings), π's
    mean over the kept checkpoints, and π at the cold start."""
    lines = [
        "| setting | runs | μ: eval/acc at the last step | π: fp32 weights, last checkpoint "
        "| π: mean over kept checkpoints | π at cold start |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        got = [evals[k] for k in row.keys if k in evals]
        if not got:
            continue
        lines.append(
            f"| {row.label} (`{row.name}`) | {len(got)} | {pm(row.values('final_eval'))} | "
            f"{pm([g['pi'][-1] for g in got])} | {pm(pi_late(row, evals))} | "
            f"{fmt(got[0]['pi0'])} |"
        )
    return lines


def pi_late(row: SettingRow, evals: dict[str, dict]) -> list[float]:
    """Per finished run of the row: π's held-out accuracy averaged over its kept checkpoints."""
    return [statistics.fmean(evals[k]["pi"]) for k in row.keys if k in evals]


def run_table(rows: Sequence[SettingRow]) -> list[str]:
    lines = [
        "| run | last step | stopped | peak (step) | final | onset | routing flips | "
        "seq residual | mean length |",
        "|" + "---|" * 9,
    ]
    for row in rows:
        for r in [*row.runs, *row.in_progress]:
            onset = (
                "-"
                if not r.collapsed
                else (
                    f"{r.onset.step} ({r.onset.metric}, lost {r.onset.drop:.0%})"
                    if r.onset
                    else f"{r.last_step} (non-finite)"
                )
            )
            stopped = (r.stopped or "running")[:90]
            lines.append(
                f"| {row.name}/{Path(r.run_dir).name} | {r.last_step} | {stopped} | "
                f"{fmt(r.peak_eval)} ({r.peak_step}) | {fmt(r.final_eval)} | {onset} | "
                f"{fmt(r.routing_flip)} | {fmt(r.seq_residual)} | {fmt(r.len_mean, 1)} |"
            )
    return lines
