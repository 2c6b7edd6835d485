"""`minirl bench speed`: the quick mode end to end on the tiny model (TRL and vLLM rows
left out: they have their own environment and tests), the paired-bootstrap statistic
against hand-derived values, and the fail-fast checks before any long work."""

from __future__ import annotations

import json
import math
import os
import re
import time

import pytest

from bench.speed import cli as speed
from bench.speed.stats import median_ci, median_ratio_ci
from bench.speed.vs_trl import TRL_VENV
from core.errors import UserError
from trainer.config import dump_config


def test_median_ratio_is_the_ratio_of_medians_minus_one():
    # medians 3 and 2 -> +50 %; with every pair resampled the interval contains it
    on, off = [1.0, 3.0, 4.0, 3.0, 9.0], [2.0, 2.0, 1.0, 5.0, 2.0]
    est, lo, hi = median_ratio_ci(on, off, reps=500)
    assert est == pytest.approx(0.5, abs=1e-12)
    assert lo <= est <= hi


def test_constant_ratio_has_a_zero_width_interval():
    # every pair costs exactly 2 % more: every bootstrap sample says 2 %
    off = [0.5, 0.9, 1.3, 0.7, 2.0, 1.1]
    on = [1.02 * x for x in off]
    est, lo, hi = median_ratio_ci(on, off, reps=300)
    assert (est, lo, hi) == pytest.approx((0.02, 0.02, 0.02), abs=1e-12)


def test_bootstrap_interval_covers_a_known_overhead():
    # 40 noisy pairs whose true ratio is 1.10: the interval must contain +10 % and
    # exclude 0 (an off-by-one in the pairing would blur it into noise)
    import numpy as np

    rng = np.random.default_rng(1)
    load = rng.uniform(0.5, 2.0, 40)  # shared by both arms of a pair
    off = (load * rng.normal(1.0, 0.02, 40)).tolist()
    on = (1.10 * load * rng.normal(1.0, 0.02, 40)).tolist()
    est, lo, hi = median_ratio_ci(on, off)
    assert lo < 0.10 < hi and lo > 0.0 and lo <= est <= hi


def test_paired_median_and_its_interval():
    est, lo, hi = median_ci([0.01, 0.05, 0.03, -0.02, 0.04])
    assert est == pytest.approx(0.03, abs=1e-15)
    assert -0.02 <= lo <= est <= hi <= 0.05  # a median of resamples stays within the data
    assert median_ci([0.02] * 7) == pytest.approx((0.02, 0.02, 0.02), abs=1e-15)
    with pytest.raises(ValueError):
        median_ci([])


def test_unpaired_samples_are_refused():
    with pytest.raises(ValueError, match="paired"):
        median_ratio_ci([1.0, 2.0], [1.0])


def test_missing_trl_environment_fails_before_any_work(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="--setup-trl"):
        speed.main(["--quick", "--trl-python", str(tmp_path / "nope" / "python")])
    assert time.perf_counter() - t0 < 5  # no cold start, no engines


def test_bad_repetition_counts_are_user_errors():
    with pytest.raises(UserError, match="must be >= 1"):
        speed.main(["--quick", "--skip", "trl", "--pairs", "0"])
    with pytest.raises(UserError, match="multiple of 1000"):
        speed.main(["--quick", "--skip", "trl", "--load-steps", "1500"])


def _run_speed(cfg, tmp_path, flags: str):
    """`minirl bench speed` on the tiny run's config with `flags`; (its YAML file, the
    report path)."""
    path, out = tmp_path / "tiny.yaml", tmp_path / "speed.md"
    path.write_text(dump_config(cfg))
    assert speed.main([str(path), *flags.split(), "--out", str(out)]) == 0
    return path, out


def test_quick_mode_writes_every_part(tiny_config, tmp_path):
    flags = "--quick --skip trl --skip vllm --pairs 3 --load-steps 1000 --threads 1"
    path, out = _run_speed(tiny_config(), tmp_path, flags)
    text = out.read_text()
    assert f"Command: `minirl bench speed {path}" in text
    assert "load average" in text and "at start" in text and "at end" in text
    for title in ("1. Diagnostics overhead", "3. Rollout throughput", "4. Run store"):
        assert title in text
    assert "2. Trainer step vs TRL" not in text  # skipped
    # the diagnostics arms: off must really record fewer scalars than on
    rows = dict(re.findall(r"^\| (on|off) \|.*\| (\d+) \|$", text, flags=re.M))
    assert set(rows) == {"on", "off"} and int(rows["off"]) < int(rows["on"])
    overhead = re.search(r"\*\*wall ([+-][\d.]+) % \[([+-][\d.]+), ([+-][\d.]+)\]\*\*", text)
    assert overhead, text
    est, lo, hi = map(float, overhead.groups())
    assert lo <= est <= hi and all(math.isfinite(x) for x in (est, lo, hi))
    # PyTorch engine rows only (vLLM skipped), and the long store was really read back
    assert "| PyTorch fp32 |" in text and "| vLLM" not in text
    assert "1,000-step × 80-metric store" in text
    # every raw timing beside the page, both arms of every pair
    raw = json.loads(out.with_suffix(".json").read_text())
    pairs = raw["results"]["diagnostics"]["rows"]
    assert len(pairs["true"]) == len(pairs["false"]) == 3
    assert raw["command"].startswith("minirl bench speed ")


@pytest.mark.skipif(
    not os.environ.get("MINIRL_TEST_TRL") or not (TRL_VENV / "bin" / "python").is_file(),
    reason="opt-in (MINIRL_TEST_TRL=1): needs bench/.venv-trl (`minirl bench speed "
    "--setup-trl`) and about two minutes",
)
def test_trl_part_on_the_tiny_model(tiny_config, tmp_path):
    cfg = tiny_config()
    _, out = _run_speed(
        cfg, tmp_path, "--quick --skip diagnostics --skip vllm --skip store --threads 1"
    )
    text = out.read_text()
    row = re.search(
        r"^\| TRL [\d.]+ GRPOTrainer [^|]*\| ([\d.]+) \| ([\d.]+) \| 1\.00 \| 1\.00 \| "
        r"([\d.]+) \|",
        text,
        flags=re.M,
    )
    assert row, text
    wall, cpu, length = map(float, row.groups())
    assert wall > 0 and cpu > 0
    assert 1 <= length <= cfg.sampling.max_new_tokens  # TRL honoured max_completion_length
    tc = cfg.train
    per_update = tc.prompts_per_step * cfg.sampling.n // tc.mini_batches  # one rollout, N updates
    expected = f"per_device_train_batch_size={per_update}, steps_per_generation={tc.mini_batches}"
    assert expected in text
