"""The run's story in words, for the live page's header: what happened, in step order.

One markdown line per induced incident, episode (its start with the blamed factor and
the evidence, where it turned critical, where it ended), action (applied, rejected or
pending), action the policy held back (its advice, a limit), rollback (to which
checkpoint, judged healthy why), and the evaluation where held-out accuracy was back
within noise of its pre-episode best after the episode's first action. Changes made at
a step boundary read 'step 29→30' (after step 29's record, before step 30). A pure
function of the monitor's records and the run's evaluations; the episodes are marks.py's.
"""

from __future__ import annotations

from collections.abc import Sequence

from dashboard.marks import BOUNDARY, episode_groups
from monitor.analysis.event_text import held_back_text, params_text
from monitor.remediation.healthy import noise_band, recovered
from monitor.store.records import Action, Alert, Event


def _boundary(step: int | None) -> str:
    return "?" if step is None else f"{step}→{step + 1}"


def story(
    alerts: Sequence[Alert],
    actions: Sequence[Action],
    events: Sequence[Event],
    last_step: int | None,
    evals: Sequence[tuple[int, float]] = (),
) -> list[str]:
    """What happened to the run, in step order, one markdown line each: induced incidents,
    episodes (start, turning critical, end), actions applied or rejected, rollbacks, and
    where held-out accuracy (`evals`: (step, acc)) was back at its pre-episode level
    after the episode's first action. Boundary changes read 'step 29→30' (after step 29,
    before step 30)."""
    lines: list[tuple[float, int, str]] = []

    def add(at: float, order: int, text: str) -> None:
        lines.append((at, order, f"step {text}"))

    for e in events:
        if e.step is None:
            continue
        if e.kind == "incident":
            what = str(e.detail.get("note", e.detail.get("kind"))).split(": ", 1)[-1]
            add(
                e.step + BOUNDARY,
                0,
                f"{_boundary(e.step)} · **induced incident** (scripted): {what}",
            )
        elif e.kind == "rollback":
            after, before = e.detail.get("eval_acc_after"), e.detail.get("eval_acc_before")
            acc = "" if after is None else f", held-out accuracy {after:.3f}"
            acc += "" if before is None else f" (last evaluation up to it: {before:.3f})"
            verdict = e.detail.get("healthy")
            if isinstance(verdict, dict) and verdict.get("reason"):
                ok = "judged healthy" if verdict.get("healthy") else "NOT healthy"
                acc += f"; {ok}: {verdict['reason']}"
            add(
                e.step + BOUNDARY,
                2,
                f"{_boundary(e.step)} · ⟲ **rolled back to step {e.detail.get('to_step')}**{acc}",
            )
        elif e.kind == "remediation_skipped":
            add(e.step, 2, f"{e.step} · ◇ held back: {held_back_text(e.detail)}")
    done = [a for a in actions if a.status != "pending"]
    for span, members in episode_groups(alerts, last_step):
        first = members[0]
        add(
            span.start,
            1,
            f"{span.start} · ▲ **episode** ({first.severity}), blamed: "
            f"**{span.label}** · {_evidence(first)}",
        )
        crit = next((a for a in members if a.severity == "critical"), None)
        if crit is not None and crit is not first:
            add(
                crit.step, 1, f"{crit.step} · ✕ **critical** {crit.detector}, blamed: {crit.factor}"
            )
        if not span.open:
            cleared = max(a.cleared_step or a.step for a in members)
            add(cleared, 3, f"{cleared} · ✓ episode over ({span.label}): its alerts cleared")
        acted = [a.resolved_step for a in done if span.start <= (a.resolved_step or -1) <= span.end]
        back = _back_to(evals, span.start, min(acted)) if acted else None
        if back is not None:
            (s0, v0), (s1, v1), band = back
            add(
                s1,
                3,
                f"{s1} · ✓ held-out accuracy {v1:.3f}: back at its pre-episode level "
                f"(within noise {band:.2g} of its best {v0:.3f}, at step {s0})",
            )
    for a in actions:
        params = f" ({params_text(a.params)})" if a.params else ""
        if a.status == "pending":
            add(
                a.step or 0,
                2,
                f"{_boundary(a.step)} · ◆ action **{a.kind}**{params} pending ({a.source})",
            )
            continue
        step = a.resolved_step if a.resolved_step is not None else a.step
        add(
            (step or 0) + BOUNDARY,
            1,
            f"{_boundary(step)} · ◆ action **{a.kind}**{params} **{a.status}** ({a.source})",
        )
    return [text for _, _, text in sorted(lines, key=lambda t: (t[0], t[1]))]


def _back_to(
    evals: Sequence[tuple[int, float]], start: int, acted: int
) -> tuple[tuple[int, float], tuple[int, float], float] | None:
    """(the best evaluation before the episode, the first after the action at `acted`
    back within noise of it, the noise band), or None: judged against the pre-episode
    best, never an evaluation that had already fallen (monitor/remediation/healthy.py)."""
    before = [(s, v) for s, v in evals if s < start]
    if not before:
        return None
    band = noise_band([v for _, v in before])
    after = next(((s, v) for s, v in evals if s > acted and recovered(v, before, band)[0]), None)
    best = max(reversed(before), key=lambda sv: sv[1])  # the latest of equals
    return None if after is None else (best, after, band)


def _evidence(a: Alert) -> str:
    return f"{a.metric} {a.value:.3g} vs baseline {a.baseline:.3g} ({a.detector})"
