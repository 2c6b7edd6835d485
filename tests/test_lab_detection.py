"""Smoke tests of the detection benchmark (`minirl bench detection`): scoring and tuning
on hand-made alerts, both monitors replayed on synthetic streams, and the benchmark end
to end on a synthetic lab whose right answers are worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.lab import detection, replay
from bench.lab.manifest import Manifest, RunSpec, merge_specs, save_manifest
from bench.lab.replay import ours_first_alerts
from bench.lab.scoring import Labelled, in_tuning_set, score, tune
from monitor import Monitor

REPO = Path(__file__).resolve().parents[1]


class _S:
    """The part of a RunSummary that scoring reads."""

    def __init__(self, onset):
        self.collapse_step = onset


def _run(key, onset, ours, rl=None):
    return Labelled(key, _S(onset), ours, rl or {})  # type: ignore[arg-type]


def test_scoring_lead_late_miss_and_false_alarm():
    runs = [
        _run("a", 100, {"x": 80, "y": 120}),  # in time, lead 20 (x)
        _run("b", 50, {"y": 60}),  # late
        _run("c", 70, {}),  # missed
        _run("d", None, {"x": 30}),  # false alarm
        _run("e", None, {"y": 10}),  # false alarm unless only x counts
    ]
    s = score(runs, "ours")
    assert (s.collapsing, s.stable, s.in_time, s.late, s.missed, s.false_alarms) == (
        3, 2, [20], 1, 1, 2)  # fmt: skip
    s = score(runs, "ours", ["x"])
    assert (s.in_time, s.late, s.missed, s.false_alarms) == ([20], 0, 2, 1)


def test_tuning_picks_the_detectors_that_pay_on_the_tuning_runs():
    runs = [
        _run("c1", 100, {"good": 90, "noisy": 5}),
        _run("c2", 80, {"good": 60, "noisy": 5}),
        _run("s1", None, {"noisy": 5}),
        _run("s2", None, {"noisy": 7, "rare": 50}),
    ]
    # good: +2 in time, 0 false alarms; noisy: +2 in time, 2 false; rare: 1 false alarm
    assert tune(runs, "ours") == ["good"]


def test_our_detectors_see_an_entropy_crash_in_a_replayed_stream():
    stream = [(0, {"eval/acc": 0.3})]
    rng = np.random.default_rng(0)
    for step in range(1, 81):
        entropy = 0.5 * (1 + 0.02 * rng.standard_normal()) if step < 60 else 0.05
        stream.append((step, {"policy/entropy": entropy, "reward/acc": 0.4}))
    first = ours_first_alerts(stream)
    assert first.get("entropy_collapse") in (60, 61)  # persist=2: the second low step at most
    assert all(step >= 60 for step in first.values())  # nothing fires on the steady part


def test_rlwatch_is_fed_our_metrics_through_its_api():
    pytest.importorskip("rlwatch")
    stream = [(0, {"eval/acc": 0.3})]
    for step in range(1, 121):
        # rlwatch's entropy rule: below 1.0 nats for 25 (warning) / 50 (critical) steps
        stream.append(
            (
                step,
                {
                    "policy/entropy": 2.0 if step < 40 else 0.5,
                    "reward/mean": 0.4,
                    "reward/std": 0.3,
                    "optim/loss": 0.1,
                    "optim/grad_norm": 1.0,
                },
            )
        )
    first = replay.rlwatch_first_alerts(stream)
    # its warm-up counts steps, then 25 consecutive low steps: 40 + 25 - 1
    assert first["entropy_collapse"] == 64
    assert first["entropy_collapse!"] == 89


def test_relative_config_keeps_only_baseline_change_rules():
    from monitor.config import LevelRule

    cfg = replay.relative_config()
    rules = [getattr(cfg.detectors, f) for f in cfg.detectors.__dataclass_fields__]
    levels = [r for r in rules if isinstance(r, LevelRule)]
    assert levels and all(r.warn_level is None and r.crit_level is None for r in levels)
    # the fp4 lab's mismatch level (k1 ≈ 3e-2 > warn 2e-2) no longer alerts by itself...
    stream = [(s, {"mismatch/kl_k1": 0.03 * (1 + 0.01 * (s % 3))}) for s in range(1, 60)]
    assert "train_inference_kl" in ours_first_alerts(stream)
    assert "train_inference_kl" not in ours_first_alerts(stream, cfg)
    # ...while a 10x jump against the run's own baseline still does
    jump = [*stream, (60, {"mismatch/kl_k1": 0.3})]
    assert ours_first_alerts(jump, cfg)["train_inference_kl"] == 60


def test_scaled_thresholds_move_the_level_and_only_the_level():
    from monitor.config import MonitorConfig

    default = MonitorConfig().detectors
    cfg, names = replay.scaled_config(4)
    kl, ess = cfg.detectors.train_inference_kl, cfg.detectors.train_inference_ess
    assert kl.warn_level == pytest.approx(4 * default.train_inference_kl.warn_level)
    assert ess.direction == "low"  # a low-side level is divided
    assert ess.warn_level == pytest.approx(default.train_inference_ess.warn_level / 4)
    assert kl.z_warn is None and {"train_inference_kl", "train_inference_ess"} <= names
    # k1 steady at 1.5x the default warning level, then 3x at step 40: the default level
    # alerts at once, x2 only at the jump, x4 never
    warn = default.train_inference_kl.warn_level
    stream = [(s, {"mismatch/kl_k1": warn * (1.5 if s < 40 else 3.0)}) for s in range(1, 50)]
    first = replay.ours_scaled_first_alerts(stream)
    assert ours_first_alerts(stream)["train_inference_kl"] == 1
    assert first["train_inference_kl@x2"] == 40
    assert "train_inference_kl@x4" not in first
    assert replay.default_items({**first, "a": 1, "b~rel": 2}) == {"a": 1}


def test_rlwatch_scale_makes_its_rules_less_sensitive():
    pytest.importorskip("rlwatch")
    # entropy 0.6 nats: under rlwatch's 1.0 floor, over the floor at scale 2 (0.5)
    stream = [(s, {"policy/entropy": 0.6, "reward/mean": 0.4, "optim/loss": 0.1})
              for s in range(1, 121)]  # fmt: skip
    assert "entropy_collapse" in replay.rlwatch_first_alerts(stream)
    assert replay.rlwatch_first_alerts(stream, 2) == {}
    low = [(s, {**v, "policy/entropy": 0.3}) for s, v in stream]
    assert "entropy_collapse@x2" in replay.rlwatch_first_alerts(low, 2)


def test_the_tuning_split_is_fixed_and_about_half():
    keys = [f"lab/s{i}/seed{j}" for i in range(20) for j in range(3)]
    tuning = [in_tuning_set(k) for k in keys]
    assert tuning == [in_tuning_set(k) for k in keys]
    assert 15 <= sum(tuning) <= 45


def _detection_run(run_dir: Path, collapse: bool, seed: int) -> None:
    """200 steps; a collapsing run's staleness KL jumps at 80, its accuracy falls from 100."""
    rng = np.random.default_rng(seed)
    mon = Monitor(run_dir, config={"train": {"steps": 200}}, controls={})
    for step in range(201):
        acc = 0.2 + 0.002 * step
        if collapse and step > 100:
            acc = max(0.0, 0.4 - 0.02 * (step - 100))
        stale = 0.2 if collapse and step >= 80 else 1e-4
        scalars = {"eval/acc": acc} if step % 10 == 0 else {}
        if step > 0:
            scalars |= {"reward/acc": acc, "reward/mean": acc, "reward/std": 0.3,
                        "policy/entropy": 0.5 * (1 + 0.01 * rng.standard_normal()),
                        "staleness/kl_k3": stale, "optim/loss": 0.1,
                        "optim/grad_norm": 1 + 0.01 * rng.standard_normal()}  # fmt: skip
        mon.log(step, scalars)
    mon.event("stop", {"step": 200, "reason": "completed"})
    mon.close()


