"""The remediation benchmark's verdicts on a pair of runs, remediation off and on.

*Rescued*: the run collapses without remediation, not with it, and ends within 5 points of
its stable twin (same seed, no incident). *Worse*: remediation's final accuracy more than
5 points below the run without it, or a collapse only with it. *Undone is worse*: the
stable twin itself would be judged worse than the run without remediation, so that no
policy, not even one that gave back everything the incident took, can be sure of the pair.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bench import RESULTS
from core.errors import UserError

TOLERANCE = 0.05
"""Accuracy within 5 points counts as the same."""
NOISE = RESULTS / "remediation_noise.json"
"""`minirl bench remediation-noise`'s table: the yardstick "worse" is judged against."""


@dataclass
class Arm:
    run: str
    collapsed: bool
    onset: int | None
    final_acc: float | None
    """μ's held-out accuracy at the end: `final_eval`'s measurement, else the last eval/acc."""
    best_acc: float | None
    first_precursor: int | None = None
    first_action: int | None = None
    recovered: int | None = None
    actions: list[dict] = field(default_factory=list)
    final_pi: float | None = None
    """Held-out accuracy of π itself (the trained weights, fp32) at the last checkpoint."""
    best_pi: float | None = None
    """...and at its best kept checkpoint (every 10 steps)."""
    final_measured: bool = False
    """final_acc is `final_eval`'s measurement (not the run's last eval/acc)."""
    last_eval: float | None = None
    """The run's own last eval/acc (2 responses per prompt)."""
    evals: list[float] = field(default_factory=list, repr=False)


@dataclass
class Pair:
    config: str
    seed: int
    stable: bool
    off: Arm
    on: Arm
    twin_final: float | None
    twin_last_eval: float | None = None
    collapses_without: bool = False
    rescued: bool = False
    worse_with_remediation: bool = False
    rescued_by_last_eval: bool = False
    """The verdicts read from the runs' own last evaluations (2 responses per prompt)."""
    worse_by_last_eval: bool = False


def judge(pair: Pair) -> Pair:
    pair.collapses_without = pair.off.collapsed
    pair.rescued, pair.worse_with_remediation = _verdicts(
        pair, pair.off.final_acc, pair.on.final_acc, pair.twin_final
    )
    pair.rescued_by_last_eval, pair.worse_by_last_eval = _verdicts(
        pair, pair.off.last_eval, pair.on.last_eval, pair.twin_last_eval
    )
    return pair


def _verdicts(
    pair: Pair, off: float | None, on: float | None, twin: float | None
) -> tuple[bool, bool]:
    """(rescued, worse) given the final accuracies of the two arms and of the twin."""
    near_twin = on is not None and twin is not None and on >= twin - TOLERANCE
    rescued = pair.off.collapsed and not pair.on.collapsed and near_twin
    worse = (on is not None and off is not None and on < off - TOLERANCE) or (
        pair.on.collapsed and not pair.off.collapsed
    )
    return rescued, worse


def undone_is_worse(off: float | None, twin: float | None) -> bool | None:
    """Would undoing the incident entirely, its stable twin, be judged worse than the run
    without remediation? Such a pair is one no policy can be sure not to lose (None where
    either accuracy is unknown)."""
    return None if off is None or twin is None else twin < off - TOLERANCE


def noise_share(path: Path) -> tuple[int, int]:
    """(forks ending more than 5 points below their run, forks) of a remediation-noise table."""
    try:
        forks = json.loads(path.read_text())["forks"]
        return sum(f["forked"] < f["run"] - TOLERANCE for f in forks), len(forks)
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a `minirl bench remediation-noise` table ({exc})") from None
