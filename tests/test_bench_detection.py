"""The detection and remediation benchmarks' bookkeeping: labels, scores, export, pairs.

The benchmarks themselves take hours (bench/results/); here their definitions are checked
on runs written through the real Monitor, with outcomes and alerts known by construction.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.detection import corpus, monitors, report
from bench.detection.score import LEAD_GOAL, RunScore, score_run, summarise
from bench.remediation.cli import read_arm
from bench.remediation.verdicts import Arm, Pair, judge
from core.errors import UserError
from monitor import Monitor, RunReader
from monitor.detectors.rules import CLIP_ON, MINI_BATCHES


def _stream(n: int, collapse_at: int | None, shift_at: int | None, seed: int = 0):
    """A run that learns; optionally the staleness KL jumps 30× at `shift_at` and the
    accuracy falls to 0 from `collapse_at`."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        acc = min(0.2 + t / 200, 0.6) + rng.normal(0, 0.02)
        if collapse_at is not None and t >= collapse_at:
            acc = max(0.0, 0.05 * rng.random())
        kl = 1e-3 * math.exp(rng.normal(0, 0.2)) * (30 if shift_at and t >= shift_at else 1)
        out.append((t, {"reward/acc": acc, "staleness/kl_k3": kl, "optim/grad_norm": 1.0}))
    return out


def test_labels_come_from_the_outcome_only():
    collapsing = corpus.label_run(corpus.Run("c", "lab", "report", _stream(120, 80, None)))
    assert collapsing.label == "collapse" and 78 <= collapsing.onset <= 82
    stable = corpus.label_run(corpus.Run("s", "lab", "report", _stream(120, None, 60)))
    assert stable.label == "stable" and stable.onset is None  # a precursor is not a label
    survived = corpus.label_run(
        corpus.Run("v", "lab", "report", _stream(120, None, 60), incident_step=60)
    )
    assert survived.label == "survived"
    nan = _stream(60, None, None)
    for _, v in nan[40:]:
        v["optim/grad_norm"] = math.nan
    assert corpus.label_run(corpus.Run("n", "real", "tune", nan)).onset == 40


def test_a_run_whose_held_out_score_falls_while_its_reward_holds_is_ambiguous():
    """Reward and held-out accuracy disagree: neither a collapse nor a stable run."""
    stream = _stream(120, None, None)
    for t, values in stream:
        values["eval/acc"] = 0.1 + 0.5 * min(t, 60) / 60 - (0.45 if t >= 80 else 0.0)
    run = corpus.label_run(corpus.Run("a", "real", "tune", stream))
    assert (run.label, run.outcome) == ("ambiguous", "eval/acc") and 78 <= run.onset <= 82
    for _, values in stream:  # held-out accuracy that holds: stable, as before
        values["eval/acc"] = 0.4
    assert corpus.label_run(corpus.Run("s", "real", "tune", stream)).label == "stable"
    collapsing = _stream(120, 80, None)  # a reward collapse stays a collapse, whatever eval
    for _, values in collapsing:
        values["eval/acc"] = 0.4
    assert corpus.label_run(corpus.Run("c", "real", "tune", collapsing)).label == "collapse"


def test_a_public_log_merges_rows_of_a_step_and_takes_its_map(tmp_path):
    """A plain script's log (a train and a validation row for one step, names of its own)
    is read as `minirl import --map` would read it: one row per step, mapped names first."""
    rows = [
        {"step": t, "split": "train", "mean_reward": 0.01 * t, "token_entropy": 0.3, "active": 1}
        for t in range(1, 31)
    ]
    rows[0].update(token_entropy=0.0, active=0)  # nothing trained at step 1: not a measurement
    rows += [{"step": t, "split": "val", "accuracy": 0.02 * t} for t in (10, 20, 30)]
    (tmp_path / "script_run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    names = {
        "mean_reward": "reward/mean",
        "token_entropy": "policy/entropy",
        "accuracy": "eval/acc",
    }
    unmeasured = {"when_zero": "active", "metrics": ["token_entropy"]}
    labels = {
        "script_run": {
            "source": "github.com/a/b, `m.jsonl`",
            "map": names,
            "unmeasured": unmeasured,
        }
    }
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    [run] = corpus.real_runs(tmp_path)
    assert [t for t, _ in run.stream] == list(range(1, 31))
    assert run.stream[19] == (
        20,
        {"reward/mean": 0.2, "policy/entropy": 0.3, "active": 1.0, "eval/acc": 0.4},
    )
    assert run.stream[0] == (1, {"reward/mean": 0.01, "active": 0.0})
    assert run.outcome == "reward/mean" and run.label == "stable"


