"""The lab's runs grouped by setting, and the one rule that calls two settings different.

A comparison between two settings is called a difference only when the means differ by
more than twice the standard error of the difference (seed spread); with one seed per
setting there is no spread to judge by, and the verdict says so rather than guessing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.lab.manifest import RunSpec
from bench.lab.settings import BY_NAME
from bench.lab.summary import RunSummary, fmt, summarize_run


@dataclass
class SettingRow:
    """One setting of the lab: its runs' summaries, finished or still running."""

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


def collect(lab_dir: Path, specs: Sequence[RunSpec]) -> list[SettingRow]:
    """One row per setting, in the order of the specs, with the summaries that exist."""
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


def pm(xs: Sequence[float]) -> str:
    """`mean ± sd` of a table cell ('-' when empty, the mean alone for one value)."""
    m, sd = mean_sd(xs)
    if m is None:
        return "-"
    return fmt(m) if sd is None else f"{fmt(m)} ± {fmt(sd)}"
