"""The stability lab's report: a table per setting, the paper's findings checked, charts.

`write_stability_report(lab_dir, out, specs, command)` reads every run the specs name
(finished or not: each row says how many runs and seeds it has), aggregates per setting,
compares the settings the way the paper does, draws overlay charts (PNG, matplotlib)
next to the markdown file, and writes the exact command and recipes.

A comparison between two settings is called a difference only when the means differ by
more than twice the standard error of the difference (seed spread); with one seed per
setting there is no spread to judge by, and the report says so rather than guessing.

What it does not do: run anything, or decide what a collapse is (summary.py, from
monitor.analyze).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.lab.policy_eval import load_policy_evals
from bench.lab.runner import RunSpec, load_manifest, train_command
from bench.lab.summary import RunSummary, fmt, summarize_run, window_mean


@dataclass
class SettingRow:
    name: str
    group: str
    label: str
    planned: int
    runs: list[RunSummary]
    """Finished runs only (completed or diverged): what the tables aggregate."""
    keys: list[str]
    """The lab keys (`setting/seedK`) of `runs`, in the same order."""
    in_progress: list[RunSummary]
    """Runs with data that have not finished (still running, or interrupted)."""

    def values(self, attr: str) -> list[float]:
        return [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]


def mean_sd(xs: Sequence[float]) -> tuple[float | None, float | None]:
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def compare(a: Sequence[float], b: Sequence[float]) -> tuple[str, float | None]:
    """('higher' | 'lower' | 'same' | 'unknown', Δ) of a versus b (module docstring)."""
    if not a or not b:
        return "unknown", None
    delta = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return "unknown", delta
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    if abs(delta) > 2 * se and abs(delta) > 1e-9:
        return ("higher" if delta > 0 else "lower"), delta
    return "same", delta


# ---------------------------------------------------------------------------- rows


def collect(lab_dir: Path, specs: Sequence[RunSpec]) -> list[SettingRow]:
    """One row per setting, in the order of the specs, with the summaries that exist."""
    from bench.lab.stability import BY_NAME

    rows: dict[str, SettingRow] = {}
    for spec in specs:
        name = spec.key.split("/")[0]
        setting = BY_NAME.get(name)
        group, label = (setting.group, setting.label) if setting else ("other", name)
        row = rows.setdefault(name, SettingRow(name, group, label, 0, [], [], []))
        row.planned += 1
        summary = summarize_run(spec.run_dir)
        if summary is not None and summary.finished:
            row.runs.append(summary)
            row.keys.append(spec.key)
        elif summary is not None:
            row.in_progress.append(summary)
    return list(rows.values())


def _pm(xs: Sequence[float]) -> str:
    m, sd = mean_sd(xs)
    if m is None:
        return "-"
    return fmt(m) if sd is None else f"{fmt(m)} ± {fmt(sd)}"


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
            f"{steps_s} | {_pm(row.values('eval0'))} | {_pm(row.values('peak_eval'))} | "
            f"{_pm(row.values('final_eval'))} | {_pm(row.values('late_eval'))} | {coll} | "
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
            f"| {row.label} (`{row.name}`) | {len(got)} | {_pm(row.values('final_eval'))} | "
            f"{_pm([g['pi'][-1] for g in got])} | {_pm(pi_late(row, evals))} | "
            f"{fmt(got[0]['pi0'])} |"
        )
    return lines


def pi_late(row: SettingRow, evals: dict[str, dict]) -> list[float]:
    """Per finished run of the row: π's held-out accuracy averaged over its kept checkpoints."""
    return [statistics.fmean(evals[k]["pi"]) for k in row.keys if k in evals]


