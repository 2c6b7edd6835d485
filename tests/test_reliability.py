"""The fast cases of `minirl bench reliability` (bench/reliability): real processes, real
signals. A `Monitor` writer SIGKILLed repeatedly while readers poll its store; SIGTERM,
SIGINT and SIGKILL of `minirl dashboard` (no Streamlit server left, port closed);
SIGTERM of `minirl watch`; SIGKILL of `minirl train` before its first checkpoint and
its documented recovery. The other phases, the signals of `minirl train` and the full
disk on a tmpfs run in the benchmark (`slow`)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bench.reliability import kill_train, kill_writer, signals
from bench.reliability.fuzz_store import write_template


def test_a_monitor_writer_killed_repeatedly_loses_nothing_and_readers_never_lock(tmp_path):
    result = kill_writer.run(tmp_path, kills=4, readers=2)
    assert result.kills == 4 and result.steps > 100
    assert (result.gaps, result.incomplete, result.wrong_values) == (0, 0, 0)
    assert result.integrity_failures == 0
    assert result.reads > 20 and result.lock_errors == 0 and not result.other_read_errors


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    write_template(root / "a", steps=20)
    return root


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_the_dashboard_leaves_no_server_behind(runs, tmp_path, sig):
    # was: SIGTERM left the Streamlit server running and listening
    result = signals.dashboard(runs, sig, tmp_path / "dashboard.log")
    assert result["ok"], result
    assert result["children"] >= 1 and result["children_left"] == 0


def test_watch_stops_on_sigterm_with_its_port_closed_and_its_record_closed(tmp_path):
    result = signals.watch(tmp_path, signal.SIGTERM, tmp_path / "watch.log")
    assert result["ok"], result


def test_sigkill_of_train_before_its_first_checkpoint_then_resume(tmp_path):
    cache = tmp_path / "cache"
    baselines = {"plain": _baseline(tmp_path, cache)}
    import random

    phase, rng = "before the first checkpoint", random.Random(0)
    t = kill_train.trial(phase, tmp_path, cache, baselines, rng)
    assert t.ok, t


def _baseline(work: Path, cache: Path) -> dict:
    from core.typed_config import yaml_dump

    config = work / "plain.yaml"
    config.write_text(yaml_dump(kill_train.tiny_config(cache)))
    run = work / "baseline"
    code = kill_train._child(config, run, work / "marker", work / "baseline.log").wait()
    assert code == 0, (work / "baseline.log").read_text()[-2000:]
    return kill_train.scalars(run)


@pytest.mark.slow
@pytest.mark.parametrize("phase", kill_train.PHASES)
def test_sigkill_of_train_in_every_phase(tmp_path, phase):
    import random

    cache = tmp_path / "cache"
    plain = _baseline(tmp_path, cache)
    baselines = {"plain": plain}
    if phase == "during a rollback":
        baselines = kill_train.run_baselines(tmp_path / "b", cache)
    t = kill_train.trial(phase, tmp_path, cache, baselines, random.Random(1))
    assert t.ok, t


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_train_stops_cleanly_on_a_signal_and_resumes(tmp_path, sig):
    from core.typed_config import yaml_dump

    config = tmp_path / "run.yaml"
    config.write_text(yaml_dump(kill_train.tiny_config(tmp_path / "cache")))
    result = signals.train(config, tmp_path / "run", sig, tmp_path / "train.log")
    assert result["ok"], result
