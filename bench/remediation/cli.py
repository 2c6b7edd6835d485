"""`minirl bench remediation`: does automatic remediation rescue runs, and leave healthy ones be?

    minirl bench remediation [--seeds 1 2] [--jobs 2] [--runs runs/incidents]
    minirl bench remediation --organic [--seeds ...]   (bench/remediation/organic.py)

Closed loop, in pairs: every config of `configs/lab/incidents/` (a scripted incident with
a known cause, or a stable twin), each seed once with `train.remediation=false` (the
detection benchmark's runs) and once with `true` and the default `train.rollback_redo`
(`--budget`: a fixed number of steps taken instead). Existing runs are reused; missing
ones are trained. Outcomes by the detection benchmark's one rule (`label_run`).
Per pair: collapsed without and with remediation, μ's final held-out accuracy re-measured
precisely (`bench.lab.final_eval`), the first precursor, action and recovery, and every
action with its outcome; verdicts (*rescued*, *worse*) in remediation_verdicts.py. Per
stable run: its automatic actions and what they cost. Beside the verdicts, the pairs on
which undoing the incident entirely would itself be judged worse, and π's accuracy (the
trained fp32 weights). Writes bench/results/remediation.md and remediation.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
from dataclasses import asdict
from pathlib import Path

from bench import RESULTS
from bench.detection import corpus, lab
from bench.lab import final_eval, policy_eval
from bench.remediation.results import read_logged, report_pairs
from bench.remediation.verdicts import TOLERANCE, Arm, Pair, judge, undone_is_worse
from monitor.config import MonitorConfig
from monitor.store.reader import RunReader

TWINS = {"is_off": "stable_fp4", "r3_off": "stable_4x_r3"}
"""Each incident config's stable twin (the others': stable_base)."""


def read_arm(run_dir: Path, name: str, with_pi: bool = False) -> Arm:
    """One run's outcome and its remediation history, and π's accuracy where measured
    (`with_pi`: measure it where it is not)."""
    logged = read_logged(run_dir)
    series, alerts, actions = logged.series, logged.alerts, logged.actions
    run = corpus.label_run(
        corpus.Run(name, "lab", "report", sorted(logged.rows.items()), incident_step=None)
    )
    evals = []
    if "eval/acc" in series:
        steps, values = series["eval/acc"]
        evals = list(zip(steps.tolist(), values.tolist(), strict=True))
    arm = Arm(
        run=name,
        collapsed=run.label == "collapse",
        onset=run.onset,
        final_acc=evals[-1][1] if evals else None,
        best_acc=max(v for _, v in evals) if evals else None,
        last_eval=evals[-1][1] if evals else None,
        evals=[v for _, v in evals],
        first_precursor=min((a.step for a in alerts), default=None),
        actions=[
            {
                "step": a.resolved_step,
                "proposed": a.step,
                "kind": a.kind,
                "params": a.params,
                "status": a.status,
                "reason": a.reason[:160],
                "detail": a.detail,
            }
            for a in actions
        ],
    )
    _read_final(arm, run_dir)
    if pis := policy_eval.pi_at_checkpoints(run_dir, measure=with_pi):
        arm.final_pi, arm.best_pi = pis[-1][1], max(v for _, v in pis)
    applied = [a for a in actions if a.status == "applied" and a.resolved_step is not None]
    if applied:
        arm.first_action = applied[0].resolved_step
        start = arm.first_precursor if arm.first_precursor is not None else arm.first_action
        start -= MonitorConfig().remediation.onset_margin  # where the episode began
        before = [v for s, v in evals if s < start]
        if before:
            arm.recovered = next(
                (s for s, v in evals if s > arm.first_action and v >= before[-1] - TOLERANCE),
                None,
            )
    return arm


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl bench remediation", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--configs", nargs="+", help="incident configs (default all)")
    p.add_argument("--runs", default="runs/incidents", help="runs without remediation")
    p.add_argument("--jobs", type=int, default=2)
    for flag, text in (
        ("--no-train", "only report the runs that exist"),
        ("--no-pi", "measure no π (read the cached measurements)"),
        ("--no-final", "measure no final accuracy (read the cached ones)"),
        ("--budget", "remediation with train.rollback_redo=false (<runs>-remediation)"),
    ):
        p.add_argument(flag, action="store_true", help=text)
    p.add_argument("--out", default=str(RESULTS / "remediation.md"))
    return p


def main(argv: list[str]) -> int:
    if "--organic" in argv:  # collapses nobody scripted: bench/remediation/organic.py
        from bench.remediation import organic as remediation_organic

        return remediation_organic.main([a for a in argv if a != "--organic"])
    args = _parser().parse_args(argv)
    names = args.configs or lab.configs()
    off_dir = Path(args.runs)
    budget_dir = off_dir.with_name(off_dir.name + "-remediation")
    on_dir = budget_dir if args.budget else off_dir.with_name(off_dir.name + "-remediation-redo")
    redo = f"train.rollback_redo={'false' if args.budget else 'true'}"
    if not args.no_train:
        lab.run_lab(names, args.seeds, off_dir, args.jobs)
        lab.run_lab(names, args.seeds, on_dir, args.jobs, ["train.remediation=true", redo])
    found = []  # (config, seed, run without remediation, run with it)
    for name, seed in itertools.product(names, args.seeds):
        rel = Path(name) / f"seed{seed}"
        with_remediation = _on_run(rel, on_dir, budget_dir)
        if lab.finished(off_dir / rel) and with_remediation:
            found.append((name, seed, off_dir / rel, with_remediation))
    arms = {d: read_arm(d, f"{n}/seed{s}", not args.no_pi) for n, s, *both in found for d in both}
    if not args.no_final:  # every off arm; an on arm only where remediation changed it
        todo = [d for _, _, off, on in found for d in (off, on) if d == off or arms[d].actions]
        final_eval.measure(todo)
        for d in todo:
            _read_final(arms[d], d)
    for _, _, off, on in found:  # before any pair reads an on arm as a twin
        _final_from_off(arms[on], arms[off])
    pairs = []
    for name, seed, off, on in found:
        rel = Path(TWINS.get(name, "stable_base")) / f"seed{seed}"
        twin = _twin(arms, rel, [_on_run(rel, on_dir, budget_dir), off_dir / rel])
        pair = Pair(
            name,
            seed,
            name.startswith("stable"),
            arms[off],
            arms[on],
            twin.final_acc if twin else None,
            twin.last_eval if twin else None,
        )
        pairs.append(judge(pair))
    command = "minirl bench remediation " + shlex.join(argv)
    return report_pairs(pairs, write, command, args.out, f"{off_dir} and {on_dir}")


def _on_run(rel: Path, on_dir: Path, budget_dir: Path) -> Path | None:
    """The run with remediation. A run that took no rollback is the same run with
    `train.rollback_redo` on or off (tests/test_trainer_loop.py): where `on_dir` lacks a
    finished run, the one made with `--budget` stands in for it if it took none, so the
    default can be reported over runs made with `--budget`."""
    if lab.finished(on_dir / rel):
        return on_dir / rel
    if on_dir != budget_dir and lab.finished(budget_dir / rel):
        with RunReader(budget_dir / rel) as reader:
            return None if reader.events(kind="rollback") else budget_dir / rel
    return None


def _twin(arms: dict[Path, Arm], rel: Path, candidates: list[Path | None]) -> Arm | None:
    """The stable twin: the first finished candidate (the run with remediation, else the
    one without), each run read once; one with remediation that took no action takes the
    measured final accuracy of the one without (`_final_from_off`: they are one run)."""
    found = []
    for run_dir in filter(None, candidates):
        if run_dir not in arms and lab.finished(run_dir):
            arms[run_dir] = read_arm(run_dir, str(rel))
        if run_dir in arms:
            found.append(arms[run_dir])
    return _final_from_off(*found) if len(found) == 2 else next(iter(found), None)


def _read_final(arm: Arm, run_dir: Path) -> None:
    """The arm's final accuracy is `final_eval`'s measurement where there is one."""
    if (measured := final_eval.final_accuracy(run_dir)) is not None:
        arm.final_acc, arm.final_measured = measured[1], True


def _final_from_off(on: Arm, off: Arm) -> Arm:
    """An on arm without an action and the same evaluations as its off arm takes the off
    arm's final measurement (the two are one run); any other keeps its own."""
    if not on.actions and on.evals == off.evals and not on.final_measured:
        on.final_acc, on.final_measured = off.final_acc, off.final_measured
    return on