def policy_findings(rows: Sequence[SettingRow], evals: dict[str, dict]) -> list[str]:
    """The comparisons of the findings above, made on π instead of μ."""
    by = {r.name: r for r in rows if any(k in evals for k in r.keys)}
    pairs = [
        ("onpolicy_minirl", "onpolicy_no_is", "(1, 2) MiniRL vs without IS correction"),
        ("onpolicy_minirl", "onpolicy_length_norm", "(1, 3) MiniRL vs length normalisation"),
        ("onpolicy_minirl", "onpolicy_r3", "(1, 4) MiniRL vs + R3"),
        *[(f"offpolicy{n}x_r2", f"offpolicy{n}x_r3", f"(6, {n}×) R2 vs R3") for n in (2, 4, 8)],
    ]
    out = []
    for a, b, title in pairs:
        if a in by and b in by:
            xa, xb = pi_late(by[a], evals), pi_late(by[b], evals)
            verdict, delta = compare(xa, xb)
            d = "-" if delta is None else f"{delta:+.3f}"
            dead = all(r.collapsed for r in [*by[a].runs, *by[b].runs])
            out.append(
                f"- **{title}**, π: {_pm(xa)} vs {_pm(xb)} (Δ {d}: {verdict}); μ (late): "
                f"{_pm(by[a].values('late_eval'))} vs {_pm(by[b].values('late_eval'))}"
                + (" — both collapse in every run: not a test." if dead else ".")
            )
    return out


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


# ---------------------------------------------------------------------------- the paper's findings


