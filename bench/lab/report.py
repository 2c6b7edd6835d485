"""The stability lab's report: a table per setting, the paper's findings checked, charts.

`write_stability_report(lab_dir, out, specs, command)` reads every run the specs name
(finished or not: each row says how many runs and seeds it has), aggregates per setting
(rows.py), checks the paper's findings (findings.py), draws overlay charts next to the
markdown file (charts.py), and writes the exact command and recipes.

What it does not do: run anything, or decide what a collapse is (summary.py, from
monitor.analysis.collapse).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from bench import REPO
from bench.lab.charts import draw_group
from bench.lab.findings import findings, policy_findings
from bench.lab.manifest import RunSpec, load_manifest
from bench.lab.policy_eval import load_policy_evals
from bench.lab.rows import SettingRow, collect, pm
from bench.lab.runner import train_command
from bench.lab.tables import EARLY, mechanism_table, policy_table, run_table, setting_table


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
    try:
        return str(path.resolve().relative_to(REPO))
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
        f"over the first 10 % of steps {pm(kl0)}; routing flips (token×layer top-k sets "
        f"differing, vLLM vs trainer) {pm(flips)}.",
        "",
        "Definitions: *peak*/*final* = highest/last held-out accuracy (`eval/acc`, sampled, "
        "200 held-out prompts × 2 samples); *late* = mean of the last 5 evaluations (the "
        "last 50 steps of a 200-step run), which the comparisons use; *collapsed* = a "
        "collapse onset on `reward/acc` or `eval/acc` by `monitor.analysis.collapse.find_onset` "
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
