"""engine.device on a machine without a GPU: the setting resolves (auto is the CPU here,
CUDA where torch sees one), and nothing creates a tensor or a generator on torch's default
device. The latter is checked by making the default device `meta`: a tensor created
without an explicit device then lands there and the first op that meets a CPU tensor
fails, the CPU twin of "forcing CUDA as the default device broke the trainer"."""

from __future__ import annotations

import math

import pytest
import torch

import minirl
from core.errors import UserError
from trainer.checkpoints import restore_rng
from trainer.coldstart import sft_batch
from trainer.config import config_from_dict
from trainer.engines.base import Rollout, SamplingParams
from trainer.engines.config import EngineConfig
from trainer.engines.device import resolve_device
from trainer.engines.placement import Placement
from trainer.engines.torch.inference import TorchInferenceEngine
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.engines.update import UpdateSettings
from trainer.evaluate import EvalConfig, evaluate
from trainer.models import ModelConfig, build_tiny_checkpoint
from trainer.run import train
from trainer.tasks import Example, TaskConfig, make_task


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_tiny_checkpoint(ModelConfig(seed=5), tmp_path_factory.mktemp("ckpt"))


# ---------------------------------------------------------------------------- the setting


def test_resolve_device_here():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto").type == expected.type


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the errors of a CPU-only machine")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0"])
def test_cuda_without_cuda_is_one_clear_error(spec):
    with pytest.raises(UserError, match=r"engine.device: cuda.*unavailable.*use auto or cpu"):
        resolve_device(spec)


def test_auto_picks_cuda_when_torch_sees_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("auto") == torch.device("cuda", 1)  # the current device, indexed
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match="only 2 CUDA device"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "CPU", "mps", 0])
def test_config_rejects_other_devices(bad):
    with pytest.raises(UserError, match=r"'engine.*device"):
        config_from_dict({"engine": {"device": bad}})


def test_autocast_needs_fp32_weights():
    assert EngineConfig(autocast="bf16").train_dtype == "fp32"
    with pytest.raises(ValueError, match="autocast=bf16 needs train_dtype=fp32"):
        EngineConfig(autocast="bf16", train_dtype="bf16")
    with pytest.raises(UserError, match=r"'engine.*autocast"):
        config_from_dict({"engine": {"autocast": "fp16"}})


def test_bf16_autocast_computes_in_bf16_and_keeps_fp32_weights(ckpt):
    ids = torch.randint(3, 99, (3, 10), generator=torch.Generator().manual_seed(1))
    attn, mask = torch.ones_like(ids), torch.zeros(3, 10)
    mask[:, 4:] = 1
    fp32 = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cpu"))
    amp = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cpu"), autocast="bf16")
    ref, _, _ = fp32.forward_logprobs(ids, attn, mask)
    got, ent, _ = amp.forward_logprobs(ids, attn, mask, with_entropy=True)
    assert got.dtype == ent.dtype == torch.float32
    diff = (got - ref).detach().abs()[mask > 0]
    assert 0 < float(diff.max()) < 0.1  # bf16 matmuls: close to fp32, not equal
    amp.step(-(got * mask).sum())
    assert {p.dtype for p in amp.model.parameters()} == {torch.float32}
    assert {s["exp_avg"].dtype for s in amp.optimizer.state.values()} == {torch.float32}


# ---------------------------------------------------------------------------- placement


def test_engines_put_the_policy_on_the_resolved_device(ckpt):
    train_eng = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("auto"))
    infer = TorchInferenceEngine(ckpt, Placement("auto", "bf16"))
    here = resolve_device("auto")
    for eng in (train_eng, infer):
        assert eng.device == here
        assert {p.device for p in eng.model.parameters()} == {here}


def test_rollout_to_moves_every_field():
    ro = Rollout(
        input_ids=torch.ones(2, 3, dtype=torch.long),
        attention_mask=torch.ones(2, 3, dtype=torch.long),
        response_mask=torch.ones(2, 3),
        logp=torch.zeros(2, 3),
        truncated=torch.zeros(2, dtype=torch.bool),
        routing=torch.full((2, 3, 2, 2), -1),
    )
    assert ro.to(torch.device("cpu")) is ro
    moved = ro.to(torch.device("meta"))
    assert {moved.input_ids.device, moved.routing.device, moved.truncated.device} == {
        torch.device("meta")
    }
    assert moved.routing.shape == ro.routing.shape and moved.logp.dtype == torch.float32
    assert ro.to(torch.device("meta")).routing is not None