def test_scores_follow_the_written_definitions():
    run = corpus.label_run(
        corpus.Run("c", "lab", "report", _stream(120, 80, 50), cause="staleness", incident_step=50)
    )
    fired = monitors.ours(run.stream)
    score = score_run(run, fired)
    assert score.first_detector == "staleness_kl" and score.blamed == "staleness"
    assert score.lead == run.onset - score.first_alert >= LEAD_GOAL
    late = RunScore("l", "report", "collapse", 80, 75, "x", 5, "staleness", "staleness", 0, 1, 100)
    missed = RunScore("m", "report", "collapse", 80, None, None, None, None, "routing", 0, 0, 100)
    quiet = RunScore("q", "report", "stable", None, 30, "x", None, None, None, 1, 2, 200, 200, 2)
    s = summarise([score, late, missed, quiet])
    assert (s.caught, s.late, s.missed, s.collapses) == (1, 1, 1, 3)
    assert s.blame_correct == 2 and s.blame_known == 3  # 'missed' blamed nothing
    # 2 warnings over the stable run's 200 steps and the 50 healthy steps before the incident
    assert (s.false_critical, s.stable, s.warnings_per_100_steps) == (1, 1, 0.8)
    # an alert before the incident is a false alarm on the healthy stretch, not a detection
    early = [monitors.Fired(20, "warning", "x", "train_inference"), *fired]
    pre = score_run(run, early)
    assert (pre.first_alert, pre.healthy_warnings) == (score.first_alert, 1)
    # without an incident: a stable run is healthy throughout; a collapsing public log has
    # no healthy stretch (its alerts before the onset are detections, not false alarms)
    stable = score_run(dataclasses.replace(run, incident_step=None, label="stable"), early)
    warned = sum(f.severity == "warning" for f in early)
    assert (stable.healthy_steps, stable.healthy_warnings) == (run.steps, warned) and warned >= 2
    public = score_run(dataclasses.replace(run, incident_step=None), early)
    assert (public.healthy_steps, public.healthy_warnings) == (0, 0)


def test_the_organic_rows_count_only_organic_runs_of_the_report_seeds():
    def score(run: str, split: str, lead: int | None) -> RunScore:
        alert = None if lead is None else 60 - lead
        return RunScore(run, split, "collapse", 60, alert, None, lead, None, None, 0, 0, 200)

    ours = [
        score("lab/organic/lr3e-4/seed101", "report", 15),  # caught
        score("lab/organic/lr3e-4/seed102", "report", -5),  # late
        score("lab/organic/lr3e-4/seed0", "tune", 15),  # a tuning seed: not counted
        score("lab/stale8x/seed101", "report", 15),  # a scripted incident: not counted
        score("real/c1_x", "report", 15),
    ]
    hidden = [score("lab/organic/lr3e-4/seed101", "report", None), *ours[1:]]
    rows = report.organic({"ours": ours, "rlwatch": ours[1:]}, hidden)
    assert (rows["ours"].caught, rows["ours"].collapses) == (1, 2)
    assert (rows["ours, settings hidden"].caught, rows["ours, settings hidden"].missed) == (0, 1)
    assert (rows["rlwatch"].caught, rows["rlwatch"].collapses) == (0, 1)


