"""Advice for verl at a breakdown: verl's real `Tracking` (0.9.1, tracking.py loaded by file
path: `import verl` would pull Ray) logs a collapsing run through the `minirl` backend,
with the config verl passes it composed from verl's own `ppo_trainer` Hydra config. The
stored advice names the last healthy `global_step_N` folder (measured, not the latest
before the alert), and its overrides are accepted by verl's config parser (Hydra compose
on verl's config directory) with the values the fix asks for. `minirl watch --checkpoints`
gives the same advice from the run's TensorBoard log."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

import pytest

from app.cli import main
from core.controls import RunControls
from monitor.store.reader import RunReader

hydra = pytest.importorskip("hydra")
OmegaConf = pytest.importorskip("omegaconf").OmegaConf
pytest.importorskip("orjson")
SPEC = importlib.util.find_spec("verl")
if SPEC is None or not SPEC.submodule_search_locations:
    pytest.skip("verl is not installed (pip install --no-deps verl)", allow_module_level=True)
VERL = Path(SPEC.submodule_search_locations[0])
CONFIG_DIR = VERL / "trainer" / "config"
CHECKPOINTS = (10, 20, 30, 40, 50, 60)
HEALTHY = 30
"""The last checkpoint with the best held-out score and no precursor open: the KL rises
from step 38 and the evaluation at 40 has fallen already."""
STEPS = 70


def tracking_module():
    spec = importlib.util.spec_from_file_location("verl_tracking", VERL / "utils" / "tracking.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides)


def collapsing_rows():
    """verl's metric names: the reward climbs, the training-inference KL jumps at 38, the
    held-out accuracy (every 10 steps) falls from 40 and the reward from 45."""
    evals = {10: 0.30, 20: 0.45, 30: 0.55, 40: 0.35, 50: 0.15, 60: 0.05}
    for step in range(1, STEPS + 1):
        reward = min(step, 44) / 60 if step < 45 else max(0.02, 44 / 60 - (step - 44) * 0.06)
        row = {
            "critic/score/mean": reward,
            "actor/grad_norm": 1.0 + 0.01 * (step % 3),
            "actor/lr": 1e-6,
            "actor/entropy": 0.6,
            "rollout_corr/kl": 0.3 if step >= 38 else 1e-3 * (1 + 0.05 * (step % 4)),
        }
        if step in evals:
            row["val-core/gsm8k/acc/mean@1"] = evals[step]
        yield step, row


@pytest.fixture
def verl_run(tmp_path, monkeypatch, capsys):
    """A collapsing verl run logged through the minirl backend; returns (run dir, ckpt dir,
    what it printed)."""
    from monitor.integrations.verl import register

    ckpt, run = tmp_path / "checkpoints", tmp_path / "runs" / "verl"
    for step in CHECKPOINTS:
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("60")
    composed = compose(
        [
            f"trainer.default_local_dir={ckpt}",
            "data.train_batch_size=64",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        ]
    )
    config = OmegaConf.to_container(composed, resolve=True)  # what RayPPOTrainer.fit passes
    monkeypatch.setenv("MINIRL_RUN_DIR", str(run))
    tracking = tracking_module()
    register(tracking.Tracking)
    logger = tracking.Tracking("attach", "exp", default_backend=["minirl"], config=config)
    for step, row in collapsing_rows():
        logger.log(row, step=step)
    logger.finish()
    return run, ckpt, capsys.readouterr().out


def advice_of(run: Path):
    with RunReader(run) as reader:
        return [a for a in reader.actions() if a.kind == "advice"]


def test_advice_names_the_last_healthy_checkpoint_and_verl_accepts_it(verl_run):
    run, ckpt, printed = verl_run
    advices = advice_of(run)
    assert advices, "no advice at the breakdown"
    first = advices[0]
    assert first.status == "applied" and first.source == "policy"
    assert first.detail.startswith("advice only, nothing in the run was changed")
    assert first.params["step"] == HEALTHY  # not 40 nor 50, the latest before the alert
    assert first.params["checkpoint"] == str(ckpt / f"global_step_{HEALTHY}")
    assert len(advices) == 1  # the later alerts of the same breakdown repeat nothing
    with RunReader(run) as reader:
        critical = [a for a in reader.alerts() if a.severity == "critical"]
        assert not [a for a in reader.alerts() if a.detector == "length_normalised"]
        stored = RunControls.stored(reader.meta().controls)
        assert stored == RunControls()  # advice moved no knob: the backend's defaults
    assert first.alert_id in {a.id for a in critical}

    cfg = compose(first.params["overrides"])  # verl's parser: an unknown key would raise
    assert cfg.trainer.resume_mode == "resume_from_path"
    assert cfg.trainer.resume_from_path == str(ckpt / f"global_step_{HEALTHY}")
    # the KL breakdown of an uncorrected run: verl's rollout correction on, token TIS cap 5
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert float(cfg.algorithm.rollout_correction.rollout_is_threshold) == 5.0
    assert f"last healthy checkpoint: {ckpt / f'global_step_{HEALTHY}'}" in printed
    command = next(line for line in printed.splitlines() if "resume with:" in line)
    args = shlex.split(command.split("resume with:")[1])
    assert args[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert args[-len(first.params["overrides"]) :] == first.params["overrides"]


def test_each_fix_is_verl_keys_that_verl_accepts(tmp_path):
    """Every fix the policy can give, translated and composed with verl's real config."""
    from monitor.integrations.verl_advice import controls_from_config, to_overrides
    from monitor.store.records import ActionDraft

    config = OmegaConf.to_container(
        compose(["data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=16"]),
        resolve=True,
    )
    controls = controls_from_config(config)
    assert controls.mini_batches == 4 and controls.lr == 1e-6
    assert controls.is_policy == "none" and controls.eps_high == 0.2
    drafts = [
        ActionDraft("set_clip", {"enabled": True, "eps_low": 0.2, "eps_high": 0.27}, "r"),
        ActionDraft("set_is_policy", {"policy": "icepop", "band": [0.5, 5.0]}, "r"),
        ActionDraft("set_lr_cap", {"lr": 5e-7}, "r"),
        ActionDraft("set_mini_batches_cap", {"n": 2}, "r"),
    ]
    fix = to_overrides(drafts, controls, config)
    assert fix.notes == []
    cfg = compose(fix.overrides)
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.27, 3.0)
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == "0.5_5"  # a band, not 0.55
    assert actor.optim.lr == 5e-7 and actor.ppo_mini_batch_size == 32
    tis = to_overrides(
        [ActionDraft("set_is_policy", {"policy": "token_tis", "cap": 2.5}, "r")],
        RunControls(),
        None,
    )
    assert compose(tis.overrides).algorithm.rollout_correction.rollout_is_threshold == 2.5