def test_detection_bench_end_to_end_on_a_synthetic_lab(tmp_path, capsys):
    pytest.importorskip("rlwatch")
    lab = tmp_path / "lab"
    specs = []
    for i, collapse in enumerate([True, True, False, False, True, False]):
        key = f"{'broken' if collapse else 'fine'}/seed{i}"
        run_dir = lab / key
        _detection_run(run_dir, collapse, i)
        specs.append(RunSpec(key, str(REPO / "configs/lab/base.yaml"), (), str(run_dir)))
    save_manifest(lab, merge_specs(Manifest(), specs))
    out = tmp_path / "detection.md"
    assert detection.main(["--labs", str(lab), "--out", str(out)]) == 0
    text = out.read_text()
    assert "Labelled runs: 6 (3 collapsing, 3 stable)" in text
    # every collapsing run: our staleness level (warning 1e-2) fires at the jump, step 80,
    # 26 steps before the onset (the accuracy's fall is a fifth done at step ~104-106)
    rows = [line for line in text.splitlines() if line.startswith("| lab/broken/")]
    assert len(rows) == 3 and all("80 (staleness_kl)" in r for r in rows)
    # and nothing of ours fires on the steady stable runs
    fine = [line for line in text.splitlines() if line.startswith("| lab/fine/")]
    assert len(fine) == 3 and all("| none | none |" in r for r in fine)
