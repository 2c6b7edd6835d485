"""Metric streams for tests of what the monitor does with them (analyze, dashboard pages,
the story): plausible defaults, and each test says which shape it needs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

IS_OFF = {"is_policy": "none"}
"""Controls of a run that switched IS correction off: a training-inference precursor then
only advises turning it back on (a breakdown would apply it)."""


def kl_jump(steps: int = 60, start: int = 40, end: int | None = 50) -> Iterator[tuple[int, dict]]:
    """(step, metrics): a training-inference KL near 1e-3 with a small wobble, 0.5 from
    `start` to `end` (to the last step when None), and a flat reward."""
    for step in range(steps):
        jumped = step >= start and (end is None or step < end)
        kl = 0.5 if jumped else 1e-3 * (1 + 0.05 * np.sin(1.7 * step))
        yield step, {"mismatch/kl_k1": kl, "reward/mean": 0.5}
