"""Shared fixtures: a tiny, fast run config for end-to-end trainer tests.

The cold start of the tiny config is cached once per test session (a few SFT steps, no
accuracy target), so every trainer test reuses the same checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TINY_RUN: dict[str, Any] = {
    "name": "tiny",
    "seed": 0,
    "checkpoint_every": 2,
    "model": {"arch": "qwen3_moe"},
    # a lenient reward (tests/loop_verifiers.py) so that an untrained model gets a signal
    "task": {
        "kind": "add",
        "digits": 2,
        "heldout_size": 16,
        "verifier": "loop_verifiers:starts_with_digit",
    },
    "cold_start": {"steps": 4, "stop_at_sampled_acc": None, "batch_size": 16},
    "sampling": {"n": 8, "max_new_tokens": 6},
    "engine": {"inference": "torch", "inference_dtype": "bf16"},
    "train": {"steps": 3, "prompts_per_step": 4, "mini_batches": 2, "grad_cosine_every": 1},
    "eval": {"every": 2, "samples": 1, "mode": "sampled"},
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and key in out else value
    return out


@pytest.fixture(scope="session")
def coldstart_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("coldstart-cache")


@pytest.fixture
def tiny_config(tmp_path, coldstart_cache) -> Callable[..., Any]:
    """tiny_config(**sections) -> RunConfig of the tiny run in tmp_path/run, with the
    given sections merged over TINY_RUN (e.g. train={"routing_replay": "R2"})."""
    from trainer.config import config_from_dict

    def make(**sections: Any):
        data = _merge(TINY_RUN, sections)
        data = _merge(
            data,
            {"run_dir": str(tmp_path / "run"), "cold_start": {"cache_dir": str(coldstart_cache)}},
        )
        return config_from_dict(data)

    return make
