"""Console logs: what verl's console logger and Hugging Face's Trainer print, imported
with `minirl import` and followed with `minirl watch`. The lines come from the real
printers (verl's aggregate_logger.py loaded by file path, transformers' PrinterCallback),
not from our own idea of their format; the hand-written lines test what surrounds them."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from monitor.importers import guess_format, parse
from monitor.importers.console import parse_console
from monitor.store.reader import RunReader
from monitor.watch.sources import ConsoleSource


def _series(run: Path) -> dict[str, dict[int, float]]:
    with RunReader(run) as reader:
        return {
            name: dict(zip(s.tolist(), v.tolist(), strict=True))
            for name, (s, v) in reader.scalars(reader.metric_names()).items()
        }


def _printed(fn, *calls) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for args in calls:
            fn(*args)
    return out.getvalue()


def _verl_logger():
    spec = importlib.util.find_spec("verl")  # the package, without running its __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed (pip install --no-deps verl)")
    pytest.importorskip("torch")  # aggregate_logger.py imports it
    path = Path(spec.submodule_search_locations[0]) / "utils" / "logger" / "aggregate_logger.py"
    module_spec = importlib.util.spec_from_file_location("verl_aggregate_logger", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.LocalLogger(print_to_console=True)


def test_verl_console_log_imports_under_our_names(tmp_path, capsys):
    logger = _verl_logger()
    rows = [
        (
            {
                "actor/entropy": np.float64(0.61 - 0.01 * step),
                "actor/grad_norm": np.float32(0.5 * step),
                "critic/score/mean": 0.25 + 0.01 * step,
                "response_length/mean": np.int64(100 + step),
                "rollout_corr/kl": float("nan") if step == 3 else 1e-3,
                "note": "a string is not printed by verl",
            },
            step,
        )
        for step in (1, 2, 3)
    ]
    text = _printed(logger.log, *rows)
    assert "np.float64(" in text  # numpy 2 scalars print wrapped: the case to read
    log = tmp_path / "verl_run.log"
    noise = "Training Progress:  10%|#  | 1/10 [00:03<00:27]\nTraceback (most recent call last):\n"
    lines = text.splitlines()
    log.write_text(
        "2025-10-01 INFO Started a local Ray instance.\n"
        + f"(TaskRunner pid=3121) {lines[0]}\n"
        + noise
        + "\x1b[36m(TaskRunner pid=3121) \x1b[0m"  # colour codes right before step:
        + "\n".join(lines[1:])
        + "\n"
    )
    assert guess_format(log) == "console"

    capsys.readouterr()
    assert main(["import", str(log), "--out", str(tmp_path / "run")]) == 0
    assert "imported 3 steps" in capsys.readouterr().out
    series = _series(tmp_path / "run")
    assert series["policy/entropy"] == pytest.approx({1: 0.60, 2: 0.59, 3: 0.58})
    assert series["optim/grad_norm"] == pytest.approx({1: 0.5, 2: 1.0, 3: 1.5})
    assert series["reward/mean"] == pytest.approx({1: 0.26, 2: 0.27, 3: 0.28})
    assert series["response/len_mean"] == {1: 101.0, 2: 102.0, 3: 103.0}
    assert series["mismatch/kl_k1"][1] == pytest.approx(1e-3) and math.isnan(
        series["mismatch/kl_k1"][3]
    )
    assert "note" not in series


def test_hugging_face_trainer_printed_logs(tmp_path):
    callbacks = pytest.importorskip("transformers.trainer_callback")
    printer, state = callbacks.PrinterCallback(), callbacks.TrainerState()
    logs = [
        {"loss": 0.0123, "grad_norm": 0.51, "learning_rate": 1e-6, "reward": 0.25, "epoch": 0.01},
        {"loss": float("nan"), "grad_norm": float("inf"), "reward": 0.3, "epoch": 0.02},
        {"eval_loss": 0.4, "eval_reward": 0.33, "epoch": 0.02},
        {"loss": 0.02, "grad_norm": -0.0, "reward": 0.35, "epoch": 0.03},
        {"train_runtime": 600.0, "train_samples_per_second": 1.0, "train_loss": 0.1},
    ]
    text = _printed(printer.on_log, *[(None, state, None, dict(row)) for row in logs])
    log = tmp_path / "grpo.out"
    log.write_text(
        "{'learning_rate': 1e-06, 'beta': 0.0}\n"  # a printed config is not a log
        + " 10%|#  | 10/100 [01:00<09:00,  6.0s/it]"  # tqdm's line, then a log on it
        + text
    )
    parsed = parse_console(log)
    assert sorted(parsed.rows) == [1, 2, 3]  # train logs numbered in order
    assert parsed.rows[1]["loss"] == pytest.approx(0.0123)
    assert math.isnan(parsed.rows[2]["loss"]) and parsed.rows[2]["grad_norm"] == math.inf
    assert parsed.rows[2]["eval_reward"] == pytest.approx(0.33)  # joins the log before it
    assert parsed.rows[3]["reward"] == pytest.approx(0.35)
    assert not any("train_runtime" in row for row in parsed.rows.values())
    assert parsed.garbage == 0


def test_unreadable_metric_lines_are_garbage_and_prose_is_not(tmp_path):
    log = tmp_path / "run.txt"
    log.write_text(
        "step:x - actor/entropy:0.5\n"  # a metric line with a step that is not one
        "step:4 - actor/entropy:0.5 - no separator here - critic/score/mean:abc\n"
        '{"step": 5, "data": {"actor/entropy": 0.4}}\n'
        '{"step": 6, "data": \n'  # a JSON line cut short
        "an ordinary line, with {braces} and step: words\n"
        "{'not': 'a log'}\n"
    )
    parsed = parse(log, "console")
    assert parsed.rows == {4: {"actor/entropy": 0.5}, 5: {"actor/entropy": 0.4}}
    assert parsed.garbage == 2 and parsed.examples[0].startswith("line 1: step:x")
    assert parsed.non_numeric == 2  # the item without ':' and the value 'abc'


def test_a_console_log_without_metrics_is_refused_in_one_line(tmp_path, capsys):
    log = tmp_path / "empty.log"
    log.write_text("nothing but prose\nTraceback (most recent call last):\n")
    assert main(["import", str(log), "--out", str(tmp_path / "run")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no metric lines" in err and "Traceback" not in err


def test_watch_follows_a_growing_console_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("{'loss': '0.5', 'grad_norm': '1.0'}\nstep:7 - actor/entropy:0.5 - actor/gr")
    source = ConsoleSource(log)
    first = source.poll()
    assert first.rows == {1: {"loss": 0.5, "grad_norm": 1.0}}  # the cut line waits
    with log.open("a") as f:
        f.write("ad_norm:2.0\n{'loss': '0.4', 'grad_norm': '0.9'}\n")
    restarted = ConsoleSource(log, source.state())  # a restart keeps the HF log count
    second = restarted.poll()
    assert second.rows == {
        7: {"actor/entropy": 0.5, "actor/grad_norm": 2.0},
        2: {"loss": 0.4, "grad_norm": 0.9},
    }


def test_a_truncated_console_log_numbers_its_logs_anew(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("{'loss': '0.5'}\n{'loss': '0.4'}\n")
    source = ConsoleSource(log)
    assert sorted(source.poll().rows) == [1, 2]
    log.write_text("{'loss': '0.3'}\n")  # the trainer restarted and truncated its log
    assert source.poll().rows == {1: {"loss": 0.3}}
