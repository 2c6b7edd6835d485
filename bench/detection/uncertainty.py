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
LAB_CAUGHT_GOAL, LAB_PAGED_GOAL = 0.75, 0.01
"""The lab's (scripted and organic collapses, report seeds): in time, paged."""


def interval(k: int, n: int) -> list[float] | None:
    """The 95 % Wilson score interval of the rate k/n, or None for n = 0. Wilson's, not the
    normal approximation's, because it stays inside [0, 1] and keeps its coverage at the
    small n and extreme rates of a fold's collapses (10 runs, 4 caught: 17-69 %)."""
    if n == 0:
        return None
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return [round(float(ci.low), 3), round(float(ci.high), 3)]


def described(
    what: str, ci: list[float] | None, goal: float | None, at_least: bool, digits: int = 0
) -> str:
    """`what` and its interval, and where the goal lies against it: a goal outside the
    interval is met or missed beyond what this sample's chance explains."""
    span = "-" if ci is None else f"{100 * ci[0]:.{digits}f}-{100 * ci[1]:.{digits}f} %"
    text = f"{what} {span}"
    if ci is None or goal is None:
        return text
    if ci[0] <= goal <= ci[1]:
        return f"{text} (the goal, {100 * goal:.0f} %, inside it)"
    above = goal > ci[1]
    met = above != at_least  # "at least": a goal above the interval is missed
    where = "above" if above else "below"
    return f"{text} (the goal, {100 * goal:.0f} %, {where} it: {'met' if met else 'missed'})"


def uncertainty(folds: dict[str, dict[str, dict]]) -> str:
    """How far each fold's caught and paged rates could be from the monitor's true rates on
    runs like these, and whether each goal lies inside that range (ours only)."""
    parts = []
    for m, by_fold in folds.items():
        ours = m == "ours"
        for fold, name in (("report", "B"), ("tune", "A")):
            t = by_fold[fold]
            caught = described(
                "collapses caught", t["caught_interval"], CAUGHT_GOAL if ours else None, True
            )
            paged = described(
                "stable runs paged",
                t["stable_held_paged_interval"],
                PAGED_GOAL if ours else None,
                False,
            )
            parts.append(f"{m} on fold {name}: {caught}, {paged}")
    return (
        "Uncertainty, as 95 % Wilson intervals of the rates above (the runs taken as "
        "independent draws; runs of one source are alike, so the true intervals are likely "
        "wider): " + "; ".join(parts) + "."
    )


def lab(caught: int, collapses: int, paged: int, stable: int) -> str:
    """The same for ours on the lab's report seeds, against the lab's goals."""
    in_time = described("in time", interval(caught, collapses), LAB_CAUGHT_GOAL, True, 1)
    pages = described("stable runs paged", interval(paged, stable), LAB_PAGED_GOAL, False, 1)
    return (
        "Uncertainty, as 95 % Wilson intervals (the runs taken as independent draws; runs "
        f"of one config are alike, so the true intervals are likely wider): ours {in_time}, "
        f"{pages}."
    )
