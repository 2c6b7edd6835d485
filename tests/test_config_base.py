"""`base:` inheritance of run configs: a recipe = its base + the keys it changes."""

import pytest

from core.errors import UserError
from trainer.config import load_config


def _write(path, text):
    path.write_text(text)
    return path


def test_recipe_merges_over_its_base_key_by_key(tmp_path):
    _write(
        tmp_path / "base.yaml", "seed: 3\ntrain: {steps: 7, mini_batches: 2}\nloss: {clip: true}\n"
    )
    sub = tmp_path / "sub"
    sub.mkdir()
    recipe = _write(
        sub / "r.yaml", "base: ../base.yaml\ntrain: {mini_batches: 4, prompts_per_step: 8}\n"
    )
    cfg = load_config(recipe, ["loss.clip=false"])
    assert cfg.seed == 3  # from the base
    assert cfg.train.steps == 7  # kept from the base's train section
    assert cfg.train.mini_batches == 4  # the recipe's value wins
    assert cfg.loss.clip is False  # the command line wins over both


def test_base_chain_and_cycle(tmp_path):
    _write(tmp_path / "a.yaml", "base: b.yaml\nseed: 1\n")
    _write(tmp_path / "b.yaml", "base: c.yaml\ntrain: {steps: 5}\n")
    _write(tmp_path / "c.yaml", "name: from-c\n")
    cfg = load_config(tmp_path / "a.yaml")
    assert (cfg.name, cfg.seed, cfg.train.steps) == ("from-c", 1, 5)
    _write(tmp_path / "c.yaml", "base: a.yaml\n")
    with pytest.raises(UserError, match="cycle"):
        load_config(tmp_path / "a.yaml")


def test_missing_base_is_a_clear_error(tmp_path):
    recipe = _write(tmp_path / "r.yaml", "base: nowhere.yaml\n")
    with pytest.raises(UserError, match=r"nowhere\.yaml: no such file"):
        load_config(recipe)
