"""CUDA: the trainer on a real GPU (`make test-gpu`, in an environment with a CUDA torch
and, for the vLLM tests, the official vLLM: `pip install -e '.[train,vllm,dev]'`).
Skipped where torch sees no GPU; the device-generic code paths are tested on the CPU in
tests/test_device.py and tests/test_vllm_gpu.py."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.checkpoints import list_checkpoints, load_checkpoint
from trainer.engines.base import SamplingParams
from trainer.engines.device import resolve_device
from trainer.engines.placement import Placement
from trainer.engines.torch.inference import TorchInferenceEngine
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.engines.update import UpdateSettings
from trainer.models import ModelConfig, build_tiny_checkpoint
from trainer.run import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PROMPTS = [[1, 5, 6, 7, 8], [1, 9, 10], [1, 11, 12, 13]]
PARAMS = SamplingParams(n=4, max_new_tokens=8)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_tiny_checkpoint(ModelConfig(seed=11), tmp_path_factory.mktemp("ckpt"))


def test_auto_is_the_current_cuda_device():
    assert resolve_device("auto") == torch.device("cuda", torch.cuda.current_device())


def test_engines_live_on_the_gpu_and_agree_with_the_cpu(ckpt):
    gpu = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cuda"))
    cpu = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cpu"))
    infer = TorchInferenceEngine(ckpt, Placement("cuda", "fp32"))
    assert {p.device.type for p in (*gpu.model.parameters(), *infer.model.parameters())} == {"cuda"}
    ro = infer.generate(PROMPTS, PARAMS, seed=0)
    assert ro.input_ids.device.type == "cuda" and ro.routing is not None
    again = infer.generate(PROMPTS, PARAMS, seed=0)  # a seeded CUDA generator
    assert torch.equal(ro.input_ids, again.input_ids) and torch.equal(ro.logp, again.logp)
    args = (ro.input_ids, ro.attention_mask, ro.response_mask)
    logp, _, routed = gpu.forward_logprobs(*args, replay=ro.routing, record=True)
    ref, _, _ = cpu.forward_logprobs(*(t.cpu() for t in args), replay=ro.routing.cpu())
    assert logp.device.type == "cuda" and routed.device.type == "cuda"
    torch.testing.assert_close(logp.detach().cpu(), ref.detach(), rtol=0, atol=1e-3)
    # μ (fp32, same weights) and π agree under R3 up to kernel order
    mask = ro.response_mask > 0
    assert float((logp.detach() - ro.logp)[mask].abs().max()) < 1e-3
    stats = gpu.step(-(logp * ro.response_mask).sum())
    assert math.isfinite(stats["optim/grad_norm"])
    infer.update_weights(gpu.model)  # verified by its probe (exact numerics)


def test_checkpoint_round_trip_on_the_gpu(ckpt, tmp_path):
    eng = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cuda"))
    ids = torch.randint(3, 99, (2, 10), device="cuda")
    mask = torch.zeros(2, 10, device="cuda")
    mask[:, 4:] = 1
    logp, _, _ = eng.forward_logprobs(ids, torch.ones_like(ids), mask)
    eng.step(-(logp * mask).sum())
    eng.save(tmp_path / "eng.pt")
    other = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cuda"))
    other.load(tmp_path / "eng.pt")
    for a, b in zip(eng.model.parameters(), other.model.parameters(), strict=True):
        assert b.device.type == "cuda" and torch.equal(a, b)
    state = next(iter(other.optimizer.state.values()))
    assert state["exp_avg"].device.type == "cuda"


@pytest.mark.parametrize(
    "engine",
    [
        {"device": "cuda", "autocast": "bf16"},  # fp32 weights and AdamW, bf16 compute
        {"device": "cuda", "train_dtype": "bf16"},  # bf16 weights and AdamW
    ],
    ids=["autocast", "bf16-weights"],
)
def test_a_short_run_on_the_gpu(tiny_config, engine):
    cfg = tiny_config(engine=engine)  # over the tiny run's bf16 PyTorch inference engine
    result = train(cfg, progress=False)
    assert result.stopped == "completed" and result.last_step == 3
    payload = load_checkpoint(list_checkpoints(cfg.resolved_run_dir)[3])
    assert len(payload["cuda_rng"]) == torch.cuda.device_count()
    resumed = train(tiny_config(engine=engine, train={"steps": 4}), resume=True, progress=False)
    assert resumed.stopped == "completed" and resumed.last_step == 4


def test_cuda_as_the_default_device_breaks_nothing(tiny_config):
    """What broke on an H100: torch's default device forced to CUDA."""
    cfg = tiny_config(engine={"device": "cuda"}, train={"steps": 1})
    with torch.device("cuda"):
        result = train(cfg, progress=False)
    assert result.stopped == "completed"


@pytest.mark.vllm
def test_official_vllm_routes_samples_and_syncs_on_the_gpu(ckpt):
    pytest.importorskip("vllm")
    from trainer.engines.vllm.inference import VLLMEngine

    engine = VLLMEngine(ckpt, Placement(dtype="fp32"))
    try:
        assert not engine.on_cpu, "this environment's vLLM is the CPU build"
        trainer = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cuda"))
        ro = engine.generate(PROMPTS, PARAMS, seed=0).to(trainer.device)
        fed = ro.attention_mask.sum(1) - 1
        cols = torch.arange(ro.input_ids.shape[1], device=trainer.device)
        known = (ro.routing >= 0).all(-1).all(-1)
        assert torch.equal(known, cols[None] < fed[:, None])  # every fed position, no other
        args = (ro.input_ids, ro.attention_mask, ro.response_mask)
        logp, _, live = trainer.forward_logprobs(*args, replay=ro.routing, record=True)
        mask = ro.response_mask > 0
        assert float((logp.detach() - ro.logp)[mask].abs().max()) < 1e-3  # same π, fp32
        agree = (live == ro.routing).all(-1).all(-1)[known].float().mean()
        assert float(agree) > 0.99  # the routing vLLM reports is the one π computes
        trainer.step(-(logp * ro.response_mask).sum())
        engine.update_weights(trainer.model)
        assert engine.last_sync.max_abs <= 1e-4
        after = engine.generate(PROMPTS, PARAMS, seed=0).to(trainer.device)
        logp2, _, _ = trainer.forward_logprobs(
            after.input_ids, after.attention_mask, after.response_mask, replay=after.routing
        )
        mask2 = after.response_mask > 0
        assert float((logp2.detach() - after.logp)[mask2].abs().max()) < 1e-3  # new weights
    finally:
        engine.close()