def test_restore_rng_restores_the_cpu_state_and_skips_absent_devices():
    torch.manual_seed(7)
    state = torch.get_rng_state()
    expected = torch.rand(3)
    # a checkpoint written on a machine with CUDA: its device states cannot apply here
    payload = {"torch_rng": state, "cuda_rng": [state.clone()] * 8}
    torch.rand(5)
    restore_rng(payload)
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


# ---------------------------------------------------------------------------- default device


def test_engines_create_nothing_on_the_default_device(ckpt):
    train_eng = TorchTrainingEngine(ckpt, UpdateSettings(), Placement("cpu"))
    infer = TorchInferenceEngine(ckpt, Placement("cpu", "fp32"))
    params = SamplingParams(n=2, max_new_tokens=5, temperature=1.0, top_p=0.9, top_k=20)
    with torch.device("meta"):
        ro = infer.generate([[1, 5, 6, 7], [1, 8]], params, seed=3)
        assert ro.input_ids.device.type == "cpu" and ro.routing is not None
        ids, attn, mask = ro.input_ids, ro.attention_mask, ro.response_mask
        logp, ent, routed = train_eng.forward_logprobs(
            ids, attn, mask, replay=ro.routing, record=True, with_entropy=True
        )
        assert logp.device.type == ent.device.type == routed.device.type == "cpu"
        adv = torch.tensor([1.0, -1.0, 0.5, -0.5], device=logp.device)
        loss = -(logp * mask * adv[:, None]).sum()
        reference = minirl.sequence_is_loss(logp, ro.logp, adv, mask)
        stats, cosine = train_eng.step_with_grad_cosine(loss, reference)
        assert math.isfinite(stats["optim/grad_norm"]) and -1 <= cosine <= 1
        infer.update_weights(train_eng.model)
        batch = sft_batch(train_eng.tokenizer, [Example("1+2=", "3", "3")], torch.device("cpu"))
        assert {t.device.type for t in batch.values()} == {"cpu"}


def test_minirl_creates_nothing_on_the_default_device():
    g = torch.Generator().manual_seed(0)
    logp_mu = -torch.rand(4, 6, generator=g, dtype=torch.float64)
    logp_old = logp_mu + 0.05 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    logp = (logp_old + 0.05 * torch.randn(4, 6, generator=g, dtype=torch.float64)).requires_grad_()
    mask = torch.ones(4, 6, dtype=torch.float64)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    routing = torch.rand(4, 6, 2, 4, generator=g).argsort(-1)[..., :2]  # distinct experts
    constant = torch.full((4, 6), -1.0, dtype=torch.float64)
    entropy = torch.rand(4, 6, generator=g)
    with torch.device("meta"):
        adv = minirl.group_advantages(rewards, 2).double()
        for variant in ("minirl", "grpo", "gspo", "cispo"):
            cfg = minirl.LossConfig(variant=variant)
            loss, stats = minirl.policy_loss(logp, logp_old, logp_mu, adv, mask, cfg)
            assert loss.device.type == "cpu" and all(map(math.isfinite, stats.values()))
        metrics = minirl.mismatch_metrics(logp_old, logp_mu, mask)
        # constant probabilities: the correlation is undefined (NaN), not an error
        assert math.isnan(minirl.mismatch_metrics(constant, constant, mask)["mismatch/prob_corr"])
        metrics |= minirl.approx_residual(logp - logp_mu, mask)
        metrics |= minirl.entropy_metrics(entropy, mask)
        metrics |= minirl.routing_metrics(routing, routing.flip(0), mask, 4, "mismatch")
        seq = minirl.sequence_is_loss(logp, logp_mu, adv, mask)
        assert seq.device.type == "cpu" and all(map(math.isfinite, metrics.values()))


def test_a_run_on_cpu_creates_nothing_on_the_default_device(tiny_config):
    """The whole loop (cold start, both engines, steps, evaluation, checkpoints) with
    engine.device: cpu explicit while torch's default device is meta."""
    cfg = tiny_config(engine={"device": "cpu"})
    with torch.device("meta"):
        result = train(cfg, progress=False)
    assert result.stopped == "completed" and result.last_step == 3
    assert result.last_eval is not None and 0 <= result.last_eval <= 1


def test_evaluate_uses_the_models_device(ckpt):
    task = make_task(TaskConfig(kind="add", digits=1, heldout_size=4))
    infer = TorchInferenceEngine(ckpt, Placement("cpu", "fp32"))
    quick = EvalConfig(samples=1, mode="both")
    with torch.device("meta"):
        for policy in (infer.model, infer):
            acc = evaluate(policy, infer.tokenizer, task, quick, max_new_tokens=3)
            assert 0 <= acc["eval/acc"] <= 1
