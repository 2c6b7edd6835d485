"""The shared config loader's limits (issue 19, hole 5): hostile YAML and out-of-range
numbers are one UserError naming the key or the line, never a traceback or a crash at
training start. Fuzzed with hypothesis (bench/reliability/fuzz_inputs.py) at a few
hundred inputs here; `minirl bench reliability` runs thousands."""

from __future__ import annotations

import textwrap

import pytest

from core.errors import UserError
from core.typed_config import from_data, parse_overrides, read_yaml_mapping, yaml_load
from monitor.config import MonitorConfig


def _load_monitor_yaml(tmp_path, text: str) -> MonitorConfig:
    path = tmp_path / "monitor.yaml"
    path.write_text(textwrap.dedent(text))
    return from_data(MonitorConfig, read_yaml_mapping(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: " + "[" * 5000 + "]" * 5000, "nested deeper than 100 levels"),  # was RecursionError
        ("".join("  " * i + f"k{i}:\n" for i in range(3000)), "nested deeper than 100 levels"),
        ("seed: " + "9" * 5000, "an integer of 5000 digits"),  # was ValueError
        ("store:\n  busy_timeout_s: 1\n  busy_timeout_s: 2\n", "duplicate key 'busy_timeout_s'"),
    ],
)
def test_hostile_yaml_is_one_line_naming_the_file_and_line(tmp_path, text, expected):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        read_yaml_mapping(path)
    message = str(err.value)
    assert expected in message and str(path) in message and " at line " in message
    assert "\n" not in message


def test_duplicate_keys_were_silently_last_wins(tmp_path):
    text = "detectors:\n  grad_norm:\n    z: 8\n    z: 9\n"
    with pytest.raises(UserError, match=r"duplicate key 'z' \(first given at line 3\)"):
        _load_monitor_yaml(tmp_path, text)
    # merge keys may still be overridden (YAML's own rule), and plain YAML still loads
    assert yaml_load("base: &b {x: 1}\nd:\n  <<: *b\n  x: 2\n")["d"] == {"x": 2}


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        # was accepted, then crashed at training start (deque(maxlen=2**64))
        ("detectors.grad_norm.window=18446744073709551616", "at most 2^53"),
        ("detectors.grad_norm.sigma_floor=.nan", "sigma_floor': nan is invalid"),
        ("detectors.grad_norm.warmup=-1", "warmup': -1 is invalid; allowed: a number >= 0"),
        ("store.stale_after_s=-.inf", "stale_after_s': -inf is invalid; allowed: a finite"),
        ("store.busy_timeout_s=.inf", "busy_timeout_s': inf is invalid"),
        ("detectors.grad_norm.z=" + "9" * 400, "at most 2^53"),  # float(10**400) overflowed
    ],
)
def test_numbers_out_of_range_are_refused_naming_the_key(override, expected):
    with pytest.raises(UserError, match=expected.replace("^", r"\^").replace("(", r"\(")):
        MonitorConfig.from_dict(parse_overrides([override]))


def test_the_sign_rule_follows_the_default_not_the_section():
    # a field whose default is 0 or absent may be negative (a know-nothing reward of -1)
    cfg = MonitorConfig.from_dict({"detectors": {"reward_collapse": {"zero": -1.0}}})
    assert cfg.detectors.reward_collapse.zero == -1.0
    assert MonitorConfig.from_dict({"detectors": {"grad_norm": {"window": 2**53}}})


def test_a_huge_override_is_shown_cut_to_one_short_line():
    with pytest.raises(UserError) as err:
        parse_overrides(["seed=" + "9" * 5000])
    assert len(str(err.value)) < 300 and "an integer of 5000 digits" in str(err.value)
