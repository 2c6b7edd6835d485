"""The detection benchmark's report: both monitors scored, per configuration and per run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from bench.lab.replay import REL, RLWATCH_NAMES, SCALES, FirstAlerts, default_items
from bench.lab.report import hand_notes
from bench.lab.scoring import Labelled, score, tune
from bench.lab.summary import fmt

OUTCOME_DETECTORS = ("reward_collapse", "eval_collapse")
"""Ours that watch the outcome itself (a fall from the peak), not a precursor."""


def _cell(first: FirstAlerts, items: Iterable[str] | None) -> str:
    items = None if items is None else set(items)
    hits = [(s, k) for k, s in first.items() if items is None or k in items]
    if not hits:
        return "none"
    step, name = min(hits)
    return f"{step} ({name})"


def write_detection_report(runs: Sequence[Labelled], out: Path, command: str) -> None:
    """Write `out` (markdown): every configuration scored on the report set and on the
    tuning set, each run's first alerts, and which detectors fire how early; a hand-written
    `<stem>_notes.md` beside `out` is included verbatim."""
    tune_set = [r for r in runs if r.tuning]
    report_set = [r for r in runs if not r.tuning]
    ours_all = sorted({k for r in runs for k in default_items(r.ours)})
    precursors = [k for k in ours_all if k.rstrip("!") not in OUTCOME_DETECTORS]
    relative = sorted(
        {
            k
            for r in runs
            for k in r.ours
            if k.endswith(REL) and k[: -len(REL)].rstrip("!") not in OUTCOME_DETECTORS
        }
    )
    rl_all = sorted({k for r in runs for k in default_items(r.rlwatch)})
    ours_tuned = tune(tune_set, "ours")
    rl_tuned = tune(tune_set, "rlwatch")
    configs = [
        ("ours, every detector (defaults)", "ours", ours_all),
        ("ours, precursors only (no reward/eval drop detectors)", "ours", precursors),
        (f"ours, precursors, baseline-change rules only (`{REL}`)", "ours", relative),
        (f"ours, tuned: {', '.join(ours_tuned) or 'none'}", "ours", ours_tuned),
        ("rlwatch 0.5.1, every detector (defaults)", "rlwatch", rl_all),
        (f"rlwatch, tuned: {', '.join(rl_tuned) or 'none'}", "rlwatch", rl_tuned),
    ]
    head = [
        "| monitor | collapses alerted in time | lead, steps: median (range) | late | "
        "missed | false alarms on stable runs |",
        "|---|---|---|---|---|---|",
    ]
    n_c = sum(r.onset is not None for r in runs)
    same = sum(r.live == default_items(r.ours) for r in runs if r.live is not None)
    lines = [
        "# Detection benchmark: lead time, misses and false alarms, ours vs rlwatch",
        "",
        f"Command: `{command}`. Labelled runs: {len(runs)} ({n_c} collapsing, "
        f"{len(runs) - n_c} stable), split once by a hash of the run name into a tuning set "
        f"({len(tune_set)} runs: {sum(r.onset is not None for r in tune_set)} collapsing) and "
        f"a disjoint report set ({len(report_set)} runs: "
        f"{sum(r.onset is not None for r in report_set)} collapsing); the per-run table says "
        "which run is in which.",
        "",
        "Labels come from the runs' accuracy only (monitor.analyze's collapse onset on "
        "`reward/acc` and `eval/acc`, or non-finite divergence), never from a detector. Both "
        "monitors read the same stored streams step by step: ours through "
        "`build_detectors` (what `Monitor.log` runs live), rlwatch through "
        "`RLWatch.log_step` with "
        + ", ".join(f"`{a}`→`{b}`" for a, b in RLWATCH_NAMES.items())
        + ". Not fed to rlwatch: per-sample rewards (not stored: its dip test idles) and "
        "advantage std (not logged by our trainer). A lead ≥ 0 means the first alert came at "
        "or before the onset; an alert on a stable run is a false alarm. The replay of our "
        f"detectors gives the same first alert per detector as the live run stored on {same} "
        f"of {sum(r.live is not None for r in runs)} runs.",
        "",
        "## Report set (runs not used for tuning)",
        "",
        *head,
        *[score(report_set, which, items).line(name) for name, which, items in configs],
        "",
        "## Tuning set (where the subsets and scales were chosen, so optimistic)",
        "",
        *head,
        *[score(tune_set, which, items).line(name) for name, which, items in configs],
        "",
        "## Per run",
        "",
        "| run | set | onset | our first alert | our first precursor alert | ours, baseline-change "
        "rules | rlwatch first alert |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.key} | {'tune' if r.tuning else 'report'} | "
            f"{r.onset if r.onset is not None else 'stable'} | {_cell(r.ours, ours_all)} | "
            f"{_cell(r.ours, precursors)} | {_cell(r.ours, relative)} | "
            f"{_cell(r.rlwatch, rl_all)} |"
        )
    lines += [
        "",
        "## Which detectors fire, and how early (all runs)",
        "",
        "Items: `detector` alerts at warning or worse, `detector!` at critical; `~rel`: our "
        "rule with its absolute levels off (baseline change only); `@xS`: thresholds S times "
        f"less sensitive (scales tried: {', '.join(f'{s:g}' for s in SCALES)}; only the "
        "tuned picks are listed).",
        "",
        "| monitor | detector | runs alerted: collapsing | stable | median first step |",
        "|---|---|---|---|---|",
    ]
    chosen = {"ours": set(ours_tuned), "rlwatch": set(rl_tuned)}
    for which in ("ours", "rlwatch"):
        items = sorted(
            {k for r in runs for k in getattr(r, which) if "@x" not in k or k in chosen[which]}
        )
        for item in items:
            hit_c = [r for r in runs if item in getattr(r, which) and r.onset is not None]
            hit_s = [r for r in runs if item in getattr(r, which) and r.onset is None]
            steps = [getattr(r, which)[item] for r in runs if item in getattr(r, which)]
            lines.append(
                f"| {which} | {item} | {len(hit_c)}/{n_c} | {len(hit_s)}/"
                f"{len(runs) - n_c} | {fmt(float(np.median(steps)), 0)} |"
            )
    lines += ["", *hand_notes(out)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines).rstrip("\n") + "\n")