def test_a_stream_without_settings_keeps_what_another_trainer_logs():
    """The settings-hidden replay (a log of another trainer): the settings trainers do not
    log are gone, so a jump in policy updates per rollout the setting rule reads the step
    it happens is invisible; the learning rate and every measured metric are kept."""

    def row(t: int) -> dict[str, float]:
        return {
            MINI_BATCHES: 1.0 if t < 35 else 4.0,
            CLIP_ON: 1.0,
            "optim/lr": 1e-6,
            "optim/grad_norm": 1 + 0.01 * (t % 3),
        }

    stream = [(t, row(t)) for t in range(1, 60)]
    hidden = monitors.without_settings(stream)
    assert [s for s, _ in hidden] == [s for s, _ in stream]
    kept = ("optim/lr", "optim/grad_norm")
    assert all(v == {k: row(t)[k] for k in kept} for t, v in hidden)
    seen = [f for f in monitors.ours(stream) if f.detector == "mini_batches_rise"]
    assert seen and seen[0].step == 35  # a setting is read the step it moves
    assert not monitors.ours(hidden)


def test_a_lab_run_store_exports_and_loads_back(tmp_path):
    mon = Monitor(tmp_path / "run", config={"train": {"mini_batches": 2}})
    for step, values in _stream(60, None, None):
        if step == 30:
            mon.event("incident", {"kind": "set_mini_batches", "params": {"n": 8}, "note": "x"})
        mon.log(step, {**values, "perf/step_s": 0.1})
    mon.event("stop", {"reason": "completed"})
    mon.close()
    out = tmp_path / "data" / "lab" / "stale8x" / "seed4.jsonl.gz"
    corpus.export_lab_run(tmp_path / "run", out, "stale8x", 4)
    (run,) = corpus.lab_runs(tmp_path / "data" / "lab")
    assert run.name == "lab/stale8x/seed4" and run.split == "tune"  # seed 4 tunes
    assert run.incident_step == 30 and run.cause == "staleness" and run.label == "survived"
    assert len(run.stream) == 60 and "perf/step_s" not in run.stream[5][1]
    assert run.stream[7][1]["reward/acc"] == pytest.approx(
        _stream(60, None, None)[7][1]["reward/acc"]
    )
    # a store from before the trainer logged its settings: from config and incidents
    mini = [row[corpus.MINI_BATCHES] for _, row in run.stream]
    assert mini[:30] == [2.0] * 30 and mini[30:] == [8.0] * 30
    assert {row[CLIP_ON] for _, row in run.stream} == {1.0}  # stale8x never turns it off


def test_the_derived_settings_are_what_the_trainer_logs(tiny_config):
    from trainer.run import train

    cfg = tiny_config(
        train={
            "steps": 4,
            "mini_batches": 2,
            "incidents": [
                {"step": 2, "kind": "set_mini_batches", "params": {"n": 1}, "note": "x"},
                {"step": 3, "kind": "set_clip", "params": {"enabled": False}, "note": "y"},
            ],
        }
    )
    train(cfg, progress=False)
    names = [corpus.MINI_BATCHES, CLIP_ON, corpus.LENGTH_NORM]
    with RunReader(cfg.resolved_run_dir) as reader:
        logged = {name: v.tolist() for name, (_, v) in reader.scalars(names).items()}
        steps = reader.scalars(names)[CLIP_ON][0].tolist()
        incidents = [{"step": (e.step or 0) + 1, **e.detail} for e in reader.events("incident")]
    derived = [corpus.scripted_settings(s, cfg, incidents) for s in steps]
    assert logged[corpus.MINI_BATCHES] == [d[corpus.MINI_BATCHES] for d in derived]
    assert logged[CLIP_ON] == [d[CLIP_ON] for d in derived] == [1.0, 1.0, 0.0, 0.0]
    assert logged[corpus.MINI_BATCHES] == [2.0, 1.0, 1.0, 1.0]
    assert logged[corpus.LENGTH_NORM] == [d[corpus.LENGTH_NORM] for d in derived] == [0.0] * 4


