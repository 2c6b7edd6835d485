"""Two folds, swapped: the breakdown rule's free parameters chosen on one fold of the
public runs and scored on the other, both ways.

The public runs are split by repository (corpus.py): fold A (`tune`) and fold B
(`report`). For each direction, every point of `GRID` is scored on the fold that chooses;
a point is admissible when at most one stable run in ten (gradient norm held) is paged
and warnings stay at or below 0.5 per 100 stable steps; among the admissible points the
most collapses caught wins (none admissible: the fewest stable runs paged, then the fewest
warnings, then the most caught), ties going to the least sensitive point (the larger
`extreme`, then the larger `sharpening_drop`: what it gives up on the choosing fold it
keeps in false alarms elsewhere). The chosen point is then scored on the other fold,
which chose nothing. The shipped defaults (`FROZEN`) are one of the two choices; the
report says which, and why.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from bench.detection import monitors, real_table
from bench.detection.corpus import Run
from bench.markdown import table
from monitor.detectors.config import DetectorsConfig

GRID = {"extreme": (0.0, 10.0, 100.0, 1000.0), "sharpening_drop": (0.0, 0.05, 0.1, 0.25)}
FROZEN = {"extreme": 1000.0, "sharpening_drop": 0.25}
"""The defaults of monitor/detectors/config.py's BreakdownRule (tested equal)."""
FOLDS = {"tune": "A", "report": "B"}


def config_for(extreme: float, sharpening_drop: float) -> DetectorsConfig:
    base = DetectorsConfig()
    rule = dataclasses.replace(base.breakdown, extreme=extreme, sharpening_drop=sharpening_drop)
    return dataclasses.replace(base, breakdown=rule)


def admissible(t: dict) -> bool:
    w = t["warnings_per_100_stable_steps"]
    paged_ok = t["stable_held_paged"] <= 0.1 * t["stable_held"]
    return paged_ok and (w is None or w <= 0.5)


def score(runs: Sequence[Run], point: dict) -> dict:
    cfg = config_for(**point)
    return real_table.totals([real_table.judge(r, monitors.ours(r.stream, cfg)) for r in runs])


def choose(runs: Sequence[Run]) -> tuple[dict, list[tuple[dict, dict]]]:
    """The point chosen on `runs` (one fold), and every point's totals there."""
    rows = []
    for values in itertools.product(*GRID.values()):
        point = dict(zip(GRID, values, strict=True))
        rows.append((point, score(runs, point)))

    def key(row: tuple[dict, dict]) -> tuple:
        p, t = row
        ok = admissible(t)  # none admissible: the fewest false alarms, then the most caught
        alarms = (-t["stable_held_paged"], -(t["warnings_per_100_stable_steps"] or 0.0))
        return (
            ok,
            t["caught"] if ok else 0,
            *alarms,
            t["caught"],
            p["extreme"],
            p["sharpening_drop"],
        )

    rows.sort(key=key, reverse=True)
    return rows[0][0], rows


def cross(runs: Sequence[Run]) -> list[dict]:
    """Both directions: chosen on one fold, scored on the other (and the defaults there)."""
    real = [r for r in runs if r.group == "real"]
    out = []
    for chooser, scored in (("tune", "report"), ("report", "tune")):
        point, rows = choose([r for r in real if r.split == chooser])
        chosen_on = next(t for p, t in rows if p == point)
        out.append(
            {
                "chosen_on": chooser,
                "scored_on": scored,
                "point": point,
                "chooser_totals": chosen_on,
                "totals": score([r for r in real if r.split == scored], point),
                "frozen_is_this_choice": point == FROZEN,
            }
        )
    return out


def lines(result: list[dict]) -> list[str]:
    """The markdown table of both directions."""
    rows = []
    for d in result:
        t, c, point = d["totals"], d["chooser_totals"], d["point"]
        w = t["warnings_per_100_stable_steps"]
        rows.append(
            (
                f"{FOLDS[d['chosen_on']]} ({d['chosen_on']}) → "
                f"{FOLDS[d['scored_on']]} ({d['scored_on']})",
                f"{point['extreme']:g}",
                f"{point['sharpening_drop']:g}",
                real_table.pct(t["caught"], t["collapses"]),
                real_table.pct(t["stable_held_paged"], t["stable_held"]),
                "-" if w is None else f"{w:.2f}",
                f"{c['caught']}/{c['collapses']}, {c['stable_held_paged']}/{c['stable_held']}",
            )
        )
    header = (
        "chosen on → scored on",
        "extreme",
        "sharpening_drop",
        "caught (scored fold)",
        "stable paged, grad norm held",
        "warnings / 100",
        "on the choosing fold: caught, paged",
    )
    return table(header, rows)
