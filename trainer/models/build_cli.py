"""`minirl build-model`: write a tiny random-initialised checkpoint + tokenizer.

    minirl build-model --arch qwen3_moe --out ckpt/tiny [--set hidden_size=96 --set seed=1]

Each `--set key=value` overrides one `ModelConfig` field, converted to the field's type;
unknown keys and bad values are errors. It builds weights only: no training.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

from monitor.errors import UserError
from trainer.models.config import ARCHS, ModelConfig


def parse_overrides(pairs: list[str]) -> dict[str, object]:
    """['k=v', ...] -> {field: typed value} for ModelConfig; rejects unknown keys."""
    hints = typing.get_type_hints(ModelConfig)
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep:
            raise UserError(f"--set {pair!r}: expected key=value")
        if key not in fields:
            raise UserError(f"--set {key}: unknown model field; known: {', '.join(sorted(fields))}")
        kind = hints[key]
        try:
            if kind is bool:
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                out[key] = raw.lower() in ("true", "1")
            elif kind in (int, float):
                out[key] = kind(raw)
            else:
                out[key] = raw
        except ValueError:
            raise UserError(f"--set {key}={raw!r}: not a valid {kind.__name__}") from None
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="minirl build-model", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=ARCHS, default="qwen3_moe")
    parser.add_argument("--out", required=True, help="checkpoint directory to write")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        cfg = ModelConfig(**{"arch": args.arch, **parse_overrides(args.set)})
    except ValueError as err:
        raise UserError(f"model config: {err}") from None

    from trainer.models.build import build_tiny_checkpoint

    out = build_tiny_checkpoint(cfg, args.out)
    print(f"wrote {cfg.arch} checkpoint to {out}")
    return 0
