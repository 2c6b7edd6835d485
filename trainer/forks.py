"""Remedies tried on forks: at a breakdown, an experiment instead of a guess.

An automatic rollback (remediation on, `train.fork_steps` > 0) goes to the latest healthy
checkpoint and, from there, runs 2-4 candidate remedies as short forks of the same data
(the same prompts and sampling seeds: each fork restores the checkpoint exactly, weights,
optimiser, RNG and data position), k steps each. Each fork is scored on the held-out
accuracy it ends with, less a penalty per warning or critical alert its steps raise in a
copy of the run's detectors (its precursor signals); the run continues from the healthy
checkpoint with the best candidate's controls, which retrains the chosen fork's steps
bit for bit. The candidates: the policy's fix as it was applied at this boundary, the
same fix plus one step more of the recipe the run's configuration calls for (a lower lr,
fewer mini-batches, clipping, IS correction), and the rollback alone. The forks cost at
most `train.fork_budget` × `train.steps` steps over the run (counted from the store's
`fork_experiment` events, so a resumed run keeps its budget); an experiment that does
not fit shortens its forks, and below 2 steps each is not run (the plain rollback is).
The experiment is one `fork_experiment` event (candidates, scores, choice, cost).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.vocabulary import TIS_CAP
from monitor import RunReader
from trainer.boundary import controls_diff, held_out, record_rollback, restore, set_controls
from trainer.checkpoints import list_checkpoints
from trainer.controls import Controls, Rejected, apply_action
from trainer.progress import NoProgress
from trainer.run_state import RunState
from trainer.step import NonFiniteBatch, StepResult

ALERT_PENALTY = 0.02
"""Held-out accuracy a fork loses in its score per warning or critical alert it raised."""
MAX_CANDIDATES = 4
RECORDED = ("reward/mean", "optim/loss", "optim/grad_norm")
"""Per-step values of each fork kept in the event (the audit, and exactness checks)."""


@dataclass
class Candidate:
    name: str
    controls: Controls
    actions: list[tuple[str, dict[str, Any]]]
    """What it changes over the controls the boundary left (the policy's fix)."""


def candidates(run: RunState, before: Controls) -> list[Candidate]:
    """2-4 remedies for the run as configured and as the policy just fixed it."""
    fixed = run.controls
    out = [Candidate("policy fix", fixed, [])]
    options: list[tuple[str, str, dict[str, Any]]] = []
    if fixed.mini_batches > 1:
        options.append(
            ("fewer mini-batches", "set_mini_batches_cap", {"n": fixed.mini_batches // 2})
        )
    if not fixed.loss.clip and fixed.mini_batches > 1:
        options.append(("clipping on", "set_clip", {"enabled": True}))
    if fixed.loss.is_policy == "none" and fixed.loss.variant != "reinforce":
        options.append(("IS correction on", "set_is_correction", {"enabled": True, "cap": TIS_CAP}))
    options.append(("lr halved", "scale_lr", {"factor": 0.5}))
    for name, kind, params in options:
        try:
            new = apply_action(
                fixed,
                kind,
                params,
                prompts_per_step=run.cfg.train.prompts_per_step,
                moe=run.policy.is_moe,
            )
        except Rejected:
            continue
        if isinstance(new, Controls) and new != fixed:
            out.append(Candidate(f"policy fix + {name}", new, [(kind, params)]))
    if before != fixed:  # does the policy's fix matter at all? the rollback alone
        out.insert(1, Candidate("rollback only", before, []))
    return out[:MAX_CANDIDATES]


def fork_budget(run: RunState) -> int:
    """Fork steps left to spend in this run."""
    with RunReader(run.run_dir) as reader:
        spent = sum(int(e.detail.get("cost_steps", 0)) for e in reader.events("fork_experiment"))
    return int(run.cfg.train.fork_budget * run.cfg.train.steps) - spent


def experiment(run: RunState, before: Controls, take: Callable[[RunState], StepResult]) -> bool:
    """Run the fork experiment of an automatic rollback and continue from the best fork's
    start; False (nothing done) when there is no healthy checkpoint, no choice to make, or
    no budget: the caller then rolls back plainly."""
    k = run.cfg.train.fork_steps
    ckpts = list_checkpoints(run.run_dir)
    verdict = run.mon.healthy_checkpoint(list(ckpts))
    if k <= 0 or verdict is None:
        return False
    tried, budget = candidates(run, before), fork_budget(run)
    k = min(k, budget // len(tried))
    if len(tried) < 2 or k < 2:
        return False
    path, at, pos, bar = ckpts[verdict.step], run.step, run.pos, run.bar
    scores = []
    run.bar = NoProgress()  # a fork neither moves the run's end nor its progress
    try:
        for c in tried:
            set_controls(run, c.controls)
            restore(run, path, evaluate_after=False)
            scores.append(_fork(run, k, take))
            run.step, run.pos = at, pos
    finally:
        run.bar = bar
    best = max(range(len(tried)), key=lambda i: scores[i]["score"])  # ties: the first
    chosen = tried[best]
    set_controls(run, chosen.controls)
    after = restore(run, path)
    mon = run.mon
    for kind, params in chosen.actions:  # the audit trail: what the experiment added
        action = mon.request_action(kind, params, f"fork experiment: {chosen.name}", "policy")
        mon.resolve(action.id, "applied", controls_diff(tried[0].controls, chosen.controls))
    mon.update_controls(chosen.controls.for_monitor(run.cfg.optim.lr, run.policy.is_moe))
    record_rollback(run, at, verdict.step, after, verdict)
    mon.event(
        "fork_experiment",
        {
            "step": at,
            "from_step": verdict.step,
            "k": k,
            "candidates": [
                {"name": c.name, "actions": c.actions, **s}
                for c, s in zip(tried, scores, strict=True)
            ],
            "chosen": chosen.name,
            "cost_steps": k * len(tried),
            "budget_left": budget - k * len(tried),
        },
    )
    run.bar.message(
        f"fork experiment from step {verdict.step}: "
        + ", ".join(f"{c.name} {s['score']:.3f}" for c, s in zip(tried, scores, strict=True))
        + f"; continuing with {chosen.name}"
    )
    return True


def _fork(run: RunState, k: int, take: Callable[[RunState], StepResult]) -> dict[str, Any]:
    """k steps from the restored checkpoint, unlogged; the score and what it rests on."""
    detectors = copy.deepcopy(run.mon.detectors)
    alerts, values = 0, {name: [] for name in RECORDED}
    for _ in range(k):
        run.step += 1
        run.pos += 1
        run.set_lr()
        try:
            result = take(run)
        except NonFiniteBatch:
            return {"score": -math.inf, "eval_acc": None, "alerts": alerts, "steps": values}
        run.engine.update_weights(run.policy.model)
        for name in RECORDED:
            values[name].append(result.scalars.get(name))
        changes = detectors.update(run.step, result.scalars)
        alerts += sum(getattr(a, "severity", "info") in ("warning", "critical") for a in changes)
    acc = held_out(run)["eval/acc"]
    score = acc - ALERT_PENALTY * alerts
    return {"score": score, "eval_acc": acc, "alerts": alerts, "steps": values}
