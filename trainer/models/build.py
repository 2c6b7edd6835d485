"""Build a tiny random-initialised checkpoint directory, and load a policy from one.

A checkpoint directory is what every engine loads: the transformers weights and config
(`save_pretrained`, safetensors), the character tokenizer (`tokenizer.json`), and
`minirl_model.json`, the `ModelConfig` it was built from. No hub access anywhere.
This module does not train and does not know about engines' numerics beyond a dtype.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn

from core.errors import UserError
from trainer.models.config import ModelConfig
from trainer.models.tokenizer import build_char_tokenizer

MODEL_CARD = "minirl_model.json"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _quiet(transformers) -> None:
    """The trainer draws its own progress bar; transformers' weight-loading bars would
    interleave with it (a process-wide setting, as transformers offers no other)."""
    transformers.utils.logging.disable_progress_bar()


def build_tiny_checkpoint(cfg: ModelConfig, out_dir: str | Path, init_device: str = "cpu") -> Path:
    """Write a random-initialised model of `cfg` plus its tokenizer into `out_dir`.

    Deterministic: the same cfg (including seed) writes the same weights, initialised on
    `init_device` whatever torch's default device (the CPU: the same on every machine).
    """
    import transformers

    _quiet(transformers)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    tokenizer = build_char_tokenizer()
    hf_cfg = cfg.hf_config(
        vocab_size=len(tokenizer),
        pad_id=tokenizer.pad_token_id,
        bos_id=tokenizer.bos_token_id,
        eos_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]), torch.device(init_device):
        torch.manual_seed(cfg.seed)
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32)
    if model.get_output_embeddings().weight.shape[0] != len(tokenizer):
        raise AssertionError("model vocab differs from the tokenizer's")  # vLLM needs them equal
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / MODEL_CARD).write_text(json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
    return out


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """'fp32' | 'bf16' | 'fp16' | a torch dtype -> the torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise UserError(f"dtype={dtype!r}: allowed are {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_policy(
    path: str | Path,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[nn.Module, object]:
    """(model in eval mode with `dtype` parameters on `device`, tokenizer) from a
    checkpoint dir; device None keeps transformers' choice (torch's default device)."""
    import transformers

    _quiet(transformers)
    path = Path(path)
    if not (path / "config.json").is_file():
        raise UserError(
            f"{path}: not a model checkpoint (no config.json); see `minirl build-model`"
        )
    if not (path / "tokenizer.json").is_file():
        raise UserError(f"{path}: no tokenizer.json beside the model")
    # on `device` also what transformers creates while loading (buffers, missing keys)
    placed = {} if device is None else {"device_map": torch.device(device)}
    with nullcontext() if device is None else torch.device(device):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=resolve_dtype(dtype), **placed
        )
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    if model.get_output_embeddings().weight.shape[0] != len(tokenizer):
        raise UserError(
            f"{path}: model vocab {model.get_output_embeddings().weight.shape[0]} != "
            f"tokenizer size {len(tokenizer)}"
        )
    model.eval()
    return model, tokenizer