def findings(rows: Sequence[SettingRow]) -> list[str]:
    """The paper's claims, one line each, with the numbers and a verdict."""
    by = {r.name: r for r in rows if r.runs}

    def final(name: str) -> list[float]:
        return by[name].values("late_eval") if name in by else []

    def coll(name: str) -> str:
        row = by.get(name)
        return "-" if row is None else f"{sum(r.collapsed for r in row.runs)}/{len(row.runs)}"

    def vs(a: str, b: str) -> str:
        verdict, delta = compare(final(a), final(b))
        d = "-" if delta is None else f"{delta:+.3f}"
        return f"late {_pm(final(a))} vs {_pm(final(b))} (Δ {d}: {verdict})"

    out = []
    base = "onpolicy_minirl"
    if base in by:
        others = [n for n in ("onpolicy_no_is", "onpolicy_length_norm", "onpolicy_r3") if n in by]
        verdicts = [compare(final(base), final(n))[0] for n in others]
        ok = all(v in ("higher", "same") for v in verdicts) and coll(base).startswith("0/")
        tell = (
            "cannot tell (too few seeds)"
            if "unknown" in verdicts or not others
            else (
                "reproduced"
                if ok and "higher" in verdicts
                else "partly: stable, but not ahead of every variant beyond seed noise"
                if ok
                else "not reproduced"
            )
        )
        out.append(
            f"- **(1) On-policy MiniRL best and stable** — collapses {coll(base)}; "
            + "; ".join(f"vs {n}: {vs(base, n)}" for n in others)
            + f". → {tell}."
        )
    if base in by and "onpolicy_no_is" in by:
        e = lambda n: [r.entropy[1] / r.entropy[0] for r in by[n].runs if r.entropy]  # noqa: E731
        k = lambda n: [r.kl[1] for r in by[n].runs if r.kl]  # noqa: E731
        collapsed = not coll("onpolicy_no_is").startswith("0/")
        out.append(
            f"- **(2) Without IS correction: collapse with an entropy drop** — collapses "
            f"{coll('onpolicy_no_is')} (MiniRL {coll(base)}); entropy last/first ×"
            f"{_pm(e('onpolicy_no_is'))} vs ×{_pm(e(base))}; final mismatch KL "
            f"{_pm(k('onpolicy_no_is'))} vs {_pm(k(base))}; {vs('onpolicy_no_is', base)}. → "
            + ("reproduced." if collapsed else "not reproduced at this scale (no collapse).")
        )
    if base in by and "onpolicy_length_norm" in by:
        v, _ = compare(final("onpolicy_length_norm"), final(base))
        out.append(
            f"- **(3) Length normalisation lower** — {vs('onpolicy_length_norm', base)}. → "
            + {"lower": "reproduced.", "unknown": "cannot tell (too few seeds)."}.get(
                v, "not reproduced (no lower final accuracy beyond seed noise)."
            )
        )
    if base in by and "onpolicy_r3" in by:
        v, _ = compare(final("onpolicy_r3"), final(base))
        out.append(
            f"- **(4) R3 brings no gain on-policy** — {vs('onpolicy_r3', base)}. → "
            + {
                "higher": "not reproduced (R3 ahead).",
                "unknown": "cannot tell (too few seeds).",
            }.get(v, "reproduced.")
        )
    for n in (2, 4, 8):
        names = [f"offpolicy{n}x_{v}" for v in ("noclip", "r2_noclip", "r2", "r3")]
        if not any(x in by for x in names):
            continue
        parts = [
            f"{x.split('_', 1)[1]}: late {_pm(final(x))}, collapses {coll(x)}"
            for x in names
            if x in by
        ]
        noclip = [x for x in names[:2] if x in by]
        safe = [x for x in names[2:] if x in by]
        unstable = sum(r.collapsed for x in noclip for r in by[x].runs)
        stable = sum(r.collapsed for x in safe for r in by[x].runs)
        worse = [compare(final(a), final(b))[0] for a in noclip for b in safe]
        few = min((len(by[x].runs) for x in noclip + safe), default=0) < 2
        if not noclip or not safe:
            tell = "cannot tell (settings missing)"
        elif few:
            tell = (
                "the paper's direction on fewer than 2 seeds per setting (not yet a test)"
                if unstable > stable
                else "cannot tell (fewer than 2 seeds per setting)"
            )
        elif stable == sum(len(by[x].runs) for x in safe) and unstable == sum(
            len(by[x].runs) for x in noclip
        ):
            tell = "not testable here: every run collapses, with clipping and replay too"
        elif unstable > stable or all(w == "lower" for w in worse):
            tell = "reproduced (the settings without clipping collapse more or end lower)"
        else:
            tell = "not reproduced (no more collapses, no lower accuracy beyond seed noise)"
        out.append(
            f"- **(5, {n}×) Off-policy {n}×: clipping and routing replay needed** — "
            + "; ".join(parts)
            + f". → {tell}."
        )
        if f"offpolicy{n}x_r2" in by and f"offpolicy{n}x_r3" in by:
            want = "higher" if n == 2 else "lower"
            v, delta = compare(final(f"offpolicy{n}x_r2"), final(f"offpolicy{n}x_r3"))
            claim = "R2 better than R3" if n == 2 else "R3 better than R2"
            along = delta is not None and (delta > 0) == (want == "higher")
            tell = {
                "unknown": "cannot tell (too few seeds)",
                "same": "not beyond seed noise (Δ in the paper's direction)"
                if along
                else "not reproduced (Δ against the paper's direction, within seed noise)",
            }.get(v, "reproduced" if v == want else "not reproduced (the other way round)")
            pair = [r for x in ("r2", "r3") for r in by[f"offpolicy{n}x_{x}"].runs]
            if all(r.collapsed for r in pair):
                tell = "not testable here: both collapse in every run"
            out.append(
                f"- **(6, {n}×) {claim} at {n}×** — R2 "
                f"{vs(f'offpolicy{n}x_r2', f'offpolicy{n}x_r3')} (R3). → {tell}."
            )
    return out


# ---------------------------------------------------------------------------- charts


