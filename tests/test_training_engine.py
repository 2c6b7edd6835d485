"""The training engine: log π and entropy against float64 references, routing record and
replay (R2 on the first mini-batch is a no-op), the optimiser step, checkpoints."""

import math

import pytest
import torch

from trainer.engines.placement import Placement
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.engines.update import UpdateSettings
from trainer.models import ModelConfig, build_tiny_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_tiny_checkpoint(ModelConfig(seed=21), tmp_path_factory.mktemp("ckpt"))


def _batch(seed=0, batch=4, seq=12):
    """Right-padded rows: a prompt of 4 tokens, then responses of different lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (batch, seq), generator=g)
    lengths = torch.tensor([8, 3, 0, 5])[:batch]  # a row without response: all zeros
    attention = torch.zeros(batch, seq, dtype=torch.long)
    response = torch.zeros(batch, seq)
    for b, n in enumerate(lengths.tolist()):
        attention[b, : 4 + n] = 1
        response[b, 4 : 4 + n] = 1
        ids[b, 4 + n :] = 0
    return ids, attention, response


def _reference(model, ids, attention, response):
    """float64 log π(ids[j] | ids[:j]) and entropy from the model's own logits, one loop."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits.double()
    logp = torch.zeros(ids.shape, dtype=torch.float64)
    ent = torch.zeros(ids.shape, dtype=torch.float64)
    for b in range(ids.shape[0]):
        for j in range(1, ids.shape[1]):
            if response[b, j]:
                dist = torch.log_softmax(logits[b, j - 1], -1)
                logp[b, j] = dist[ids[b, j]]
                ent[b, j] = -(dist.exp() * dist).sum()
    return logp, ent


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_logp_and_entropy_match_a_float64_reference(ckpt, dtype):
    eng = TorchTrainingEngine(ckpt, UpdateSettings(), Placement(dtype=dtype))
    ids, attention, response = _batch()
    logp, ent, routed = eng.forward_logprobs(ids, attention, response, with_entropy=True)
    assert logp.dtype == torch.float32 and ent.dtype == torch.float32 and routed is None
    assert logp.requires_grad and not ent.requires_grad
    ref_logp, ref_ent = _reference(eng.model, ids, attention, response)
    torch.testing.assert_close(logp.double(), ref_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent.double(), ref_ent, rtol=0, atol=1e-5)
    assert (logp[response == 0] == 0).all() and (ent[response == 0] == 0).all()
    assert (ent[response > 0] <= math.log(99) + 1e-5).all()


def test_record_then_replay_is_a_no_op_and_keeps_router_gradients(ckpt):
    """R2 on the first mini-batch: replaying e^π_old at θ_old changes nothing."""
    eng = TorchTrainingEngine(ckpt, UpdateSettings())
    ids, attention, response = _batch(1)
    with torch.no_grad():
        old, _, routed = eng.forward_logprobs(ids, attention, response, record=True)
    assert routed.shape == (4, 12, 2, 2)
    assert torch.equal(routed[..., 0] == -1, (attention == 0)[..., None].expand(4, 12, 2))
    new, _, again = eng.forward_logprobs(ids, attention, response, replay=routed, record=True)
    assert torch.equal(new, old) and torch.equal(again, routed)
    new.sum().backward()
    gate = eng.model.model.layers[0].mlp.gate.weight.grad
    assert gate is not None and gate.abs().sum() > 0
    eng.optimizer.zero_grad()

    # replaying other experts (R3 with a different e^μ) changes log π on response tokens
    other = routed.clone()
    other[routed >= 0] = (routed[routed >= 0] + 3) % 8
    with torch.no_grad():
        moved, _, live = eng.forward_logprobs(ids, attention, response, replay=other, record=True)
    assert not torch.equal(moved, old)
    assert torch.equal(live[:, :, 0], routed[:, :, 0])  # layer 0 sees no replayed layer
    with pytest.raises(ValueError, match="position 0"):
        eng.forward_logprobs(ids, attention, torch.ones_like(response))


def test_step_clips_reports_and_skips_non_finite(ckpt):
    eng = TorchTrainingEngine(ckpt, UpdateSettings(lr=1e-3, grad_clip=0.5))
    ids, attention, response = _batch(2)
    logp, _, _ = eng.forward_logprobs(ids, attention, response)
    (-logp.sum()).backward()
    grads = [p.grad.double() for p in eng.model.parameters() if p.grad is not None]
    ref_norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    before = {n: p.detach().clone() for n, p in eng.model.named_parameters()}
    stats = eng.step()
    assert stats["optim/grad_norm"] == pytest.approx(ref_norm, rel=1e-5)
    assert ref_norm > 0.5 and stats["optim/lr"] == 1e-3
    # AdamW's first step moves each weight by ~lr regardless of clipping
    moved = max(
        float((p.detach() - before[n]).abs().max()) for n, p in eng.model.named_parameters()
    )
    assert 0.5e-3 < moved <= 1.001e-3
    assert all(p.grad is None for p in eng.model.parameters())

    eng.set_lr_scale(0.25)
    assert eng.optimizer.param_groups[0]["lr"] == 2.5e-4 == eng.lr
    with pytest.raises(ValueError):
        eng.set_lr_scale(float("nan"))

    snapshot = {n: p.detach().clone() for n, p in eng.model.named_parameters()}
    logp, _, _ = eng.forward_logprobs(ids, attention, response)
    stats = eng.step(logp.sum() * float("inf"))
    assert not math.isfinite(stats["optim/grad_norm"])
    assert all(torch.equal(p, snapshot[n]) for n, p in eng.model.named_parameters())


def test_checkpoint_round_trip_with_weights_only(ckpt, tmp_path):
    a = TorchTrainingEngine(ckpt, UpdateSettings(lr=1e-3))
    ids, attention, response = _batch(3)
    for _ in range(2):
        logp, _, _ = a.forward_logprobs(ids, attention, response)
        a.step(-logp.sum())
    a.set_lr_scale(0.5)
    a.save(tmp_path / "engine.pt")
    b = TorchTrainingEngine(ckpt, UpdateSettings(lr=1e-3))
    b.load(tmp_path / "engine.pt")  # torch.load(weights_only=True) inside
    assert b.lr_scale == 0.5
    for eng in (a, b):  # one more identical step from both: identical weights after
        logp, _, _ = eng.forward_logprobs(ids, attention, response)
        eng.step(-logp.sum())
    for (name, pa), pb in zip(a.model.named_parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb), name


def test_factory_builds_the_configured_engine(ckpt):
    """Every EngineConfig/OptimConfig value the PyTorch engine uses reaches it."""
    from trainer.engines.config import EngineConfig, OptimConfig
    from trainer.engines.factory import make_training_engine

    optim = OptimConfig(lr=2e-3, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1, grad_clip=0.3)
    config = EngineConfig(device="cpu", train_dtype="bf16")
    eng = make_training_engine(ckpt, config, optim)
    assert isinstance(eng, TorchTrainingEngine) and eng.model.dtype == torch.bfloat16
    assert eng.device == torch.device("cpu") and eng.policy.autocast == "none"
    group = eng.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (
        2e-3,
        (0.8, 0.95),
        1e-6,
        0.1,
    )
    assert eng.update.optim.grad_clip == 0.3
    amp = make_training_engine(ckpt, EngineConfig(device="cpu", autocast="bf16"), optim)
    assert amp.policy.autocast == "bf16" and amp.model.dtype == torch.float32