def test_remediation_pairs_are_judged_by_outcome_and_twin():
    def arm(collapsed, final):
        return Arm("r", collapsed, 50 if collapsed else None, final, 0.6)

    rescued = judge(Pair("stale8x", 1, False, arm(True, 0.0), arm(False, 0.52), 0.55))
    assert rescued.collapses_without and rescued.rescued and not rescued.worse_with_remediation
    short = judge(Pair("stale8x", 2, False, arm(True, 0.0), arm(False, 0.40), 0.55))
    assert not short.rescued  # no collapse, but 15 points below its stable twin
    harmed = judge(Pair("stable_base", 1, True, arm(False, 0.55), arm(False, 0.45), 0.45))
    assert harmed.worse_with_remediation


def test_the_verdicts_read_the_measured_final_accuracy_and_report_the_last_eval_beside():
    """A pair 7 points apart by the runs' last evaluations and 1 point apart by the final
    measurement is not worse; the last-eval verdict says it would have been."""
    off = Arm("r", False, None, 0.44, 0.5, final_measured=True, last_eval=0.43)
    on = Arm("r", False, None, 0.43, 0.5, final_measured=True, last_eval=0.36)
    pair = judge(Pair("is_off", 6, False, off, on, 0.40, twin_last_eval=0.37))
    assert not pair.worse_with_remediation and pair.worse_by_last_eval
    collapsed = Arm("r", True, 50, 0.0, 0.4, final_measured=True, last_eval=0.0)
    near = Arm("r", False, None, 0.41, 0.5, final_measured=True, last_eval=0.30)
    rescue = judge(Pair("stale8x", 3, False, collapsed, near, 0.44, twin_last_eval=0.36))
    assert rescue.rescued and not rescue.rescued_by_last_eval  # 0.30 < 0.36 - 0.05


def test_an_on_arm_without_an_action_shares_its_off_arms_measurement():
    from bench.remediation.cli import _final_from_off

    off = Arm("r", False, None, 0.47, 0.5, final_measured=True, evals=[0.2, 0.4])
    same = _final_from_off(Arm("r", False, None, 0.40, 0.5, evals=[0.2, 0.4]), off)
    assert (same.final_acc, same.final_measured) == (0.47, True)
    acted = Arm("r", False, None, 0.40, 0.5, evals=[0.2, 0.4], actions=[{"kind": "set_clip"}])
    assert _final_from_off(acted, off).final_acc == 0.40  # a changed run is its own
    diverged = _final_from_off(Arm("r", False, None, 0.40, 0.5, evals=[0.2, 0.3]), off)
    assert not diverged.final_measured


def test_read_arm_finds_precursor_action_and_recovery(tmp_path):
    mon = Monitor(tmp_path / "r", controls={"is_policy": "none", "clip": True}, remediation=True)
    for step in range(80):
        kl = 0.5 if 40 <= step < 50 else 1e-3 * (1 + 0.05 * math.sin(step))
        values = {"mismatch/kl_k1": kl, "reward/mean": 0.5}
        if step % 10 == 0:
            values["eval/acc"] = 0.2 if step in (40, 50) else 0.5
        mon.log(step, values)
        for action in mon.pending_actions():
            mon.resolve(action.id, "applied", "ok")
    mon.close()
    arm = read_arm(tmp_path / "r", "r")
    assert arm.first_precursor is not None and 40 < arm.first_precursor < 50
    assert arm.first_action == arm.first_precursor  # resolved in the same loop iteration
    # the precursor with held-out accuracy falling is a breakdown: roll back, turn IS on
    assert [a["kind"] for a in arm.actions] == ["rollback", "set_is_correction"]
    assert arm.recovered == 60
    assert arm.final_acc == 0.5 and not arm.collapsed


def test_the_defaults_are_the_frozen_tuning_point():
    """monitor/detectors/config.py's defaults are exactly the grid point chosen on the
    tuning set (bench/detection/tune.py): what users get is what the benchmark scores."""
    from bench.detection.tune import FROZEN, GRID, config_for
    from monitor.detectors.config import DetectorsConfig

    assert config_for(**FROZEN) == DetectorsConfig()
    assert all(FROZEN[k] in values for k, values in GRID.items())


