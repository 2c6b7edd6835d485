"""The Megatron engine on 2 processes (torchrun, gloo) against the single-process engine:
expert parallel 2 (4 of 8 experts per rank) and data parallel 2 (EP 1) give the same
log π, entropy, routes, losses' gradient norms, cosine and updated weights on the same
batch; checkpoints resume 1 -> 2 and 2 -> 1; and the parallel config keys' errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core")

import megatron_parallel_worker as job

from core.errors import UserError
from trainer.config import load_config
from trainer.engines.config import EngineConfig, MegatronConfig
from trainer.engines.factory import make_training_engine
from trainer.engines.megatron.training import MegatronTrainingEngine, check_sizes
from trainer.models import ModelConfig, build_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "MINIRL_DIST_TIMEOUT": "60"}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_tiny_checkpoint(ModelConfig(seed=5), tmp_path_factory.mktemp("ckpt"))


def _close(a: dict, b: dict, rtol: float, atol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=atol, msg=k)


def _moments(state: dict) -> dict:
    """AdamW's first moment and step count per parameter name."""
    by_name = state["optimizer"]["state"].items()
    return {f"{n}/{k}": s[k] for n, s in by_name for k in ("exp_avg", "step")}


@pytest.mark.parametrize("ep", [2, 1])
def test_two_ranks_update_like_one_and_resume_both_ways(ckpt, tmp_path, ep):
    one = make_training_engine(ckpt, job.config(1), job.OPTIM)
    assert isinstance(one, MegatronTrainingEngine)
    ref = job.updates(one)
    torch.save(one.state_dict(), tmp_path / "one.pt")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += [str(ROOT / "tests" / "megatron_parallel_worker.py"), str(ckpt), str(tmp_path), str(ep)]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    two = torch.load(tmp_path / "two.pt", weights_only=True)

    torch.testing.assert_close(two["logp"], ref["logp"], rtol=0, atol=1e-6)
    torch.testing.assert_close(two["entropy"], ref["entropy"], rtol=0, atol=1e-5)
    assert torch.equal(two["routes"].sort(-1).values, ref["routes"].sort(-1).values)
    for key in ("first", "second"):  # grad norm (before clipping at 0.5) and lr
        assert two[key]["optim/grad_norm"] > 0.5 and two[key]["optim/lr"] == ref[key]["optim/lr"]
        assert two[key]["optim/grad_norm"] == pytest.approx(ref[key]["optim/grad_norm"], rel=1e-5)
    assert 0 < abs(two["cosine"]) < 1 and two["cosine"] == pytest.approx(ref["cosine"], rel=1e-5)
    # the whole model gathered (experts from both ranks under global indices), 2 updates
    state, ref_state = two["state"], ref["state"]
    assert state["lr_scale"] == 0.5 and state["model"].keys() == ref_state["model"].keys()
    # Adam divides by √v: on the odd element whose gradient is near eps, the two ranks'
    # reduction order (relative noise ~1e-7) moves its step by a few 1e-6 (measured up to
    # 4.3e-6 on an AMD EPYC, one element in 16k): 1e-5 is 1 % of one step at lr 1e-3, where
    # a wrong expert, a missed all-reduce or a lost update is off by a whole step or more
    _close(state["model"], ref_state["model"], rtol=1e-5, atol=1e-5)
    _close(_moments(state), _moments(ref_state), rtol=1e-4, atol=1e-7)
    _close(two["hf"], ref["hf"], rtol=1e-5, atol=1e-5)  # what vLLM syncs from

    # resume 1 -> 2 (the job loaded one.pt) and 2 -> 1: one more update each, the same
    resumed = torch.load(tmp_path / "two_resumed.pt", weights_only=True)
    back = make_training_engine(ckpt, job.config(1), job.OPTIM)
    back.load_state_dict(state)
    for engine in (one, back):
        stats = job.one_update(engine, ref["routes"])
        assert stats["optim/grad_norm"] == pytest.approx(
            resumed["stats"]["optim/grad_norm"], rel=1e-4
        )
        _close(engine.state_dict()["model"], resumed["state"]["model"], rtol=1e-4, atol=1e-5)


