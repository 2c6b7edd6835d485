"""Smoke tests of the stability lab: the matrix, the runner (kill and resume), the report.

Small and fast on purpose: the lab itself runs for hours (`minirl bench stability`); here
its machinery runs real `minirl train` subprocesses of a few steps on the tiny model with
the PyTorch engine, and the report runs on synthetic stores whose right answers are
worked out by hand. The detection benchmark's tests: test_lab_detection.py.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.lab.manifest import Manifest, RunSpec, load_manifest, merge_specs, save_manifest
from bench.lab.policy_eval import load_policy_evals
from bench.lab.report import write_stability_report
from bench.lab.rows import compare
from bench.lab.settings import SETTINGS, lab_specs
from bench.lab.summary import collapse_onset, summarize_run, trend
from core.errors import UserError
from monitor import Monitor, RunReader

REPO = Path(__file__).resolve().parents[1]

# A tiny lab run: torch engine, 2-digit additions, a 3-step cold start, 3 RL steps.
TINY = [
    "engine.inference=torch",
    "engine.weight_quant=none",
    "task.kind=add",
    "task.digits=2",
    "task.heldout_size=8",
    "sampling.n=2",
    "sampling.max_new_tokens=4",
    "train.prompts_per_step=2",
    "train.mini_batches=1",
    "train.grad_cosine_every=0",
    "eval.samples=1",
    "eval.every=0",
    "checkpoint_every=1",
    "cold_start.steps=3",
    "cold_start.stop_at_sampled_acc=null",
    "cold_start.batch_size=8",
]


# ---------------------------------------------------------------------------- the matrix


def test_the_matrix_is_the_papers_and_every_recipe_loads():
    from trainer.config import load_config

    names = [s.name for s in SETTINGS]
    assert len(names) == 16 and len(set(names)) == 16
    seen = {}
    for s in SETTINGS:
        cfg = load_config(REPO / "configs" / "lab" / f"{s.name}.yaml")
        seen[s.name] = (
            cfg.train.mini_batches,
            cfg.loss.clip,
            cfg.train.routing_replay,
            cfg.loss.is_policy,
            cfg.loss.length_norm,
        )
        # the same induced mismatch, task and budget everywhere: only the recipe moves
        assert (cfg.engine.inference, cfg.engine.weight_quant, cfg.task.kind) == (
            "vllm",
            "fp4",
            "add_trace",
        )
        assert cfg.loss.variant == "minirl" and not cfg.train.remediation
    assert seen["onpolicy_minirl"] == (1, True, "none", "token_tis", False)
    assert seen["onpolicy_no_is"] == (1, True, "none", "none", False)
    assert seen["onpolicy_length_norm"] == (1, True, "none", "token_tis", True)
    assert seen["onpolicy_r3"] == (1, True, "R3", "token_tis", False)
    for n in (2, 4, 8):
        assert seen[f"offpolicy{n}x_noclip"] == (n, False, "none", "token_tis", False)
        assert seen[f"offpolicy{n}x_r2_noclip"] == (n, False, "R2", "token_tis", False)
        assert seen[f"offpolicy{n}x_r2"] == (n, True, "R2", "token_tis", False)
        assert seen[f"offpolicy{n}x_r3"] == (n, True, "R3", "token_tis", False)


def test_specs_are_seed_major_and_a_changed_spec_is_refused(tmp_path):
    specs = lab_specs(tmp_path, ["onpolicy_minirl", "onpolicy_no_is"], 2, 5, [])
    assert [s.key for s in specs] == [
        "onpolicy_minirl/seed0",
        "onpolicy_no_is/seed0",
        "onpolicy_minirl/seed1",
        "onpolicy_no_is/seed1",
    ]
    assert "seed=1" in specs[2].overrides and "train.steps=5" in specs[2].overrides
    manifest = merge_specs(Manifest(), specs)
    save_manifest(tmp_path, manifest)
    again = load_manifest(tmp_path)
    assert again.specs == manifest.specs and all(
        s.status == "pending" for s in again.states.values()
    )
    other = lab_specs(tmp_path, ["onpolicy_minirl"], 1, 7, [])
    with pytest.raises(UserError, match="recorded with other settings"):
        merge_specs(again, other)


# ---------------------------------------------------------------------------- runner: kill, resume


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_quick_lab_machinery_survives_a_kill_and_resumes(tmp_path):
    """The real quick-mode path on 2 tiny runs: kill the runner (SIGKILL) while the second
    run trains; a new runner skips the finished run, resumes the other from its
    checkpoint, and writes the report."""
    lab = tmp_path / "lab"
    sets = [a for o in [*TINY, f"cold_start.cache_dir={tmp_path / 'cache'}"] for a in ("--set", o)]
    out_md = tmp_path / "report.md"
    argv = [
        "bench",
        "stability",
        "--settings",
        "onpolicy_minirl,onpolicy_no_is",
        "--steps",
        "3",
        "--seeds",
        "1",
        "--lab-dir",
        str(lab),
        "--out",
        str(out_md),
        *sets,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "app.cli", *argv]
    runner = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    second = lab / "onpolicy_no_is" / "seed0"

    def second_has_checkpoint() -> bool:
        ck = second / "checkpoints"
        return ck.is_dir() and any(p.suffix == ".pt" for p in ck.iterdir())

    try:
        _wait(second_has_checkpoint, 240, "the second run's first checkpoint")
    finally:
        os.kill(runner.pid, signal.SIGKILL)  # the runner only; its child gets SIGINT
        runner.wait()
    state = load_manifest(lab).states
    assert state["onpolicy_minirl/seed0"].status == "done"
    assert state["onpolicy_no_is/seed0"].status == "running"  # as the killed runner left it

    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 runs, 1 done, 1 to run" in out.stdout
    state = load_manifest(lab).states
    assert state["onpolicy_minirl/seed0"].attempts == 1  # skipped, not rerun
    assert state["onpolicy_no_is/seed0"].attempts == 2
    assert state["onpolicy_no_is/seed0"].status == "done"
    with RunReader(second) as reader:
        steps = reader.steps().tolist()
        kinds = [e.kind for e in reader.events()]
    assert steps == [0, 1, 2, 3]  # nothing lost, nothing logged twice
    assert "resume" in kinds or "truncate" in kinds
    report = (tmp_path / "report.md").read_text()
    assert "`onpolicy_minirl`) | 1/1 |" in report and "`onpolicy_no_is`) | 1/1 |" in report
    # the finished lab measured π itself at every kept checkpoint of both runs
    evals = load_policy_evals(lab)
    assert set(evals) == {"onpolicy_minirl/seed0", "onpolicy_no_is/seed0"}
    for got in evals.values():
        assert got["steps"][-1] == 3 and len(got["pi"]) == len(got["steps"])
        assert all(0.0 <= x <= 1.0 for x in [*got["pi"], got["pi0"]])
    assert "## The trained policy π against the inference engine μ" in report
    assert (tmp_path / "report_on_policy.png").stat().st_size > 1000


# ------------------------------------------------------------------ report on a synthetic store


def _synthetic_run(run_dir: Path, acc: np.ndarray, steps: int, seed: int) -> None:
    """A run store whose train accuracy follows `acc`, evaluated every 10 steps."""
    cfg = {"train": {"steps": steps}}
    rng = np.random.default_rng(seed)
    mon = Monitor(run_dir, config=cfg, controls={})
    for step in range(steps + 1):
        scalars: dict[str, float] = {}
        if step > 0:
            scalars = {
                "reward/acc": float(acc[step]),
                "reward/mean": float(acc[step]),
                "policy/entropy": 0.5 * (1 + acc[step]),
                "mismatch/kl_k1": 0.03,
                "routing/mismatch_train_infer": 0.07,
            }
        if step % 10 == 0:
            scalars["eval/acc"] = float(acc[step] + rng.normal(0, 0.005))
        mon.log(step, scalars)
    mon.event("stop", {"step": steps, "reason": "completed"})
    mon.close()


def test_report_from_a_synthetic_lab(tmp_path):
    n = 200
    t = np.arange(n + 1)
    rising = 0.2 + 0.4 * t / n  # stable: rises to 0.6
    collapsing = np.where(t < 100, 0.2 + 0.4 * t / 100, np.maximum(0.0, 0.6 - 0.02 * (t - 100)))
    specs = []
    for name, curves in (
        ("onpolicy_minirl", (rising, rising + 0.02)),
        ("onpolicy_no_is", (collapsing, collapsing)),
    ):
        for seed, acc in enumerate(curves):
            run_dir = tmp_path / "lab" / name / f"seed{seed}"
            _synthetic_run(run_dir, acc, n, seed)
            specs.append(
                RunSpec(
                    f"{name}/seed{seed}",
                    str(REPO / "configs/lab" / f"{name}.yaml"),
                    (f"seed={seed}",),
                    str(run_dir),
                )
            )
    out = tmp_path / "res" / "stability.md"
    rows = write_stability_report(tmp_path / "lab", out, specs, "minirl bench stability --x")
    stable, broken = rows
    assert [r.collapsed for r in stable.runs] == [False, False]
    assert [r.collapsed for r in broken.runs] == [True, True]
    # the smoothed curve peaks at step 100 (0.6) and ends at 0; a fifth of the fall (0.12)
    # is done when 0.6 - 0.02 (t - 100) < 0.48, i.e. from t = 107 on
    assert broken.runs[0].onset.metric == "reward/acc" and 105 <= broken.runs[0].onset.step <= 109
    text = out.read_text()
    assert "| 2/2 | 200 |" in text and "2/2 (" in text and "0/2 |" in text
    assert "Command: `minirl bench stability --x`" in text
    assert "(2) Without IS correction: collapse with an entropy drop** — collapses 2/2" in text
    assert "reproduced." in text
    assert (out.parent / "stability_on_policy.png").is_file()


def test_onset_and_trend_on_hand_made_series():
    s = np.arange(1, 101)
    flat = (s, np.full(100, 0.5))
    assert collapse_onset({"reward/acc": flat}) is None
    fall = (s, np.where(s <= 50, 0.5, 0.05))
    onset = collapse_onset({"reward/acc": fall})
    assert onset is not None and 50 <= onset.step <= 53
    assert trend(s, s.astype(float)) == (5.5, 95.5)  # first and last 10 of 100 values


def test_compare_uses_two_standard_errors():
    # Δ = 0.1, se = sqrt(0.01/3 + 0.01/3) ≈ 0.0816 -> 2 se ≈ 0.163 > Δ: the same
    assert compare([0.5, 0.6, 0.7], [0.4, 0.5, 0.6])[0] == "same"
    # Δ = 0.3, se = sqrt(0.0001/3 * 2) ≈ 0.0082: higher
    verdict, delta = compare([0.69, 0.7, 0.71], [0.39, 0.4, 0.41])
    assert verdict == "higher" and math.isclose(delta, 0.3)
    assert compare([0.7], [0.4])[0] == "unknown"  # one seed: no spread to judge by


def test_summary_of_a_missing_run_is_none(tmp_path):
    assert summarize_run(tmp_path / "nothing") is None


def test_window_mean_counts_only_finite_values_inside_the_window():
    from bench.lab.summary import window_mean

    steps = np.array([0, 1, 2, 3, 20, 21])
    values = np.array([100.0, 1.0, np.nan, 3.0, 5.0, 100.0])
    series = {"m": (steps, values)}
    assert window_mean(series, "m", 1, 20) == pytest.approx(3.0)  # (1 + 3 + 5) / 3
    assert window_mean(series, "m", 2, 2) is None  # only a NaN inside
    assert window_mean(series, "absent", 1, 20) is None


def test_off_policy_verdicts_name_what_the_numbers_allow():
    from types import SimpleNamespace

    from bench.lab.findings import findings
    from bench.lab.rows import SettingRow

    def row(name, lates, collapsed):
        runs = [SimpleNamespace(late_eval=x, collapsed=collapsed) for x in lates]
        keys = [f"{name}/seed{i}" for i in range(len(runs))]
        return SettingRow(name, "off-policy", name, len(runs), runs, keys, [])  # type: ignore[arg-type]

    # 2x: no-clip collapses, R2 clearly below R3 -> (5) reproduced, (6) the other way round
    two = [
        row("offpolicy2x_noclip", [0.0, 0.01, 0.02], True),
        row("offpolicy2x_r2_noclip", [0.1, 0.12, 0.11], True),
        row("offpolicy2x_r2", [0.30, 0.31, 0.32], False),
        row("offpolicy2x_r3", [0.50, 0.51, 0.52], False),
    ]
    lines = findings(two)
    assert lines[0].endswith(
        "→ reproduced (the settings without clipping collapse more or end lower)."
    )
    assert lines[1].endswith("→ not reproduced (the other way round).")
    # 8x: everything collapses -> neither claim can be tested
    eight = [
        row(f"offpolicy8x_{v}", [0.0, 0.001, 0.0], True)
        for v in ("noclip", "r2_noclip", "r2", "r3")
    ]
    lines = findings(eight)
    assert "not testable here: every run collapses" in lines[0]
    assert "not testable here: both collapse in every run" in lines[1]
    # 4x: R3 ahead of R2 within the seed spread -> the direction, not a difference
    four = [
        row("offpolicy4x_r2", [0.2, 0.4, 0.3], False),
        row("offpolicy4x_r3", [0.3, 0.5, 0.35], False),
    ]
    assert findings(four)[-1].endswith("→ not beyond seed noise (Δ in the paper's direction).")