def test_pi_at_checkpoints_is_cached_per_kept_checkpoints(tmp_path, monkeypatch):
    """π is measured once per set of kept checkpoints; a new checkpoint or a torn cache
    remeasures (the evaluation itself is bench.lab.policy_eval's, tested with the lab)."""
    import bench.lab.policy_eval as policy_eval
    import trainer.checkpoints as checkpoints
    from bench.lab.policy_eval import PI_CACHE, pi_at_checkpoints

    kept = {10: "a", 20: "b"}
    calls: list[list[int]] = []

    def fake_eval(run_dir, steps):
        calls.append(list(steps))
        return [s / 100 for s in steps]

    monkeypatch.setattr(policy_eval, "eval_policy_at", fake_eval)
    monkeypatch.setattr(checkpoints, "list_checkpoints", lambda run_dir: dict(kept))
    assert pi_at_checkpoints(tmp_path) == [(10, 0.1), (20, 0.2)]
    assert pi_at_checkpoints(tmp_path) == [(10, 0.1), (20, 0.2)] and len(calls) == 1
    kept[30] = "c"
    assert pi_at_checkpoints(tmp_path)[-1] == (30, 0.3) and calls[-1] == [10, 20, 30]
    (tmp_path / PI_CACHE).write_text("{torn")
    assert pi_at_checkpoints(tmp_path, measure=False) == [] and len(calls) == 2  # --no-pi
    assert pi_at_checkpoints(tmp_path) == [(10, 0.1), (20, 0.2), (30, 0.3)] and len(calls) == 3
    assert pi_at_checkpoints(tmp_path, measure=False)[-1] == (30, 0.3)  # read, not measured


def test_final_eval_measures_what_the_run_measured_at_its_end(tiny_config, monkeypatch):
    """Re-measured with the run's own evaluation settings, the last checkpoint gives the
    run's last eval/acc exactly: the weights, the rollout precision the run ended in (an
    incident switched it to FP4 here, the config says bf16 weights) and the task are
    the run's. With more samples it is cached per (checkpoint, samples, seed)."""
    import trainer.incidents
    from bench.lab import final_eval
    from trainer.run import train

    fp4 = {"step": 2, "kind": "set_rollout_quant", "params": {"weight_quant": "fp4"}, "note": ""}
    cfg = tiny_config(train={"steps": 4, "incidents": [fp4]}, eval={"every": 2, "samples": 2})
    train(cfg, progress=False)
    synced = []
    real_sync = trainer.incidents.apply_rollout_quant
    monkeypatch.setattr(
        trainer.incidents,
        "apply_rollout_quant",
        lambda engine, model, quant: synced.append(quant) or real_sync(engine, model, quant),
    )
    run = cfg.resolved_run_dir
    with RunReader(run) as reader:
        steps, accs = reader.scalars("eval/acc")["eval/acc"]
    assert steps[-1] == 4
    final_eval.measure([run], samples=2, seed=cfg.eval.seed)
    assert final_eval.final_accuracy(run, 2, cfg.eval.seed) == (4, accs[-1])
    assert synced == ["fp4"]  # the precision the run ended in, not the config's
    assert final_eval.final_accuracy(run) is None  # not measured with FINAL_SAMPLES yet
    final_eval.measure([run], samples=6, seed=7)
    step, acc = final_eval.final_accuracy(run, 6, 7)
    assert step == 4 and 0.0 <= acc <= 1.0 and acc * 6 * 16 == pytest.approx(round(acc * 96))