def test_parallel_config_keys_and_their_errors(ckpt, tmp_path):
    cfg = load_config(
        ROOT / "configs" / "demo.yaml",
        ["engine.training=megatron", "engine.megatron.expert_model_parallel_size=2"],
    )
    assert cfg.engine.megatron == MegatronConfig(expert_model_parallel_size=2)
    errors = {
        "engine.megatron.expert_model_parallel_size=2": (
            "megatron.expert_model_parallel_size=2: only with training=megatron"
        ),
        "engine.megatron.tensor_model_parallel_size=0": "must be a positive integer",
        "engine.megatron.pipeline_model_parallel_size=2": "only 1",
        "engine.megatron.data_parallel_size=2": "unknown",
    }
    for override, message in errors.items():
        training = [] if "only with" in message else ["engine.training=megatron"]
        with pytest.raises(UserError, match=message):
            load_config(ROOT / "configs" / "demo.yaml", [*training, override])

    # (world size, experts, tensor, pipeline, expert parallel)
    with pytest.raises(ValueError, match=r"expert_model_parallel_size=2 \* .* world size 1"):
        check_sizes(1, 8, 1, 1, 2)
    with pytest.raises(ValueError, match="must divide the model's 6 experts"):
        check_sizes(4, 6, 1, 1, 4)
    with pytest.raises(ValueError, match="must divide the world size 3"):
        check_sizes(3, 8, 2, 1, 1)
    check_sizes(4, 8, 1, 1, 2)  # DP 4, expert-DP 2

    sizes = MegatronConfig(expert_model_parallel_size=2)
    megatron = EngineConfig(training="megatron", megatron=sizes)  # one process: too few
    with pytest.raises(UserError, match="--nproc"):
        make_training_engine(ckpt, megatron, job.OPTIM)
    tp = EngineConfig(training="megatron", megatron=MegatronConfig(tensor_model_parallel_size=2))
    with pytest.raises(UserError, match="tensor_model_parallel_size=2: not supported"):
        make_training_engine(ckpt, tp, job.OPTIM)


def test_minirl_train_on_two_ranks_with_expert_parallel_then_resume_in_one(tiny_config, tmp_path):
    """`minirl train --nproc 2` with engine.megatron.expert_model_parallel_size=2 and R3:
    step 1 as one process trains it (same batch, same update); the whole-model
    checkpoint of step 2 resumes in one process and redoes step 3 as the 2 ranks did."""
    from test_distributed import _close as close
    from test_distributed import _finish, _launch, _values, _write_config

    from trainer.run import train

    engine = {"training": "megatron", "megatron": {"expert_model_parallel_size": 2}}
    cfg = tiny_config(engine=engine, train={"routing_replay": "R3"})
    two = tmp_path / "two"
    code, err = _finish(_launch(_write_config(cfg, tmp_path / "tiny.yaml"), two), timeout=200)
    assert code == 0, err
    one_cfg = tiny_config(engine={"training": "megatron"}, train={"routing_replay": "R3"})
    one_step = dataclasses.replace(one_cfg.train, steps=1)
    one = train(dataclasses.replace(one_cfg, train=one_step), progress=False)
    for name in ("optim/loss", "optim/grad_norm", "mismatch/kl_k1", "policy/entropy"):
        a, b = _values(one.run_dir, name)[1], _values(two, name)[1]
        assert close(a, b, 1e-5), (name, a, b)
    assert list(_values(two, "optim/grad_norm")) == [1, 2, 3]

    ckpts = two / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_000002.pt", "step_000003.pt"]
    logged = {n: _values(two, n)[3] for n in ("optim/loss", "optim/grad_norm", "reward/mean")}
    (ckpts / "step_000003.pt").unlink()
    one_cfg = dataclasses.replace(one_cfg, run_dir=str(two))
    resumed = train(one_cfg, resume=True, progress=False)
    assert (resumed.last_step, resumed.stopped) == (3, "completed")
    for name, before in logged.items():
        after = _values(two, name)
        assert list(after) == [1, 2, 3] and close(after[3], before, 1e-4), (name, after, before)