def _acc(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _worse_pi(pairs: list[Pair]) -> str:
    known = [p for p in pairs if p.off.final_pi is not None and p.on.final_pi is not None]
    worse = sum(p.on.final_pi < p.off.final_pi - TOLERANCE for p in known)  # type: ignore[operator]
    return f"{worse}/{len(known)}" if known else "not measured"


def write(pairs: list[Pair], command: str, out: Path) -> None:
    incident = [p for p in pairs if not p.stable]
    collapsing = [p for p in incident if p.collapses_without]
    stable = [p for p in pairs if p.stable]
    quiet = [p for p in stable if not p.on.actions]
    undone_worse = [undone_is_worse(p.off.final_acc, p.twin_final) for p in incident]
    lines = [
        "# Remediation benchmark: runs with automatic remediation off and on, in pairs",
        "",
        f"Command: `{command}`. Same config and seed in both arms; the arm without "
        "remediation is the detection benchmark's run. Accuracies are held-out accuracy of "
        "the inference engine (μ: what the run serves) and of π (the trained weights in "
        "fp32, sampled on the same held-out prompts at each kept checkpoint). *Final* is μ "
        f"at the last checkpoint measured with {final_eval.FINAL_SAMPLES} responses per "
        "held-out prompt (`bench.lab.final_eval`); *last eval* is the run's own last "
        "`eval/acc` (2 per prompt: a standard error of ≈ 2.5 points); *best* is the best "
        "`eval/acc`. The verdicts read *final*; the ones the last evaluations give are "
        "beside them.",
        "",
        "| | result | goal |",
        "|---|---|---|",
        f"| collapsing pairs rescued | {sum(p.rescued for p in collapsing)}/{len(collapsing)} "
        "| ≥ 2/3 |",
        f"| pairs where remediation did worse | "
        f"{sum(p.worse_with_remediation for p in pairs)}/{len(pairs)} | 0 |",
        f"| incident pairs on which undoing the incident (its stable twin) would be worse "
        f"| {sum(undone is True for undone in undone_worse)}/"
        f"{sum(undone is not None for undone in undone_worse)} "
        "| (not a goal: pairs no policy can be sure not to lose) |",
        f"| stable runs without any automatic action | {len(quiet)}/{len(stable)} | ≥ 90 % |",
        f"| the same two verdicts by the runs' last evaluations | rescued "
        f"{sum(p.rescued_by_last_eval for p in collapsing)}/{len(collapsing)}, worse "
        f"{sum(p.worse_by_last_eval for p in pairs)}/{len(pairs)} | |",
        f"| pairs where π (the trained weights) ended more than 5 points lower with "
        f"remediation | {_worse_pi(pairs)} | (not a goal: the verdicts above read μ) |",
        "",
        "## Pairs",
        "",
        "| config | seed | collapses without | with: collapses | final acc off / on (twin) "
        "| last eval off / on (twin) | best off / on | π final off / on | π best off / on "
        "| first precursor → first action → recovered | rescued | worse |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        lines.append(
            f"| {p.config} | {p.seed} | {p.off.onset if p.off.collapsed else 'no'} | "
            f"{p.on.onset if p.on.collapsed else 'no'} | {_acc(p.off.final_acc)} / "
            f"{_acc(p.on.final_acc)} ({_acc(p.twin_final)}) | {_acc(p.off.last_eval)} / "
            f"{_acc(p.on.last_eval)} ({_acc(p.twin_last_eval)}) | {_acc(p.off.best_acc)} / "
            f"{_acc(p.on.best_acc)} | {_acc(p.off.final_pi)} / {_acc(p.on.final_pi)} | "
            f"{_acc(p.off.best_pi)} / {_acc(p.on.best_pi)} | "
            f"{p.on.first_precursor} → {p.on.first_action} → "
            f"{p.on.recovered} | {'yes' if p.rescued else 'no'} | "
            f"{'yes' if p.worse_with_remediation else 'no'} |"
        )
    lines += ["", "## Every automatic action (remediation on)", ""]
    for p in pairs:
        for a in p.on.actions:
            when = (
                f"step {a['step']}"
                if a["step"] is not None
                else f"proposed after step {a['proposed']}, never applied (the run ended)"
            )
            lines.append(
                f"- {p.config}/seed{p.seed}, {when}: `{a['kind']} {a['params']}` "
                f"{a['status']} ({a['detail']}) — {a['reason']}"
            )
    notes = out.with_name(f"{out.stem}_notes.md")  # what the numbers mean, written by hand
    if notes.is_file():
        lines += ["", notes.read_text()]
    out.write_text("\n".join(lines) + "\n")
    obj = {
        "command": command,
        "pairs": [_pair_json(p) for p in pairs],
        "stable": [
            {
                "config": p.config,
                "seed": p.seed,
                "actions": len(p.on.actions),
                "final_acc_off": p.off.final_acc,
                "final_acc_on": p.on.final_acc,
            }
            for p in stable
        ],
    }
    out.with_suffix(".json").write_text(json.dumps(obj, indent=1) + "\n")


def _pair_json(p: Pair) -> dict:
    return {
        "config": p.config,
        "seed": p.seed,
        "collapses_without": p.collapses_without,
        "rescued": p.rescued,
        "worse_with_remediation": p.worse_with_remediation,
        "final_acc_off": p.off.final_acc,
        "final_acc_on": p.on.final_acc,
        "final_acc_measured": p.off.final_measured and p.on.final_measured,
        "final_samples_per_prompt": final_eval.FINAL_SAMPLES,
        "last_eval_off": p.off.last_eval,
        "last_eval_on": p.on.last_eval,
        "twin_last_eval": p.twin_last_eval,
        "rescued_by_last_eval": p.rescued_by_last_eval,
        "worse_by_last_eval": p.worse_by_last_eval,
        "best_acc_off": p.off.best_acc,
        "best_acc_on": p.on.best_acc,
        "final_pi_off": p.off.final_pi,
        "final_pi_on": p.on.final_pi,
        "best_pi_off": p.off.best_pi,
        "best_pi_on": p.on.best_pi,
        "twin_final_acc": p.twin_final,
        "off": _arm_json(p.off),
        "on": _arm_json(p.on),
    }


def _arm_json(arm: Arm) -> dict:
    """An arm's fields but its evaluation series (the table has what matters of it)."""
    return {k: v for k, v in asdict(arm).items() if k != "evals"}
