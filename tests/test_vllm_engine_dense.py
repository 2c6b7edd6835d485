"""The vLLM engine on a dense tiny Qwen3 in fp32: logprobs, verified weight sync (also
with simulated FP8 weights), and what the engine leaves behind in the process.

One real vLLM engine for the module; references come from the transformers training
engine, never from vLLM.
"""

from __future__ import annotations

import copy
import os
import random
import threading

import numpy as np
import pytest
import torch

from trainer.engines import quant
from trainer.engines.base import SamplingParams
from trainer.engines.decode import _filter_logits
from trainer.engines.placement import Placement
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.engines.update import UpdateSettings
from trainer.engines.vllm import weights as vllm_weights
from trainer.engines.vllm.inference import VLLMEngine
from trainer.models import ModelConfig, build_tiny_checkpoint

pytestmark = pytest.mark.vllm

PROMPTS = [[1, 30, 31, 32], [1, 50, 51, 52, 53, 54], [1, 9]]
PARAMS = SamplingParams(n=3, max_new_tokens=12, temperature=0.9, top_p=0.95)


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_tiny_checkpoint(ModelConfig(arch="qwen3", seed=8), tmp_path_factory.mktemp("d"))


@pytest.fixture(scope="module")
def started(ckpt):
    """The engine, and the process state just before it started."""
    torch.manual_seed(1234)
    before = {
        "threads": set(threading.enumerate()),
        "torch_rng": torch.get_rng_state(),
        "np_rng": np.random.get_state()[1].copy(),
        "py_rng": random.getstate(),
        "num_threads": torch.get_num_threads(),
        "set_num_threads": torch.set_num_threads,
        "environ": _environ(),
    }
    eng = VLLMEngine(ckpt, Placement(dtype="fp32"))
    yield eng, before
    eng.close()


@pytest.fixture(scope="module")
def engine(started):
    return started[0]


@pytest.fixture(scope="module")
def trainer(ckpt):
    return TorchTrainingEngine(ckpt, UpdateSettings())


def _recompute(trainer: TorchTrainingEngine, ro) -> torch.Tensor:
    logp, _, _ = trainer.forward_logprobs(ro.input_ids, ro.attention_mask, ro.response_mask)
    return logp.detach()


def test_engine_start_leaves_the_process_as_it_was(started):
    _, before = started
    assert torch.equal(torch.get_rng_state(), before["torch_rng"])
    assert np.array_equal(np.random.get_state()[1], before["np_rng"])
    assert random.getstate() == before["py_rng"]
    assert torch.set_num_threads is before["set_num_threads"]  # vLLM swaps in a no-op
    assert torch.get_num_threads() == before["num_threads"]
    assert _environ() == before["environ"]  # vLLM sets LD_PRELOAD, TORCHINDUCTOR_* ...


def _sampling_logprobs(trainer: TorchTrainingEngine, ro, params: SamplingParams) -> torch.Tensor:
    """log μ of each token under the sampler: log_softmax of the training model's logits
    scaled by the temperature and filtered by top-k/top-p (the PyTorch engine's filter)."""
    with torch.no_grad():
        logits = trainer.model(input_ids=ro.input_ids, attention_mask=ro.attention_mask).logits
    b, s, v = logits.shape
    flat = logits[:, :-1].reshape(-1, v).float() / params.temperature
    scaled = _filter_logits(flat, params.top_k, params.top_p).reshape(b, s - 1, v)
    out = torch.zeros(b, s)
    out[:, 1:] = torch.log_softmax(scaled, -1).gather(-1, ro.input_ids[:, 1:, None]).squeeze(-1)
    return out


def test_dense_rollout_logprobs_match_training_engine(engine, trainer):
    ro = engine.generate(PROMPTS, PARAMS, seed=1)
    assert ro.routing is None  # dense: no experts
    assert ro.batch_size == len(PROMPTS) * PARAMS.n
    mask = ro.response_mask > 0
    # log μ of the distribution sampled from (temperature 0.9, top-p 0.95), the same
    # quantity the PyTorch engine returns; the unscaled log π differs (sampler mismatch)
    assert float((_sampling_logprobs(trainer, ro, PARAMS) - ro.logp)[mask].abs().max()) <= 1e-4
    assert float((_recompute(trainer, ro) - ro.logp)[mask].abs().max()) > 1e-2


def test_dense_weight_sync_verified(engine, ckpt):
    trainer = TorchTrainingEngine(ckpt, UpdateSettings())
    before = engine.generate(PROMPTS, PARAMS, seed=2)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.mul_(1.5)  # a large change: the old weights would be far off
    engine.update_weights(trainer.model)
    assert engine.last_sync.max_abs <= 1e-4 and engine.last_sync.on == "max"
    ro = engine.generate(PROMPTS, PARAMS, seed=2)
    mask = ro.response_mask > 0
    assert float((_sampling_logprobs(trainer, ro, PARAMS) - ro.logp)[mask].abs().max()) <= 1e-4
    assert not torch.equal(before.logp, ro.logp)


def test_sync_with_simulated_fp8_weights(engine, trainer):
    """weight_quant rounds the synced weights like the PyTorch engine (quant.py); the
    engine then equals a copy of the model rounded by quant.quantize_weights_."""
    engine.weight_quant = "fp8_e4m3"
    try:
        engine.update_weights(trainer.model)  # verified against the rounded reference
    finally:
        engine.weight_quant = "none"
    rounded = copy.deepcopy(trainer)
    assert quant.quantize_weights_(rounded.model, "fp8_e4m3") > 0
    ro = engine.generate(PROMPTS, PARAMS, seed=3)
    mask = ro.response_mask > 0
    assert float((_sampling_logprobs(rounded, ro, PARAMS) - ro.logp)[mask].abs().max()) <= 1e-4
    assert float((_sampling_logprobs(trainer, ro, PARAMS) - ro.logp)[mask].abs().max()) > 1e-3
    engine.update_weights(trainer.model)  # back to full precision


def test_checkpoint_tensors_rounds_only_quantised_weights(trainer):
    plain = vllm_weights.checkpoint_tensors(trainer.model)
    fp8 = vllm_weights.checkpoint_tensors(trainer.model, "fp8_e4m3")
    assert plain.keys() == fp8.keys()
    changed = {k for k in plain if not torch.equal(plain[k], fp8[k])}
    assert "model.layers.0.self_attn.q_proj.weight" in changed
    assert "model.layers.0.mlp.down_proj.weight" in changed
    kept = {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}
    assert not kept & changed


def test_close_frees_threads_and_process_group(started):
    engine, before = started
    engine.close()
    engine.close()  # idempotent
    assert set(threading.enumerate()) <= before["threads"]
    assert not torch.distributed.is_initialized()