def test_watch_with_checkpoints_gives_the_same_advice(verl_run, tmp_path, capsys):
    """The JSONL file verl's `file` logger would write, followed by `minirl watch
    --checkpoints`: the same last healthy checkpoint, with the lr read from the log."""
    import json

    _, ckpt, _ = verl_run
    log = tmp_path / "verl.jsonl"
    with log.open("w") as f:
        for step, row in collapsing_rows():
            f.write(json.dumps({"step": step, "data": row}) + "\n")
    out = tmp_path / "watched"
    argv = ["watch", str(log), "--out", str(out), "--once", "--checkpoints", str(ckpt)]
    capsys.readouterr()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    advices = advice_of(out)
    assert advices and advices[0].params["step"] == HEALTHY
    assert f"global_step_{HEALTHY}" in printed and "resume with:" in printed
    cfg = compose(advices[0].params["overrides"])
    assert cfg.trainer.resume_from_path == str(ckpt / f"global_step_{HEALTHY}")


LENGTH_NORMALISED_TWO_EPOCHS = [
    "data.train_batch_size=64",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_epochs=2",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
]
"""GRPO's length-normalised loss, two PPO epochs over 4 mini-batches: 8 updates per rollout."""


def test_a_length_normalised_loss_is_read_off_verls_config(tmp_path, monkeypatch):
    """verl's `loss_agg_mode=seq-mean-token-mean` divides each response's loss by its
    length: the backend logs the settings it reads off the config verl passes, so the
    setup rule `length_normalised` warns at step 1 (the default token-mean run of
    `verl_run` has no such warning); two PPO epochs over 4 mini-batches are 8 updates."""
    from monitor.detectors.rules import CLIP_ON, LENGTH_NORM, MINI_BATCHES
    from monitor.integrations.verl import register

    config = OmegaConf.to_container(compose(LENGTH_NORMALISED_TWO_EPOCHS), resolve=True)
    run = tmp_path / "run"
    monkeypatch.setenv("MINIRL_RUN_DIR", str(run))
    tracking = tracking_module()
    register(tracking.Tracking)
    logger = tracking.Tracking("attach", "exp", default_backend=["minirl"], config=config)
    for step, row in collapsing_rows():
        if step > 5:
            break
        logger.log(row, step=step)
    logger.finish()
    with RunReader(run) as reader:
        got = reader.scalars([MINI_BATCHES, CLIP_ON, LENGTH_NORM])
        setup = [a for a in reader.alerts() if a.detector == "length_normalised"]
    assert {k: v[1].tolist() for k, v in got.items()} == {
        MINI_BATCHES: [8.0] * 5,
        CLIP_ON: [1.0] * 5,
        LENGTH_NORM: [1.0] * 5,
    }
    assert [(a.step, a.severity) for a in setup] == [(1, "warning")]


