"""Tiny checkpoints: the builder writes a directory that transformers loads, with a
character tokenizer whose size is the model's vocabulary; `minirl build-model` errors."""

import json

import pytest
import torch

from core.typed_config import parse_overrides
from trainer.models import ModelConfig, build_tiny_checkpoint, load_policy
from trainer.models.tokenizer import ALPHABET, SPECIALS

TEXT = "12+34=46\nWhat is (7*8)-x? It's 56; ok!"


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3"])
def test_builder_writes_a_loadable_checkpoint(tmp_path, arch):
    cfg = ModelConfig(arch=arch)
    out = build_tiny_checkpoint(cfg, tmp_path / arch)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "minirl_model.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "minirl_model.json").read_text())["arch"] == arch

    model, tok = load_policy(out, "fp32")
    assert model.config.model_type == arch
    assert model.get_output_embeddings().weight.shape[0] == len(tok) == len(SPECIALS + ALPHABET)
    assert model.config.vocab_size == len(tok)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert model.config.eos_token_id == tok.eos_token_id
    if arch == "qwen3_moe":
        assert model.config.num_experts == 8 and model.config.num_experts_per_tok == 2
        assert model.config.head_dim == 32 and model.config.moe_intermediate_size % 32 == 0

    ids = torch.tensor([tok(TEXT)["input_ids"]])
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok)) and torch.isfinite(logits).all()

    bf16, _ = load_policy(out, "bf16")
    assert next(bf16.parameters()).dtype == torch.bfloat16


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    a, _ = load_policy(build_tiny_checkpoint(ModelConfig(seed=5), tmp_path / "a"))
    b, _ = load_policy(build_tiny_checkpoint(ModelConfig(seed=5), tmp_path / "b"))
    c, _ = load_policy(build_tiny_checkpoint(ModelConfig(seed=6), tmp_path / "c"))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.embed_tokens.weight"], sc["model.embed_tokens.weight"])
    # the router is random too (all-zero router weights would make routing a tie)
    assert sa["model.layers.0.mlp.gate.weight"].std() > 0.01


def test_tokenizer_round_trips_one_token_per_character(tmp_path):
    _, tok = load_policy(build_tiny_checkpoint(ModelConfig(arch="qwen3"), tmp_path))
    ids = tok(TEXT)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(TEXT) + 1
    assert tok.decode(ids, skip_special_tokens=True) == TEXT
    bare = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert bare == ids[1:]
    assert tok.convert_ids_to_tokens(bare[:3]) == ["1", "2", "+"]
    every = "".join(ALPHABET)
    assert tok.decode(tok(every, add_special_tokens=False)["input_ids"]) == every
    assert tok.decode([tok.eos_token_id]) == "<eos>"
    with pytest.raises(Exception, match=r"(?i)unk"):
        tok("é")  # outside the alphabet: fails loudly, no silent id


def test_config_rejects_sizes_the_cpu_kernels_cannot_run():
    with pytest.raises(ValueError, match="head_dim=16"):
        ModelConfig(head_dim=16)
    with pytest.raises(ValueError, match="multiples of 32"):
        ModelConfig(expert_intermediate_size=48)
    with pytest.raises(ValueError, match="top_k=9"):
        ModelConfig(top_k=9)
    with pytest.raises(ValueError, match="arch"):
        ModelConfig(arch="gpt2")
    assert parse_overrides(["hidden_size=96", "norm_topk_prob=false", "arch=qwen3"]) == {
        "hidden_size": 96,
        "norm_topk_prob": False,
        "arch": "qwen3",
    }


def test_build_model_cli(tmp_path, capsys):
    """Through the real dispatcher, in-process (a subprocess would re-import torch)."""
    from app.cli import main

    out = tmp_path / "m"
    assert main(["build-model", "--arch", "qwen3", "--out", str(out), "--set", "seed=2"]) == 0
    assert json.loads((out / "minirl_model.json").read_text())["seed"] == 2
    assert main(["build-model", "--out", str(tmp_path / "x"), "--set", "hiden_size=96"]) == 2
    err = capsys.readouterr().err
    assert "'model.hiden_size' is unknown (did you mean 'hidden_size'?)" in err
    assert "Traceback" not in err
    assert not (tmp_path / "x").exists()
