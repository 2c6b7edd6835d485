"""The run config: YAML round trip, dotted overrides, and every kind of user error as one
clear UserError naming the key path, the bad value and what is allowed."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Literal

import pytest

from app import cli
from core.errors import UserError
from core.typed_config import config_hash, from_data, yaml_dump, yaml_load
from trainer.config import RunConfig, TrainConfig, config_to_dict, dump_config, load_config
from trainer.tasks import TaskConfig

ROOT = Path(__file__).resolve().parents[1]


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_round_trip():
    cfg = load_config(None)
    assert cfg == RunConfig()
    assert yaml_load(dump_config(cfg)) == config_to_dict(cfg)


def test_file_and_overrides_round_trip(tmp_path):
    path = _yaml(
        tmp_path,
        """
        name: off-policy-4x
        train:
          steps: 30
          mini_batches: 4
          routing_replay: R3
        optim:
          lr: 1e-3          # YAML 1.1 would read a string here
        loss:
          band: [0.4, 3]
        task:
          kind: add_trace
        sampling:
          max_new_tokens: 40
        """,
    )
    cfg = load_config(path, ["loss.clip=false", "train.steps=60", "eval.mode=greedy"])
    assert cfg.name == "off-policy-4x"
    assert cfg.train == TrainConfig(steps=60, mini_batches=4, routing_replay="R3")
    assert cfg.optim.lr == 1e-3 and isinstance(cfg.optim.lr, float)
    assert cfg.loss.band == (0.4, 3.0) and cfg.loss.clip is False
    assert cfg.eval.mode == "greedy"
    assert cfg.model == RunConfig().model  # untouched sections keep their defaults
    again = tmp_path / "resolved.yaml"
    again.write_text(dump_config(cfg))
    assert load_config(again) == cfg


def test_strings_that_look_like_other_scalars_round_trip(tmp_path):
    """YAML 1.2 scalars: `on`/`no` stay strings; the dumper quotes `1e3` so it stays one."""
    for text in ("on", "no", "1e3", "null", "true", "3.0", "~"):
        assert yaml_load(yaml_dump({"name": text})) == {"name": text}
    cfg = dataclasses.replace(RunConfig(), name="1e3")
    path = tmp_path / "c.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path).name == "1e3"
    assert load_config(_yaml(tmp_path, "name: yes\n")).name == "yes"


def test_override_forms():
    cfg = load_config(
        None,
        [
            "run_dir=/tmp/x",
            "run_dir=null",  # the last one wins
            "cold_start.betas=[0.8, 0.9]",
            "monitor.remediation.max_rollbacks=5",
            "train.routing_replay=none",
        ],
    )
    assert cfg.run_dir is None and cfg.resolved_run_dir == Path("runs/minirl")
    assert cfg.cold_start.betas == (0.8, 0.9)
    assert cfg.monitor.remediation.max_rollbacks == 5
    assert cfg.train.routing_replay == "none"


def test_empty_file_is_the_defaults(tmp_path):
    assert load_config(_yaml(tmp_path, "# nothing\n")) == RunConfig()
    assert load_config(_yaml(tmp_path, "train:\n")) == RunConfig()


def _error(tmp_path, text: str = "", overrides=()) -> str:
    path = _yaml(tmp_path, text) if text else None
    with pytest.raises(UserError) as info:
        load_config(path, list(overrides))
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # unknown keys, with the section's keys and a suggestion
        ("trian: {steps: 3}\n", "config key 'trian' is unknown (did you mean 'train'?)"),
        ("train: {step: 3}\n", "'train.step' is unknown (did you mean 'steps'?)"),
        # wrong types, against the dataclass type hints
        ("train: {steps: ten}\n", "'train.steps': expected an integer, got 'ten' (str)"),
        ("train: {steps: 1.5}\n", "'train.steps': expected an integer, got 1.5 (float)"),
        ("train: {steps: true}\n", "'train.steps': expected an integer, got True (bool)"),
        ("loss: {clip: 1}\n", "'loss.clip': expected true or false, got 1 (int)"),
        ("name: 7\n", "'name': expected a string, got 7 (int)"),
        ("train: 5\n", "'train': expected a mapping of keys, got 5 (int)"),
        ("optim: {lr: [1]}\n", "'optim.lr': expected a number, got [1] (list)"),
        # Literal
        ("train: {routing_replay: R4}\n", "expected one of 'none', 'R2', 'R3', got 'R4'"),
        # tuples: length and item type
        ("loss: {band: [1]}\n", "'loss.band': expected a list of 2 items"),
        ("cold_start: {betas: [0.9, x]}\n", "'cold_start.betas[1]': expected a number"),
        # Optional
        ("eval: {max_new_tokens: x}\n", "'eval.max_new_tokens': expected an integer or null"),
        # invalid values, raised by each dataclass's __post_init__
        (
            "train: {mini_batches: 3}\n",
            "'train.mini_batches': 3 is invalid; allowed: an "
            "integer >= 1 that divides prompts_per_step=16",
        ),
        ("eval: {samples: 0}\n", "'eval.samples': 0 is invalid; allowed: an integer >= 1"),
        ("task: {heldout_frac: 1.5}\n", "'task.heldout_frac': 1.5 is invalid"),
        ("loss: {eps_low: 2}\n", "config key 'loss': "),  # LossConfig's own message
        ("engine: {kv_cache_bytes: 5}\n", "config key 'engine': kv_cache_bytes=5: must be"),
        ("model: {head_dim: 48}\n", "config key 'model': head_dim=48"),
        ("monitor: {nope: 1}\n", "config key 'monitor.nope' is unknown"),
        # checks that span sections
        ("sampling: {n: 1}\n", "'sampling.n': 1 is invalid; allowed: an integer >= 2"),
        (
            "task: {kind: add_trace}\n",
            "'sampling.max_new_tokens': 16 is invalid; allowed: "
            ">= 22, the longest add_trace target at digits=2 plus EOS",
        ),
        (
            "eval: {max_new_tokens: 3}\n",
            "'eval.max_new_tokens': 3 is invalid; allowed: null or >= 4",
        ),
        # the file itself
        ("- a\n- b\n", "expected a mapping of sections, got list"),
        ("train: {steps: 3\n", "not valid YAML at line 2"),
    ],
)
def test_config_file_errors_are_one_clear_line(tmp_path, text, expected):
    message = _error(tmp_path, text)
    assert expected in message, message


@pytest.mark.parametrize(
    ("text", "overrides", "expected"),
    [
        # an unknown key, a malformed override, a value where a section is
        ("", ["train.lr=1"], "'train.lr' is unknown"),
        ("", ["train.steps"], "expected KEY=VALUE"),
        ("", ["=3"], "expected KEY=VALUE"),
        ("", ["train..steps=1"], "expected KEY=VALUE"),
        ("", ["train.steps=[1"], "value is not valid YAML"),
        ("train: {steps: 3}\n", ["train.steps.x=1"], "'train.steps' is a value, not a section"),
        ("", ["train.steps.x=1"], "'train.steps': expected an integer, got {'x': 1} (dict)"),
    ],
)
def test_override_errors_are_one_clear_line(tmp_path, text, overrides, expected):
    message = _error(tmp_path, text, overrides)
    assert expected in message, message


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


def test_lr_scale_by_hand():
    assert TrainConfig(steps=5).lr_scale(3) == 1.0
    warm = TrainConfig(steps=20, warmup_steps=4)
    assert [warm.lr_scale(s) for s in range(6)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1, 1])
    cos = TrainConfig(steps=11, lr_schedule="cosine", min_lr_ratio=0.1)
    assert cos.lr_scale(0) == pytest.approx(1.0)
    assert cos.lr_scale(5) == pytest.approx(0.55)  # half way: 0.1 + 0.9 * 0.5
    assert cos.lr_scale(10) == pytest.approx(0.1)
    lin = TrainConfig(steps=11, lr_schedule="linear", min_lr_ratio=0.1)
    assert lin.lr_scale(2) == pytest.approx(0.1 + 0.9 * 0.8)


def test_config_hash_is_stable_and_sensitive():
    a = RunConfig()
    assert config_hash(a) == config_hash(RunConfig())
    assert config_hash(a) != config_hash(dataclasses.replace(a, seed=1))
    code = "from trainer.tasks import TaskConfig; from core.typed_config import config_hash;"
    out = subprocess.run(
        [sys.executable, "-c", code + "print(config_hash(TaskConfig()))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert out.stdout.strip() == config_hash(TaskConfig())  # not salted per process


@dataclasses.dataclass(frozen=True)
class _Leaf:
    path: Path = Path("x")
    tags: dict[str, int] = dataclasses.field(default_factory=dict)
    items: tuple[int, ...] = ()
    mode: Literal[1, 2] | None = None


@dataclasses.dataclass(frozen=True)
class _Root:
    required: int
    leaf: _Leaf = _Leaf()


def test_generic_machinery_on_other_types():
    got = from_data(
        _Root,
        {"required": 1, "leaf": {"path": "a/b", "tags": {"x": 2}, "items": [1, 2, 3], "mode": 2}},
    )
    assert got == _Root(1, _Leaf(Path("a/b"), {"x": 2}, (1, 2, 3), 2))
    with pytest.raises(UserError, match="config key 'required' is required"):
        from_data(_Root, {})
    with pytest.raises(UserError, match=r"'leaf.tags.x': expected an integer"):
        from_data(_Root, {"required": 1, "leaf": {"tags": {"x": "y"}}})
    with pytest.raises(UserError, match="expected one of 1, 2 or null, got True"):
        from_data(_Root, {"required": 1, "leaf": {"mode": True}})  # True == 1, but a bool


def test_cli_exit_code_for_a_bad_config(tmp_path, monkeypatch, capsys):
    """The CLI's error path with the real loader: a stand-in command module that only
    loads its config (the shape of `minirl train CONFIG`)."""
    bad = _yaml(tmp_path, "train: {mini_batches: 0}\n")
    module = types.ModuleType("_fake_train")
    module.main = lambda argv: load_config(argv[0], []) and 0
    monkeypatch.setitem(sys.modules, "_fake_train", module)
    monkeypatch.setitem(cli.COMMANDS, "fake-train", ("_fake_train", "test"))
    assert cli.main(["fake-train", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minirl fake-train: error: config key 'train.mini_batches': 0")
    assert "Traceback" not in err


@pytest.mark.skipif(
    importlib.util.find_spec("trainer.train") is None, reason="trainer/train.py not landed yet"
)
def test_minirl_train_bad_yaml_exits_2(tmp_path):
    bad = _yaml(tmp_path, "train: {routing_replay: R9}\n")
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "train", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "train.routing_replay" in out.stderr and "R9" in out.stderr
    assert "Traceback" not in out.stderr