def test_the_length_norm_and_epochs_fixes_are_verl_keys(tmp_path):
    """The fixes of a length-normalised, two-epoch run, composed with verl's config: the
    loss back to token-mean, and n updates per rollout as n mini-batches of one epoch."""
    from monitor.integrations.verl_advice import controls_from_config, to_overrides
    from monitor.store.records import ActionDraft

    base = LENGTH_NORMALISED_TWO_EPOCHS
    config = OmegaConf.to_container(compose(base), resolve=True)
    controls = controls_from_config(config)
    assert controls.mini_batches == 8 and controls.length_norm
    drafts = [
        ActionDraft("set_length_norm", {"enabled": False}, "r"),
        ActionDraft("set_mini_batches_cap", {"n": 2}, "r"),
    ]
    fix = to_overrides(drafts, controls, config)
    assert fix.notes == []
    actor = compose(base + fix.overrides).actor_rollout_ref.actor
    assert actor.loss_agg_mode == "token-mean"
    assert (actor.ppo_epochs, actor.ppo_mini_batch_size) == (1, 32)


def _write_jsonl(path: Path, steps: range = range(1, STEPS + 1)) -> Path:
    """The JSONL file verl's `file` logger writes, for `collapsing_rows` (appended)."""
    import json

    with path.open("a") as f:
        for step, row in collapsing_rows():
            if step in steps:
                f.write(json.dumps({"step": step, "data": row}) + "\n")
    return path


def test_watch_with_verls_hydra_config_logs_its_settings_and_advises_in_its_numbers(
    tmp_path, capsys, monkeypatch
):
    """`minirl watch --verl-config` with the `.hydra/config.yaml` Hydra writes (composed,
    interpolations unresolved): the settings verl's in-process backend logs are logged
    with each step, so `length_normalised` warns at step 1; at the breakdown the advice
    looks in the config's `trainer.default_local_dir`, finds the last healthy checkpoint
    (the setup warning open since step 1 says how the run is configured, not that it is
    unwell), and is composed by verl's parser. The watch, resumed without the option,
    keeps the stored config."""
    from monitor.detectors.rules import CLIP_ON, LENGTH_NORM, MINI_BATCHES

    ckpt = tmp_path / "checkpoints"
    for step in CHECKPOINTS:
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    base = [*LENGTH_NORMALISED_TWO_EPOCHS, f"trainer.default_local_dir={ckpt}"]
    hydra_file = tmp_path / "outputs" / ".hydra" / "config.yaml"
    hydra_file.parent.mkdir(parents=True)
    hydra_file.write_text(OmegaConf.to_yaml(compose(base)))
    assert "${" in hydra_file.read_text()  # as Hydra writes it: interpolations unresolved
    log, out = tmp_path / "verl.jsonl", tmp_path / "watched"
    argv = ["watch", str(log), "--out", str(out), "--once"]
    _write_jsonl(log, range(1, 31))
    assert main([*argv, "--verl-config", str(hydra_file)]) == 0
    _write_jsonl(log, range(31, STEPS + 1))
    capsys.readouterr()
    assert main(argv) == 0  # resumed: no --verl-config, the stored one
    printed = capsys.readouterr().out
    with RunReader(out) as reader:
        got = reader.scalars([MINI_BATCHES, CLIP_ON, LENGTH_NORM])
        setup = [a for a in reader.alerts() if a.detector == "length_normalised"]
    assert {k: (len(v[0]), set(v[1].tolist())) for k, v in got.items()} == {
        MINI_BATCHES: (STEPS, {8.0}),  # 4 mini-batches × 2 epochs
        CLIP_ON: (STEPS, {1.0}),
        LENGTH_NORM: (STEPS, {1.0}),
    }
    assert [(a.step, a.severity) for a in setup] == [(1, "warning")]
    (advice,) = advice_of(out)
    assert advice.params["step"] == HEALTHY and f"global_step_{HEALTHY}" in printed
    actor = compose(base + advice.params["overrides"]).actor_rollout_ref.actor
    assert actor.loss_agg_mode == "token-mean"  # the fix, in verl's key
    # verl's default folder is relative to where verl was started: not found here, said so
    default = tmp_path / "default.yaml"
    default.write_text(OmegaConf.to_yaml(compose(LENGTH_NORMALISED_TWO_EPOCHS)))
    monkeypatch.chdir(tmp_path)  # where verl was not started
    elsewhere = ["watch", str(log), "--out", str(tmp_path / "w2"), "--once"]
    assert main([*elsewhere, "--verl-config", str(default)]) == 0
    printed = capsys.readouterr().out
    assert "no checkpoint folder checkpoints/" in printed and "--checkpoints DIR" in printed
    assert "resume_from_path" not in printed