def test_a_fork_continues_from_its_checkpoint_with_another_seed(tiny_config):
    """remediation-noise's fork: the copy stands as the run stood at the checkpoint (no
    stop, no later step once resumed), and resumed with another seed it reruns the
    later steps on other prompts and samples."""
    import dataclasses

    from bench.detection import lab
    from bench.remediation.noise import FORK_SEED, fork
    from trainer.run import train

    cfg = tiny_config(train={"steps": 4})
    train(cfg, progress=False)
    run = cfg.resolved_run_dir
    forked = run.with_name("fork")
    fork(run, forked, 2)
    assert lab.finished(run) and not lab.finished(forked)
    assert sorted(p.name for p in (forked / "checkpoints").iterdir()) == ["step_000002.pt"]
    again = dataclasses.replace(cfg, seed=cfg.seed + FORK_SEED, run_dir=str(forked))
    train(again, resume=True, progress=False)
    assert lab.finished(forked)
    with RunReader(run) as a, RunReader(forked) as b:
        sa, va = a.scalars("reward/mean")["reward/mean"]
        sb, vb = b.scalars("reward/mean")["reward/mean"]
        assert sa.tolist() == sb.tolist() == [1, 2, 3, 4]
        assert va[:2].tolist() == vb[:2].tolist()  # the steps before the fork are its own
        ra, rb = (r.scalars("response/length_mean")["response/length_mean"][1] for r in (a, b))
    assert (va[2:] != vb[2:]).any() or (ra[2:] != rb[2:]).any()  # other prompts, samples
    with pytest.raises(UserError, match="no checkpoint at step 3"):
        fork(run, run.with_name("f3"), 3)


def test_an_interrupted_lab_run_is_resumed_not_taken_as_finished(tmp_path):
    """The lab runner skips finished runs: a run stopped by Ctrl-C or SIGTERM records a
    stop event too, and must be resumed, not skipped (nor scored at its last checkpoint)."""
    from bench.detection import lab

    mon = Monitor(tmp_path / "r")
    mon.log(0, {"reward/mean": 0.5})
    mon.event("stop", {"reason": "interrupted", "step": 0})
    mon.close()
    assert not lab.finished(tmp_path / "r")
    mon = Monitor(tmp_path / "r", resume=True)
    mon.log(1, {"reward/mean": 0.5})
    mon.event("stop", {"reason": "completed", "step": 1})
    mon.close()
    assert lab.finished(tmp_path / "r")


def _finished_run(run_dir: Path, acc: float, rollback: bool = False) -> None:
    """A finished run of 30 steps evaluated every 10, with a rollback at step 20 or none."""
    with Monitor(run_dir) as mon:
        for step in range(30):
            mon.log(step, {"reward/mean": 0.5, **({"eval/acc": acc} if step % 10 else {})})
            if rollback and step == 20:
                mon.event("rollback", {"step": 20, "to_step": 10})
        mon.event("stop", {"reason": "completed"})


def test_a_budget_run_without_a_rollback_stands_in_for_the_default_one(tmp_path):
    """The default's folder is read first; where it lacks a run, the `--budget` run stands
    in only if it took no rollback (with one, the default run would differ); with
    `--budget` itself, its own folder alone."""
    from bench.remediation.cli import _on_run

    redo, budget = tmp_path / "runs-remediation-redo", tmp_path / "runs-remediation"
    _finished_run(budget / "a/seed1", 0.4)
    _finished_run(budget / "b/seed1", 0.4, rollback=True)
    _finished_run(budget / "c/seed1", 0.4, rollback=True)
    _finished_run(redo / "c/seed1", 0.5)
    assert _on_run(Path("a/seed1"), redo, budget) == budget / "a/seed1"
    assert _on_run(Path("b/seed1"), redo, budget) is None
    assert _on_run(Path("c/seed1"), redo, budget) == redo / "c/seed1"
    assert _on_run(Path("b/seed1"), budget, budget) == budget / "b/seed1"
    assert _on_run(Path("d/seed1"), redo, budget) is None


