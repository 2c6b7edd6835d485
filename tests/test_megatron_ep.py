"""Expert parallel 2 of Megatron's MoE on 2 CPU processes (torchrun, gloo), with the
project's weight conversion and Routing Replay: each rank holds 4 of the 8 experts,
tokens reach the other rank's experts through Megatron's allgather dispatcher, and the
log-probs, routes, replayed log-probs and router gradients equal the whole transformers
model's on each rank's batch: the parallel forward and backward that the engine's expert
parallel builds on (trainer/engines/megatron/parallel.py; its update:
tests/test_megatron_parallel.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")

from trainer.models import ModelConfig, build_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def test_expert_parallel_2_matches_transformers_live_and_replayed(tmp_path):
    ckpt = build_tiny_checkpoint(ModelConfig(seed=5), tmp_path / "ckpt")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += [str(ROOT / "tests" / "megatron_ep_worker.py"), str(ckpt), str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        r = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert r["local_experts"] == 4
        assert r["live_max_abs"] < 1e-5 and r["same_routes"]
        assert r["replay_max_abs"] < 1e-5 and r["replay_changed"] > 1e-3
        assert r["router_grad_norm"] > 0
        assert r["router_grad_max_abs"] < 1e-4 * r["router_grad_norm"]