def test_verl_config_files_read_as_verl_ran_them(tmp_path, capsys):
    """The W&B layout (every key `{value: ...}`, `_wandb` beside them) reads as the dump it
    wraps; absolute interpolations resolve as OmegaConf's, inside strings too; a file
    that is no verl config is one line and exit 2, with nothing stored."""
    import json

    from monitor.integrations.verl_config import read_verl_config

    config = OmegaConf.to_container(compose(LENGTH_NORMALISED_TWO_EPOCHS), resolve=True)
    wandb = tmp_path / "files" / "config.yaml"
    wandb.parent.mkdir()
    wrapped = {"_wandb": {"value": {"cli_version": "0.19"}}}
    wrapped.update({k: {"desc": None, "value": v} for k, v in config.items()})
    wandb.write_text(json.dumps(wrapped))
    assert read_verl_config(wandb) == config
    hydra = OmegaConf.to_container(compose(LENGTH_NORMALISED_TWO_EPOCHS), resolve=False)
    hydra["data"]["train_batch_size"] = "${actor_rollout_ref.actor.ppo_mini_batch_size}"
    dump = tmp_path / "config.yaml"
    dump.write_text(OmegaConf.to_yaml(OmegaConf.create(hydra)))
    read = read_verl_config(dump)
    assert read["data"]["train_batch_size"] == 16  # the int it points at
    assert read["trainer"]["default_local_dir"] == config["trainer"]["default_local_dir"]
    not_verl = tmp_path / "train.yaml"
    not_verl.write_text("train:\n  lr: 1e-6\n")
    log = _write_jsonl(tmp_path / "verl.jsonl", range(1, 5))
    for bad, message in ((not_verl, "no actor_rollout_ref"), (tmp_path / "none.yaml", "none.yaml")):
        out = tmp_path / f"run_{bad.stem}"
        capsys.readouterr()
        assert (
            main(["watch", str(log), "--out", str(out), "--once", "--verl-config", str(bad)]) == 2
        )
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not out.exists()


def test_import_with_verls_config_logs_its_settings(tmp_path, capsys):
    """`minirl import --verl-config`, to take apart a finished verl run: the same settings
    with every step as a watch logs, so `length_normalised` is in the imported run's
    alerts from step 1; the store says which config was read."""
    from monitor.detectors.rules import MINI_BATCHES

    config = tmp_path / "config.yaml"
    config.write_text(OmegaConf.to_yaml(compose(LENGTH_NORMALISED_TWO_EPOCHS)))
    log, out = _write_jsonl(tmp_path / "verl.jsonl"), tmp_path / "imported"
    assert main(["import", str(log), "--out", str(out), "--verl-config", str(config)]) == 0
    assert f"imported {STEPS} steps" in capsys.readouterr().out  # the log's own, counted
    with RunReader(out) as reader:
        steps, values = reader.scalars(MINI_BATCHES)[MINI_BATCHES]
        setup = [(a.step, a.detector) for a in reader.alerts() if a.severity == "warning"]
        provenance = reader.meta().config
    assert len(steps) == STEPS and set(values.tolist()) == {8.0}
    assert setup[0] == (1, "length_normalised")
    assert provenance["verl_config"] == str(config.resolve())
