"""What every reader of a foreign log returns: `Parsed`, and the two cell converters.

Its own module so that the readers (jsonl.py, csv_table.py, tensorboard.py, wandb.py) and
the package that dispatches to them (`monitor.importers.parse`) do not import each other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from monitor.store.schema import MAX_STEP, name_problem

MAX_EXAMPLES = 5
RUN_SEP = " - "
"""Between a run's name and a metric's in a file of several runs (W&B's chart export)."""


STEP_KEYS = (
    "step",
    "global_step",
    "train/global_step",
    "trainer/global_step",
    "eval/global_step",
    "training_step",
    "rollout/step",
    "train/step",
    "eval/step",
    "_step",
    "Step",
)
"""A row's step: the first of these it holds. The trainers' optimizer-step keys come
before W&B's own `_step`, which counts what the logger was told: log calls for Hugging
Face's callback (one per `logging_steps`, train and eval apart), episodes for
open-instruct (its optimizer step is "training_step"), the global step for verl.
OpenRLHF logs its evaluations in rows of their own, at "eval/global_step". slime calls
`wandb.log` without a step for each of its rollout, train and eval rows, which carry
"rollout/step" (the rollout), "train/step" (the optimizer step) and "eval/step". The two
agree when each rollout makes one update (`global_batch_size` = rollout batch size ×
samples per prompt); with n updates per rollout a train row sits at n × its rollout."""


@dataclass
class Parsed:
    """Scalars read from one file, and what was skipped on the way."""

    rows: dict[int, dict[str, float]] = field(default_factory=dict)
    """step -> {peer name -> value}; a later value for the same (step, name) wins."""
    units: int = 0
    """Lines, rows or records read (the unit the garbage count refers to)."""
    unit: str = "line"
    garbage: int = 0
    examples: list[str] = field(default_factory=list)
    """The first few garbage units, as 'line 7: not JSON'."""
    non_numeric: int = 0
    """Fields that were present but not numbers (strings, lists...): skipped, not garbage."""
    overwritten: int = 0
    """(step, name) pairs seen more than once; the last one is kept."""
    bad_names: int = 0
    """Values skipped because their name cannot be a metric name (empty, a lone
    surrogate): the rest of their line is kept."""
    runs: list[str] = field(default_factory=list)
    """The runs the file names, when it names them: a TensorBoard log dir's run
    sub-directories, a W&B chart export's "<run> - <metric>" columns. When it names any,
    every name in `rows` is "<run> - <metric>" (W&B's own convention); see `by_run`."""

    def add(self, step: int, name: str, value: float) -> None:
        if name_problem(name) is not None:
            self.bad_names += 1
            return
        row = self.rows.setdefault(step, {})
        if name in row:
            self.overwritten += 1
        row[name] = value

    def add_fields(self, step: int, fields: Iterable[tuple[str, object]]) -> None:
        """The (name, raw value) fields of one wide row at `step`. A field that is not a
        number is present but not a metric: counted in non_numeric, not as garbage."""
        for name, raw in fields:
            value = as_value(raw)
            if value is None:
                self.non_numeric += 1
            else:
                self.add(step, name, value)

    def add_long(self, step: int, name: str, raw: object, where: str) -> None:
        """One (step, name, value) row of a long-format log; a value that is not a
        number makes the row garbage."""
        value = as_value(raw)
        if value is None:
            self.bad(where, "value is not a number")
        else:
            self.add(step, name, value)

    def bad(self, where: str, reason: str) -> None:
        self.garbage += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {reason:.200}")

    def absorb(self, other: Parsed, run: str) -> None:
        """Add `other`'s values under "<run> - <name>" and its tallies to this file's."""
        for step, row in other.rows.items():
            for name, value in row.items():
                self.add(step, f"{run}{RUN_SEP}{name}", value)
        self.units += other.units
        self.garbage += other.garbage
        self.examples += other.examples[: MAX_EXAMPLES - len(self.examples)]
        self.non_numeric += other.non_numeric
        self.overwritten += other.overwritten
        self.bad_names += other.bad_names
        self.runs.append(run)

    def by_run(self) -> dict[str, dict[int, dict[str, float]]]:
        """{run: {step: {metric: value}}}: one entry per run the file names, or one
        ("") for a file that names none."""
        if not self.runs:
            return {"": self.rows}
        out: dict[str, dict[int, dict[str, float]]] = {run: {} for run in self.runs}
        longest_first = sorted(self.runs, key=len, reverse=True)  # "a - b" before "a"
        for step, row in self.rows.items():
            for name, value in row.items():
                run = next(r for r in longest_first if name.startswith(r + RUN_SEP))
                out[run].setdefault(step, {})[name[len(run) + len(RUN_SEP) :]] = value
        return out

    @property
    def n_values(self) -> int:
        return sum(len(row) for row in self.rows.values())


def as_step(value: object) -> int | None:
    """A step (an integer in 0..MAX_STEP) from an int, an integral float or a numeric
    string; None for anything else (1e20 is a number, not a step a store can hold)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_STEP else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value) if 0 <= value <= MAX_STEP else None
    return None


def as_value(value: object) -> float | None:
    """A float from a number or a numeric string ('nan' and 'inf' included: they are data)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        if isinstance(value, int | float):
            return float(value)  # an int past float64's range (10**400) overflows
        if isinstance(value, str) and value.strip():
            return float(value.strip())
    except (ValueError, OverflowError):
        return None
    return None
