"""The vLLM engine on the tiny Qwen3-MoE in bf16: a real training-inference mismatch.

Against the fp32 training engine, bf16 rollouts must differ in log π (a little) and in
routing (some token x layer top-k sets flip), while a weight sync still passes the bf16
check. One real vLLM engine for the module.
"""

from __future__ import annotations

import pytest
import torch

from trainer.engines.base import SamplingParams
from trainer.engines.placement import Placement
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.engines.update import UpdateSettings
from trainer.engines.vllm import weights as vllm_weights
from trainer.engines.vllm.inference import VLLMEngine
from trainer.models import ModelConfig, build_tiny_checkpoint

pytestmark = pytest.mark.vllm

PROMPTS = [[1, *range(10 + i, 16 + i)] for i in range(0, 64, 8)]  # 8 prompts
PARAMS = SamplingParams(n=8, max_new_tokens=16)


@pytest.fixture(scope="module")
def checkpoint_and_engine(tmp_path_factory):
    """The tiny MoE checkpoint and one bf16 vLLM engine on it, for the whole module."""
    ckpt = build_tiny_checkpoint(ModelConfig(seed=5), tmp_path_factory.mktemp("moe16"))
    engine = VLLMEngine(ckpt, Placement(dtype="bf16"))
    yield ckpt, engine
    engine.close()


def test_bf16_rollout_shows_routing_and_logprob_mismatch(checkpoint_and_engine):
    ckpt, engine = checkpoint_and_engine
    trainer = TorchTrainingEngine(ckpt, UpdateSettings())
    ro = engine.generate(PROMPTS, PARAMS, seed=0)
    logp, _, routed = trainer.forward_logprobs(
        ro.input_ids, ro.attention_mask, ro.response_mask, record=True
    )
    known = (ro.routing >= 0).all(-1)  # [B, S, L]
    assert int(known.sum()) >= 2000  # enough (token, layer) rows to see flips
    differ = (ro.routing.sort(-1).values != routed.sort(-1).values).any(-1)[known]
    frac = float(differ.float().mean())
    assert 0 < frac < 0.5, frac
    diff = (logp.detach() - ro.logp)[ro.response_mask > 0].abs()
    assert 1e-4 < float(diff.mean()) < 0.05, float(diff.mean())


def test_bf16_weight_sync_calibrated_bound(checkpoint_and_engine):
    """Sharper weights raise bf16's error; the calibrated bound (on the 90th percentile
    of |Δ|) follows it, and still rejects the unpacked-experts bug."""
    ckpt, engine = checkpoint_and_engine
    trainer = TorchTrainingEngine(ckpt, UpdateSettings())
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.mul_(3.0)
    engine.update_weights(trainer.model)
    report = engine.last_sync
    assert report.on == "q90" and 0.02 < report.q90_abs <= report.tol
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vllm_weights, "repack_cpu_moe_experts", lambda _model: 0)
        with pytest.raises(vllm_weights.WeightSyncError):
            engine.update_weights(trainer.model)
    engine.update_weights(trainer.model)
