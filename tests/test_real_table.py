"""The public runs' verdicts: caught needs a lead of 10 steps and no page 60 steps early."""

from __future__ import annotations

from bench.detection.corpus import Run
from bench.detection.monitors import Fired
from bench.detection.real_table import judge, totals


def run(label: str, onset: int | None, grad: list[float]) -> Run:
    stream = [(i, {"optim/grad_norm": g}) for i, g in enumerate(grad)]
    return Run(
        "real/x", "real", "report", stream, meta={"repository": "a/b"}, label=label, onset=onset
    )


def test_caught_needs_the_lead_and_no_page_long_before_the_onset():
    r = run("collapse", 100, [1.0] * 120)
    assert judge(r, [Fired(90, "warning", "d", "optimisation")])["caught"] is True
    assert judge(r, [Fired(91, "warning", "d", "optimisation")])["caught"] is False
    early_page = [Fired(39, "critical", "breakdown", "staleness")]
    assert judge(r, early_page)["caught"] is False
    assert judge(r, [Fired(40, "critical", "breakdown", "staleness")])["caught"] is True
    assert judge(r, [])["caught"] is False


def test_a_catch_is_near_the_onset_when_its_first_alert_is_at_most_60_steps_ahead():
    r = run("collapse", 100, [1.0] * 120)
    near = judge(r, [Fired(40, "warning", "d", "optimisation")])
    far = judge(r, [Fired(39, "warning", "d", "optimisation")])
    missed = judge(r, [Fired(95, "warning", "d", "optimisation")])
    assert (near["caught"], far["caught"], near["lead"], far["lead"]) == (True, True, 60, 61)
    t = totals([near, far, missed])
    assert (t["collapses"], t["caught"], t["caught_near"]) == (3, 2, 1)


def test_stable_runs_whose_gradient_exploded_are_counted_apart():
    held = judge(run("stable", None, [1.0] * 50 + [999.0]), [Fired(3, "critical", "x", "y")])
    boom = judge(run("stable", None, [1.0] * 50 + [1000.0]), [])
    t = totals([held, boom])
    assert (t["stable_held"], t["stable_held_paged"], t["stable_exploded"]) == (1, 1, 1)
    assert t["warnings_per_100_stable_steps"] == 0.0


def test_the_breakdown_defaults_are_a_point_of_the_swapped_folds_grid():
    """What users get is one of the points the two folds choose among (folds.py)."""
    from bench.detection.folds import FROZEN, GRID, config_for
    from monitor.detectors.config import DetectorsConfig

    assert config_for(**FROZEN) == DetectorsConfig()
    assert all(FROZEN[k] in values for k, values in GRID.items())


def test_a_fold_chooses_an_admissible_point_over_one_that_catches_more():
    from bench.detection.folds import admissible

    base = {"stable_held": 20, "stable_held_paged": 2, "warnings_per_100_stable_steps": 0.5}
    assert admissible(base)
    assert not admissible({**base, "stable_held_paged": 3})
    assert not admissible({**base, "warnings_per_100_stable_steps": 0.51})


def test_a_collapse_is_announced_by_a_health_metric_moving_ten_steps_ahead():
    """With hindsight: the gradient norm tenfold 20 steps before the onset announces it; 5
    steps before does not, nor does a setting (the learning rate) moving, nor a metric the
    detectors do not read."""
    from bench.detection.real_table import announced

    def collapse(moved: int, name: str) -> Run:
        stream = []
        for i in range(120):
            noise = 1.0 + 0.05 * ((i * 7) % 5)  # a small deterministic wobble
            stream.append(
                (
                    i,
                    {
                        name: noise * (10.0 if i >= moved else 1.0),
                        "reward/mean": 0.6 if i < 100 else 0.0,
                    },
                )
            )
        r = Run("real/x", "real", "report", stream, label="collapse", onset=100)
        r.outcome = "reward/mean"
        return r

    assert announced(collapse(80, "optim/grad_norm"))
    assert not announced(collapse(95, "optim/grad_norm"))
    assert announced(collapse(80, "staleness/mask_frac"))
    assert not announced(collapse(80, "optim/lr"))
    assert not announced(collapse(80, "train/step_time"))


def test_the_report_says_whether_fold_a_still_chooses_the_shipped_defaults():
    """When runs added to fold A after the freeze move its choice, the report says so with
    both points' numbers, instead of calling the defaults fold A's choice."""
    from bench.detection.real_table import _frozen_note

    def fold(caught: int, warnings: float) -> dict:
        return {
            "collapses": 20,
            "caught": caught,
            "stable_held": 100,
            "stable_exploded": 2,
            "warnings_per_100_stable_steps": warnings,
        }

    ours = {"tune": fold(2, 0.25), "report": fold(2, 0.07)}
    point = {"extreme": 1000.0, "sharpening_drop": 0.25}
    kept = [
        {"chosen_on": "tune", "point": point, "frozen_is_this_choice": True},
        {"chosen_on": "report", "point": point, "frozen_is_this_choice": True},
    ]
    assert "the point fold A chose (`folds.FROZEN`)" in _frozen_note(ours, kept)
    assert "both folds choose the same point" in _frozen_note(ours, kept)
    moved = {"extreme": 1000.0, "sharpening_drop": 0.0}
    kept[0] = {
        "chosen_on": "tune",
        "point": moved,
        "frozen_is_this_choice": False,
        "chooser_totals": fold(3, 0.46),
        "totals": fold(2, 0.12),
    }
    note = _frozen_note(ours, kept)
    assert "the point fold A chose when they were frozen" in note
    assert "sharpening_drop 0: 3/20 caught there (the defaults: 2)" in note
    assert "0.12 warnings per 100 (the defaults: 0.07)" in note


def test_a_run_is_long_and_rich_with_130_steps_and_four_health_groups_logged():
    """The coverage table's kind: the last step and the health groups a run logs, not the
    number of points (a log every 5 steps is long at step 130)."""
    from bench.detection.real_table import family, long_and_rich

    four = {"optim/grad_norm": 1.0, "policy/entropy": 1.0, "response/len_mean": 9.0}
    four["staleness/mask_frac"] = 0.01
    every_fifth = [(s, four) for s in range(0, 131, 5)]
    assert long_and_rich(Run("real/x", "real", "tune", every_fifth))
    assert not long_and_rich(Run("real/x", "real", "tune", every_fifth[:-1]))  # step 125
    three = [(s, {k: v for k, v in four.items() if k != "policy/entropy"}) for s in range(131)]
    assert not long_and_rich(Run("real/x", "real", "tune", three))
    assert not long_and_rich(Run("real/x", "real", "tune", []))
    assert family("verl (commit 1252cc71), GRPO") == "verl"
    assert family("TRL GRPOTrainer with a LoRA adapter") == "TRL"
    assert family("VIME (slime's metrics, Megatron TP4/CP2)") == "slime"
    assert family("a plain PyTorch GRPO loop (controlled)") == "other"
