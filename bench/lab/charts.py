"""The stability report's overlay charts (PNG, matplotlib): one 2x2 figure per group."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.lab.rows import SettingRow


def _smooth(v: np.ndarray, k: int = 9) -> np.ndarray:
    if len(v) < k:
        return v
    pad = np.pad(v, (k // 2, k // 2), mode="edge")
    return np.convolve(pad, np.ones(k) / k, mode="valid")


def draw_group(rows: Sequence[SettingRow], title: str, path: Path) -> None:
    """A 2x2 overlay chart: held-out acc, train acc (smoothed), entropy, mismatch KL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("eval/acc", "held-out accuracy", False, 1),
        ("reward/acc", "train accuracy (running mean of 9)", False, 9),
        ("policy/entropy", "entropy, nats/token (running mean of 9)", False, 9),
        ("mismatch/kl_k1", "mismatch KL(μ‖π_old), k1 (running mean of 9)", True, 9),
    )
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), dpi=90)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (metric, label, log, k) in zip(axes.flat, panels, strict=True):
        for i, row in enumerate(rows):
            c = colors[i % len(colors)]
            for j, run in enumerate(row.runs):
                s, v = run.series.get(metric, (np.empty(0), np.empty(0)))
                ok = np.isfinite(v) & ((s > 0) | (metric == "eval/acc"))
                if ok.sum() == 0:
                    continue
                ax.plot(
                    s[ok],
                    _smooth(v[ok], k),
                    color=c,
                    lw=1.2,
                    alpha=0.75,
                    label=f"{row.label} (n={len(row.runs)})" if j == 0 else None,
                )
            for run in row.runs:
                if run.collapse_step is not None:
                    ax.axvline(run.collapse_step, color=c, ls=":", lw=1)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("RL step", fontsize=9)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"{title}: one line per seed, dotted = collapse onset", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
