"""`minirl build-model`: write a tiny random-initialised checkpoint + tokenizer.

    minirl build-model --arch qwen3_moe --out ckpt/tiny [--set hidden_size=96 --set seed=1]

Each `--set key=value` overrides one `ModelConfig` field, read and type-checked by the
shared config loader (core/typed_config.py), so unknown keys and bad values are the
same one-line errors as in a run config. It builds weights only: no training.
"""

from __future__ import annotations

import argparse

from core.typed_config import add_set_option, from_data, parse_overrides
from trainer.models.config import ARCHS, ModelConfig


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="minirl build-model", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=ARCHS, default="qwen3_moe")
    parser.add_argument("--out", required=True, help="checkpoint directory to write")
    add_set_option(parser, "set", "override a ModelConfig field, e.g. --set hidden_size=96")
    args = parser.parse_args(argv)
    cfg = from_data(ModelConfig, parse_overrides(args.set, {"arch": args.arch}), "model")

    from trainer.models.build import build_tiny_checkpoint

    out = build_tiny_checkpoint(cfg, args.out)
    print(f"wrote {cfg.arch} checkpoint to {out}")
    return 0
