"""`minirl analyze RUN [--json] [--html FILE]`: post-hoc analysis of a run directory.

Prints the collapse onset (if any), the precursors ranked by how early they moved, the
factor of the IS weight that broke first, the run's alerts and actions, and the events
that changed it (induced incidents, rollbacks, actions held back); `--json` prints the
same as JSON, `--html FILE` writes a self-contained report with charts.
Definitions: monitor/analysis/collapse.py and precursors.py. Works on imported runs
(`minirl import`) too.

Given a folder of runs instead (what `minirl import` writes for a log of several runs),
it prints one line per run: the onset, the first alert and its lead, the factor that
broke first (`--json`: every run's full analysis).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.errors import UserError
from monitor.analysis.event_text import event_text


def _text(a) -> str:  # a: Analysis
    lines = [f"run {a.run} ({a.run_id}), steps {a.first_step}..{a.last_step}"]
    if a.diverged is not None:
        lines.append(
            f"diverged: the loss or the gradient norm is non-finite from step {a.diverged} "
            "to the end"
        )
    if a.onset is not None:
        o = a.onset
        lines.append(
            f"collapse: {o.metric} fell from {o.peak:.4g} (peak at step {o.peak_step}) to "
            f"{o.final:.4g}, {o.drop:.0%} of its gain lost; onset at step {o.step}"
        )
    if a.collapse_step is not None:
        lines.append(f"factor of the IS weight that broke first: {a.first_factor or 'none found'}")
        lines.append(f"precursors ({len(a.precursors)}), earliest first:")
        for p in a.precursors:
            lines.append(
                f"  {p.lead:>6} steps before  {p.metric:<34} {p.direction:<10} moved at step "
                f"{p.moved_step} (|z| {p.z:.3g}; {p.value:.4g} vs baseline {p.baseline:.4g})"
                f"  [{p.factor or '-'}]"
            )
    if a.collapse_step is None:
        lines.append("no collapse found")
    if a.recovery is not None:
        r = a.recovery
        state = "recovered" if r["recovered"] else "NOT recovered"
        lines.append(
            f"recovery: {state} at step {r['step']} (episode from step {r['episode_start']}): "
            f"held-out accuracy {r['why']}"
        )
    lines += [f"note: {n}" for n in a.notes]
    lines.append(f"alerts ({len(a.alerts)}):")
    for al in a.alerts:
        lines.append(
            f"  step {al['step']:>6}  {al['severity']:<8} {al['detector']:<28} {al['message']}"
        )
    lines.append(f"actions ({len(a.actions)}):")
    for ac in a.actions:
        lines.append(
            f"  #{ac['id']} step {ac['step']}  {ac['kind']} {json.dumps(ac['params'])}  "
            f"[{ac['status']}] {ac['reason']}"
        )
    notable = [(e, w) for e in a.events if (w := event_text(e["kind"], e["detail"])) is not None]
    lines.append(f"events ({len(notable)}):")
    for e, what in notable:
        step = "-" if e["step"] is None else e["step"]
        lines.append(f"  after step {step:>6}  {e['kind']:<20} {what}")
    return "\n".join(lines)


def _analyze_salvaged(run: Path, metric: str | None, err):  # -> Analysis
    """The analysis of what SQLite can still read of a damaged store (a salvaged copy,
    monitor/store/salvage.py), with a first note saying what was unreadable and lost."""
    from monitor.analysis.analyze import analyze_run
    from monitor.store.salvage import salvaged

    try:
        with salvaged(err.path) as (copy, report):
            analysis = analyze_run(str(copy), outcome=metric)
    except UserError:
        raise err from None
    analysis.run = str(run)
    note = (
        f"store damaged: {err.part} unreadable ({err.why}); analysed what SQLite could "
        f"still read ({report.method}; {report.summary()}); `minirl repair {run}` keeps "
        "a repaired copy"
    )
    analysis.notes.insert(0, note)
    print(f"minirl analyze: warning: {note}", file=sys.stderr)
    return analysis


def _first_alert(a) -> dict | None:  # a: Analysis
    """The run's first warning or critical alert."""
    return next((al for al in a.alerts if al["severity"] in ("warning", "critical")), None)


def _folder_line(name: str, a) -> str:  # a: Analysis
    first = _first_alert(a)
    alert = f"{first['severity']} {first['detector']} at {first['step']}" if first else "none"
    onset = a.collapse_step
    if onset is None:
        return f"{name:<32} {'no collapse':<28} first alert: {alert}"
    lead = f", lead {onset - first['step']}" if first else ""
    what = a.onset.metric if a.onset is not None else "diverged"
    return (
        f"{name:<32} {f'collapse at {onset} ({what})':<28} first alert: "
        f"{alert}{lead}; broke first: {a.first_factor or 'none found'}"
    )


def _analyze_folder(folder: Path, runs: list[Path], metric: str | None, as_json: bool) -> int:
    """Every run of `folder`, one line each (or a JSON list of full analyses)."""
    from monitor.analysis.analyze import analyze_run

    lines, out = [], []
    for run in runs:
        try:
            a = analyze_run(str(run), outcome=metric)
        except UserError as err:  # a damaged or foreign store: said on its line
            lines.append(f"{run.name:<32} not analysed: {err}")
            out.append({"run": str(run), "error": str(err)})
            continue
        lines.append(_folder_line(run.name, a))
        out.append(a.to_dict())
    if as_json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(f"{len(runs)} runs in {folder}:")
        print("\n".join(lines))
    return 0


def main(argv: list[str]) -> int:
    what = "Collapse onset, precursors ranked by lead, alerts, actions and events of a run."
    parser = argparse.ArgumentParser(prog="minirl analyze", description=what)
    parser.add_argument("run", type=Path, help="run directory (or its store file)")
    parser.add_argument("--json", action="store_true", help="print the analysis as JSON")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write an HTML report")
    parser.add_argument(
        "--metric", help="outcome metric (default: reward/acc, reward/mean, eval/acc)"
    )
    args = parser.parse_args(argv)

    from monitor.analysis.analyze import analyze_run
    from monitor.store.damage import StoreDamaged
    from monitor.store.schema import runs_below, store_path

    if not store_path(args.run).is_file() and (runs := runs_below(args.run)):  # a folder
        if args.html:
            raise UserError(f"--html writes the report of one run; {args.run} is a folder")
        return _analyze_folder(args.run, runs, args.metric, args.json)
    try:
        analysis = analyze_run(str(args.run), outcome=args.metric)
    except StoreDamaged as err:
        analysis = _analyze_salvaged(args.run, args.metric, err)
    if args.html:
        from monitor.analysis.report import render_html

        try:
            args.html.write_text(render_html(analysis), encoding="utf-8")
        except OSError as err:
            raise UserError(f"cannot write {args.html}: {err}") from None
    if args.json:
        json.dump(analysis.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print(_text(analysis))
        if args.html:
            print(f"report: {args.html}")
    return 0
