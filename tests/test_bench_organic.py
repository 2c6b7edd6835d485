"""The organic remediation benchmark's verdicts on two small stores (no training)."""

import json
from pathlib import Path

import pytest

from bench.remediation import organic
from monitor import Monitor


def _store(path: Path, evals: list[float], remediation_event: bool = False) -> Path:
    mon = Monitor(path)
    for i, acc in enumerate(evals):
        mon.log(10 * i, {"eval/acc": acc})
    if remediation_event:
        mon.event("rollback", {"to_step": 0, "healthy": {"reason": "score 0.24 within noise"}})
    mon.event("stop", {"reason": "completed"})
    mon.close()
    return path


def test_a_run_falling_from_its_start_is_rescued_when_remediation_holds_its_start(tmp_path):
    falling = [0.24, 0.2, 0.12, 0.05, 0.01] + [0.0] * 20  # from its first evaluation on
    off = _store(tmp_path / "off", falling)
    on = _store(tmp_path / "on", [0.24, 0.2] + [0.23, 0.24, 0.25, 0.22] * 5 + [0.23], True)
    pair = organic.read_pair("lr1e-3", 101, off, on)
    assert pair.collapsed_off and not pair.collapsed_on
    assert pair.peak_off == 0.24 and pair.rescued and not pair.worse
    assert pair.rollbacks == ["220 → 0 (score 0.24 within noise)"]
    organic.write([pair], "test", tmp_path / "out.md")
    text = (tmp_path / "out.md").read_text()
    assert "rescued: 1/1" in text and "worse (> 5 points lower with remediation): 0/1" in text


def test_mean_interval_is_students_t():
    m, _, hi = organic.mean_interval([0.1, 0.2, 0.3])
    t975 = 4.302653  # Student t quantile 0.975 at 2 degrees of freedom
    assert m == pytest.approx(0.2) and hi - m == pytest.approx(t975 * 0.1 / 3**0.5)
    assert organic.mean_interval([]) is None
    share = organic.chance_share()
    assert share is None or 0 <= share <= 1


def test_a_run_that_stopped_counts_as_a_collapse_not_rescued(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1\nminirl train: error: mean |Δ| 0.2 > 0.1; stopped\n")
    assert organic.stopped(run) == "minirl train: error: mean \\|Δ\\| 0.2 > 0.1; stopped"
    assert organic.stopped(tmp_path / "none") == "unfinished"
    out = tmp_path / "page.md"
    organic.write([], "cmd", out, [("lr1e-3", 101, organic.stopped(run))])
    page = json.loads(out.with_suffix(".json").read_text())
    assert (page["rescued"], page["collapsing"]) == (0, 1)
    assert page["stopped"][0]["config"] == "lr1e-3" and "rescued: 0/1" in out.read_text()
