"""How far a fold's rates could be from the monitor's true rates on runs like these.

A fold holds few collapses (10 on the report fold), so a rate there moves by 10 points
per run. Each caught and paged rate is given with its 95 % Wilson score interval, and
each goal is placed against it: a goal outside the interval is met or missed beyond what
the sample's chance explains. The interval takes the runs as independent draws; runs of
one source are alike, so the true range is likely wider.
"""

from __future__ import annotations

from scipy.stats import binomtest

CAUGHT_GOAL, PAGED_GOAL = 0.8, 0.1
"""The acceptance goals: at least this share of collapses caught, at most this share of
stable runs (gradient norm held) paged."""


def interval(k: int, n: int) -> list[float] | None:
    """The 95 % Wilson score interval of the rate k/n, or None for n = 0. Wilson's, not the
    normal approximation's, because it stays inside [0, 1] and keeps its coverage at the
    small n and extreme rates of a fold's collapses (10 runs, 4 caught: 17-69 %)."""
    if n == 0:
        return None
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return [round(float(ci.low), 3), round(float(ci.high), 3)]


def uncertainty(folds: dict[str, dict[str, dict]]) -> str:
    """How far each fold's caught and paged rates could be from the monitor's true rates on
    runs like these, and whether each goal lies inside that range."""

    def span(ci: list[float] | None) -> str:
        return "-" if ci is None else f"{100 * ci[0]:.0f}-{100 * ci[1]:.0f} %"

    def verdict(ci: list[float] | None, goal: float, at_least: bool) -> str:
        """Where the goal lies against the interval: a goal outside it is met or missed
        beyond what this sample's chance explains."""
        if ci is None:
            return ""
        if ci[0] <= goal <= ci[1]:
            return f" (the goal, {100 * goal:.0f} %, inside it)"
        above = goal > ci[1]
        met = above != at_least  # "at least": a goal above the interval is missed
        where = "above" if above else "below"
        return f" (the goal, {100 * goal:.0f} %, {where} it: {'met' if met else 'missed'})"

    parts = []
    for m, by_fold in folds.items():
        for fold, name in (("report", "B"), ("tune", "A")):
            t = by_fold[fold]
            caught, paged = t["caught_interval"], t["stable_held_paged_interval"]
            parts.append(
                f"{m} on fold {name}: collapses caught {span(caught)}"
                f"{verdict(caught, CAUGHT_GOAL, True) if m == 'ours' else ''}, stable runs "
                f"paged {span(paged)}{verdict(paged, PAGED_GOAL, False) if m == 'ours' else ''}"
            )
    return (
        "Uncertainty, as 95 % Wilson intervals of the rates above (the runs taken as "
        "independent draws; runs of one source are alike, so the true intervals are likely "
        "wider): " + "; ".join(parts) + "."
    )
