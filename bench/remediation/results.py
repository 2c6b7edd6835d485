"""What the remediation benchmarks share at both ends: a run's store read back as rows of
one step each, and a results page written with its JSON beside it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.remediation.verdicts import TOLERANCE
from core.errors import UserError
from monitor.store.reader import RunReader
from monitor.store.records import Action, Alert


@dataclass(frozen=True)
class Logged:
    """One run's store: every scalar series, its precursors, the policy's actions."""

    series: dict[str, Any]
    """metric -> (steps, values), as `RunReader.scalars` returns them."""
    alerts: list[Alert]
    """Warning and critical alerts."""
    actions: list[Action]
    """The automatic remediation policy's actions (not the user's)."""
    rows: dict[int, dict[str, float]]
    """step -> {metric: value}: the run as the detection benchmark reads one."""


def read_logged(run_dir: Path) -> Logged:
    with RunReader(run_dir) as reader, reader.snapshot():
        series = reader.scalars(reader.metric_names())
        alerts = reader.alerts(min_severity="warning")
        actions = [a for a in reader.actions() if a.source == "policy"]
    rows: dict[int, dict[str, float]] = {}
    for metric, (s, v) in series.items():
        for step, value in zip(s.tolist(), v.tolist(), strict=True):
            rows.setdefault(step, {})[metric] = value
    return Logged(series, alerts, actions, rows)


def write_page(out: Path, lines: Sequence[str], command: str, **data: Any) -> None:
    """The markdown page `out` and `out.json` beside it: the command, the tolerance the
    verdicts used, then `data`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    obj = {"command": command, "tolerance": TOLERANCE, **data}
    out.with_suffix(".json").write_text(json.dumps(obj, indent=1) + "\n")


def report_pairs(
    pairs: list, write: Callable[[list, str, Path], None], command: str, out: str, where: str
) -> int:
    """Write the finished pairs' page with the command that made it (a command's exit)."""
    if not pairs:
        raise UserError(f"no finished pairs under {where}")
    write(pairs, command.strip(), Path(out))
    print(f"wrote {out}")
    return 0