def test_the_twin_is_the_stable_run_with_remediation_else_without(tmp_path):
    """The default's arm folder may lack stable runs: the twin falls back to the stable
    run without remediation; where both exist, the one with remediation is the twin."""
    from bench.remediation.cli import _twin

    off, on = tmp_path / "runs", tmp_path / "runs-remediation"
    _finished_run(off / "stable_base/seed1", 0.40)
    _finished_run(on / "stable_base/seed1", 0.45)
    rel = Path("stable_base/seed1")
    assert _twin({}, rel, [on / rel, off / rel]).last_eval == 0.45
    assert _twin({}, rel, [None, off / rel]).last_eval == 0.40
    rel2 = Path("stable_base/seed2")
    assert _twin({}, rel2, [on / rel2, off / rel2]) is None
    # with remediation but no action, the same evaluations: one run, whose final accuracy
    # was measured (32 responses per prompt) on the run without remediation only
    _finished_run(off / rel2, 0.40)
    _finished_run(on / rel2, 0.40)
    (off / rel2 / "checkpoints").mkdir()
    (off / rel2 / "checkpoints" / "step_000029.pt").touch()
    final = {"step": 29, "acc": 0.42, "samples": 32, "seed": 4321}
    (off / rel2 / "final_eval.json").write_text(json.dumps(final))
    twin = _twin({}, rel2, [on / rel2, off / rel2])
    assert twin.run == "stable_base/seed2" and (twin.final_acc, twin.final_measured) == (0.42, True)


def test_remediation_tables_pool_with_the_bound_of_the_incident_undone(tmp_path):
    """Two tables written by the benchmark's own writer pool into per-config verdicts; the
    'incident undone' column judges the stable twin as a remediation would be judged; a
    pair in two tables and a file that is not a table are one message each."""
    from bench.remediation import cli as remediation
    from bench.remediation import pool as remediation_pool

    def arm(collapsed, final, actions=()):
        return Arm("r", collapsed, 50 if collapsed else None, final, 0.6, actions=list(actions))

    act = [
        {"step": 40, "proposed": 40, "kind": "set_rollout_quant", "params": {}}
        | {"status": "applied", "detail": "", "reason": "precision dropped"}
    ]
    first = [  # the twin ends 0.40, the run without remediation 0.50: undoing it loses
        judge(Pair("fp4_no_is", 1, False, arm(False, 0.50), arm(False, 0.43, act), 0.40)),
        judge(Pair("stale8x", 1, False, arm(True, 0.0), arm(False, 0.52, act), 0.55)),
        judge(Pair("stable_base", 1, True, arm(False, 0.55), arm(False, 0.55), 0.55)),
    ]
    second = [
        judge(Pair("fp4_no_is", 2, False, arm(False, 0.40), arm(False, 0.47, act), 0.48)),
        judge(Pair("stable_base", 2, True, arm(False, 0.50), arm(False, 0.50, act), 0.50)),
    ]
    remediation.write(first, "first", tmp_path / "a.md")
    remediation.write(second, "second", tmp_path / "b.md")
    undone = "| incident pairs on which undoing the incident (its stable twin) would be worse |"
    assert f"{undone} 1/2 |" in (tmp_path / "a.md").read_text()
    rows = remediation_pool.load([tmp_path / "a.json", tmp_path / "b.json"])
    fp4 = remediation_pool.summarise([r for r in rows if r["config"] == "fp4_no_is"])
    assert (fp4["pairs"], fp4["worse"], fp4["twin_worse"], fp4["incident_pairs"]) == (2, 1, 1, 2)
    assert fp4["gap_mean"] == pytest.approx(0.0)  # -7 and +7 points
    out = tmp_path / "pooled.md"
    remediation_pool.write(rows, (3, 10), "pool", out)
    pooled = json.loads(out.with_suffix(".json").read_text())
    assert (pooled["all"]["collapsing"], pooled["all"]["rescued"]) == (1, 1)
    assert pooled["all"]["twin_worse"] == 1 and pooled["all"]["incident_pairs"] == 3
    assert pooled["stable_runs_with_an_action"] == 1 and pooled["stable_runs"] == 2
    assert "| **all** | 5 | 1 | 1/1 | 1/1 | 1/5 |" in out.read_text()
    again = remediation_pool.load([out.with_suffix(".json")])  # the pooled table pools again
    assert remediation_pool.summarise(again) == remediation_pool.summarise(rows)
    with pytest.raises(UserError, match="disjoint"):
        remediation_pool.load([tmp_path / "a.json", tmp_path / "a.json"])
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="not a `minirl bench remediation` table"):
        remediation_pool.load([tmp_path / "bad.json"])