def _smooth(v: np.ndarray, k: int = 9) -> np.ndarray:
    if len(v) < k:
        return v
    pad = np.pad(v, (k // 2, k // 2), mode="edge")
    return np.convolve(pad, np.ones(k) / k, mode="valid")


def draw_group(rows: Sequence[SettingRow], title: str, path: Path) -> None:
    """A 2x2 overlay chart: held-out acc, train acc (smoothed), entropy, mismatch KL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("eval/acc", "held-out accuracy", False, 1),
        ("reward/acc", "train accuracy (running mean of 9)", False, 9),
        ("policy/entropy", "entropy, nats/token (running mean of 9)", False, 9),
        ("mismatch/kl_k1", "mismatch KL(μ‖π_old), k1 (running mean of 9)", True, 9),
    )
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), dpi=90)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (metric, label, log, k) in zip(axes.flat, panels, strict=True):
        for i, row in enumerate(rows):
            c = colors[i % len(colors)]
            for j, run in enumerate(row.runs):
                s, v = run.series.get(metric, (np.empty(0), np.empty(0)))
                ok = np.isfinite(v) & ((s > 0) | (metric == "eval/acc"))
                if ok.sum() == 0:
                    continue
                ax.plot(
                    s[ok],
                    _smooth(v[ok], k),
                    color=c,
                    lw=1.2,
                    alpha=0.75,
                    label=f"{row.label} (n={len(row.runs)})" if j == 0 else None,
                )
            for run in row.runs:
                if run.collapse_step is not None:
                    ax.axvline(run.collapse_step, color=c, ls=":", lw=1)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("RL step", fontsize=9)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"{title}: one line per seed, dotted = collapse onset", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------- the file


def _recipes(specs: Sequence[RunSpec]) -> list[str]:
    seen, lines = set(), []
    configs = [Path(s.config) for s in specs]
    if configs:
        base = configs[0].parent / "base.yaml"
        if base.is_file():
            lines += [f"`{_rel(base)}`:", "```yaml", base.read_text().strip(), "```", ""]
    lines.append("| setting | recipe file | keys it changes |")
    lines.append("|---|---|---|")
    for path in configs:
        if path in seen:
            continue
        seen.add(path)
        keys = [
            ln
            for ln in path.read_text().splitlines()
            if ln.strip() and not ln.startswith("#") and not ln.startswith("base:")
        ]
        lines.append(f"| {path.stem} | `{_rel(path)}` | `{'; '.join(keys)}` |")
    return lines


def hand_notes(out: Path) -> list[str]:
    """The section of `<stem>_notes.md` beside a generated report `out`, if there is one:
    hand-written context that survives regenerating the report."""
    notes = out.with_name(f"{out.stem}_notes.md")
    if not notes.is_file():
        return []
    return [f"## Notes (from `{notes.name}`, written by hand)", "", notes.read_text(), ""]


def _example(spec: RunSpec) -> str:
    """The `minirl train` line of a run, paths relative to the repository."""
    cmd = train_command(spec, False)[3:]
    return " ".join(["minirl", *(_rel(Path(a)) if a.startswith("/") else a for a in cmd)])


def _rel(path: Path) -> str:
    repo = Path(__file__).resolve().parents[2]
    try:
        return str(path.resolve().relative_to(repo))
    except ValueError:
        return str(path)


def _policy_section(rows: Sequence[SettingRow], evals: dict[str, dict]) -> list[str]:
    if not evals:
        return []
    return [
        "## The trained policy π against the inference engine μ",
        "",
        "`eval/acc` above samples from μ, the inference engine (vLLM, MXFP4-rounded "
        "weights): what a deployment of the weights would serve. π, the fp32 training "
        "weights the loss optimises, is sampled here on the same held-out prompts with the "
        "same settings, at each kept checkpoint (the last three; `minirl bench stability "
        "--report-only --policy-eval`, cached in `<lab-dir>/policy_eval.json`).",
        "",
        *policy_table(rows, evals),
        "",
        "The comparisons above, made on π (mean over the kept checkpoints; same 2-standard-"
        "error rule):",
        "",
        *policy_findings(rows, evals),
        "",
    ]


def write_stability_report(
    lab_dir: Path, out: Path, specs: Sequence[RunSpec], command: str
) -> list[SettingRow]:
    """Write `out` (markdown) and its charts `<stem>_<group>.png`; returns the rows.
    A hand-written `<stem>_notes.md` beside `out` is included verbatim."""
    lab_dir, out = Path(lab_dir), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = collect(lab_dir, specs)
    manifest = load_manifest(lab_dir)
    all_runs = [r for row in rows for r in [*row.runs, *row.in_progress]]
    total = sum(row.planned for row in rows)
    done = sum(len(row.runs) for row in rows)
    seeds = sorted({s.key.split("/")[1] for s in specs})
    kl0 = [r.kl[0] for r in all_runs if r.kl]
    flips = [r.routing_flip for r in all_runs if r.routing_flip is not None]
    ran = manifest.meta.get("command", command)
    also = "" if ran == command else f" (this report: `{command}`)"
    lines = [
        "# Stability lab: the paper's matrix at small scale",
        "",
        f"Command: `{ran}`{also}, lab directory `{lab_dir}`. Runs: {done} of {total} finished, "
        f"{len(all_runs)} with data; seeds planned per setting: {len(seeds)}. Rows with fewer "
        "finished runs than planned come from a lab still running (or interrupted): the "
        "tables aggregate finished runs only, and say how many each row has.",
        "",
        "Every run is `minirl train <recipe> --set seed=K --set name=... --run-dir ...`, e.g.:",
        "",
        "```",
        _example(specs[0]) if specs else "",
        "```",
        "",
        "Induced training-inference mismatch (the same for every setting): mismatch/kl_k1 "
        f"over the first 10 % of steps {_pm(kl0)}; routing flips (token×layer top-k sets "
        f"differing, vLLM vs trainer) {_pm(flips)}.",
        "",
        "Definitions: *peak*/*final* = highest/last held-out accuracy (`eval/acc`, sampled, "
        "200 held-out prompts × 2 samples); *late* = mean of the last 5 evaluations (the "
        "last 50 steps of a 200-step run), which the comparisons use; *collapsed* = a "
        "collapse onset on `reward/acc` or `eval/acc` by `monitor.analyze.find_onset` "
        "(running median lost ≥ 50 % of its gain; onset where a fifth of the fall is done), "
        "or a run stopped by non-finite values; never from the detectors. *first alert* = "
        "the first warning/critical alert the live monitor stored (remediation off). Values "
        "are mean ± sd over seeds.",
        "",
        "## Per setting",
        "",
        *setting_table(rows),
        "",
        "## The paper's findings, checked",
        "",
        "A difference counts only when |Δ mean| > 2 standard errors (seed spread).",
        "",
        *findings(rows),
        "",
        *_policy_section(rows, load_policy_evals(lab_dir)),
        "## Mechanism: staleness, clipping, IS weights, first-order residual",
        "",
        f"Means over seeds of each run's mean over RL steps {EARLY[0]}-{EARLY[1]} / over the "
        "whole run (a collapsed run's whole-run mean includes its collapse).",
        "",
        *mechanism_table(rows),
        "",
        "## Charts",
        "",
    ]
    groups: dict[str, list[SettingRow]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    for group, members in groups.items():
        if not any(r.runs for r in members):
            continue
        png = out.with_name(f"{out.stem}_{re.sub(r'[^a-z0-9]+', '_', group.lower())}.png")
        draw_group(members, group, png)
        lines += [f"![{group}]({png.name})", ""]
    lines += [*hand_notes(out), "## Per run", "", *run_table(rows), ""]
    lines += ["## Recipes", "", *_recipes(specs), ""]
    failed = [k for k, s in manifest.states.items() if s.status == "failed"]
    if failed:
        lines += (
            ["## Failed runs", ""] + [f"- {k}: {manifest.states[k].error}" for k in failed] + [""]
        )
    out.write_text("\n".join(lines))
    return rows
