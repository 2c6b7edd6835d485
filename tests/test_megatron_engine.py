"""The Megatron training engine against the transformers one, on the same tiny Qwen3-MoE:
exact weight conversion both ways, equal log-probs, entropy, routes and router gradients
(fp32), Routing Replay through Megatron's RouterReplay (replayed layers route exactly the
given experts: zero mismatch), the optimiser step, checkpoints, and the user errors."""

import sys

import pytest
import torch

pytest.importorskip("megatron.core")

from core.errors import UserError
from minirl import routing_metrics
from trainer.engines.config import EngineConfig, OptimConfig
from trainer.engines.factory import make_training_engine
from trainer.engines.megatron import convert
from trainer.engines.megatron.routing import routers
from trainer.engines.megatron.training import MegatronTrainingEngine
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.engines.update import UpdateSettings
from trainer.models import ModelConfig, build_tiny_checkpoint

TOL = 1e-5
MEGATRON = EngineConfig(training="megatron")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_tiny_checkpoint(ModelConfig(seed=21), tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def engines(ckpt):
    """(transformers engine, Megatron engine) on the same checkpoint, never stepped."""
    mg = make_training_engine(ckpt, MEGATRON, OptimConfig())
    assert isinstance(mg, MegatronTrainingEngine)
    return TorchTrainingEngine(ckpt, UpdateSettings()), mg


def _batch(seed=0, batch=4, seq=12):
    """Right-padded rows: a prompt of 4 tokens, responses of 8, 3, 0 and 5 tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (batch, seq), generator=g)
    attention = torch.zeros(batch, seq, dtype=torch.long)
    response = torch.zeros(batch, seq)
    for b, n in enumerate([8, 3, 0, 5][:batch]):
        attention[b, : 4 + n] = 1
        response[b, 4 : 4 + n] = 1
        ids[b, 4 + n :] = 0
    return ids, attention, response


def _sets(routes):
    return routes.sort(dim=-1).values


@pytest.mark.parametrize("tied", [False, True])
def test_conversion_round_trips_exactly(tmp_path, tied):
    from trainer.models import load_policy

    path = build_tiny_checkpoint(ModelConfig(seed=3, tie_word_embeddings=tied), tmp_path)
    model, _ = load_policy(path)
    hf = model.state_dict()
    mg = convert.hf_to_megatron(hf, model.config)
    assert ("output_layer.weight" in mg) is not tied
    assert sum(t.numel() for t in mg.values()) == sum(
        p.numel() for p in model.parameters()
    )  # every parameter once, nothing invented
    back = convert.megatron_to_hf(mg, model.config)
    assert back.keys() == hf.keys()
    assert all(torch.equal(back[k], hf[k]) for k in hf)
    again = convert.hf_to_megatron(back, model.config)
    assert all(torch.equal(again[k], mg[k]) for k in mg)


def test_equal_logprobs_entropy_and_routes_before_training(engines):
    torch_eng, mg = engines
    ids, attention, response = _batch()
    with torch.no_grad():
        a = torch_eng.forward_logprobs(ids, attention, response, record=True, with_entropy=True)
        b = mg.forward_logprobs(ids, attention, response, record=True, with_entropy=True)
    torch.testing.assert_close(b[0], a[0], rtol=0, atol=TOL)
    torch.testing.assert_close(b[1], a[1], rtol=0, atol=TOL)
    assert (b[0][response == 0] == 0).all() and b[0].dtype == torch.float32
    assert b[2].shape == (4, 12, 2, 2) and torch.equal(_sets(b[2]), _sets(a[2]))
    assert torch.equal(b[2][..., 0] == -1, (attention == 0)[..., None].expand(4, 12, 2))
    # the HF view that vLLM syncs from computes the same as the Megatron module
    logits = mg.model(input_ids=ids).logits
    ref = torch_eng.model(input_ids=ids).logits
    torch.testing.assert_close(logits, ref, rtol=0, atol=TOL)


def test_replay_routes_exactly_the_given_experts_with_router_gradients(engines):
    """R3 with routes other than the live ones: Megatron's routers dispatch exactly the
    replayed experts (zero mismatch on every replayed layer), log π equals the
    transformers engine's under the same replay, and the router weights get the same
    gradients; -1 rows keep the live top-k."""
    torch_eng, mg = engines
    ids, attention, response = _batch(1)
    with torch.no_grad():
        _, _, live = mg.forward_logprobs(ids, attention, response, record=True)
    replay = live.clone()
    replay[live >= 0] = (live[live >= 0] + 3) % 8
    dispatched = []
    hooks = [
        r.register_forward_hook(lambda _m, _a, out: dispatched.append(out[1].clone()))
        for r in routers(mg.policy.module)
    ]
    try:
        logp, _, recorded = mg.forward_logprobs(
            ids, attention, response, replay=replay, record=True
        )
    finally:
        for h in hooks:
            h.remove()
    # routing_map [S*B, E] of each layer -> the expert sets actually used, [B, S, L, k]
    used = torch.stack(
        [m.nonzero()[:, 1].view(12, 4, 2).transpose(0, 1) for m in dispatched], dim=2
    )
    mask = attention.float()
    metrics = routing_metrics(used, replay, mask, 8, "replayed")
    assert metrics["routing/replayed"] == 0.0 and metrics["routing/replayed/overlap"] == 1.0
    assert torch.equal(recorded[:, :, 0], live[:, :, 0])  # the live choice is still reported

    ref, _, _ = torch_eng.forward_logprobs(ids, attention, response, replay=replay)
    torch.testing.assert_close(logp, ref, rtol=0, atol=TOL)
    (logp.sum() + ref.sum()).backward()
    for layer in range(2):
        g_mg = mg.policy.module.decoder.layers[layer].mlp.router.weight.grad
        g_hf = torch_eng.model.model.layers[layer].mlp.gate.weight.grad
        assert g_mg is not None and float(g_mg.abs().sum()) > 0
        torch.testing.assert_close(g_mg, g_hf, rtol=1e-4, atol=1e-6)
    mg.optimizer.zero_grad(set_to_none=True)
    torch_eng.optimizer.zero_grad(set_to_none=True)

    with torch.no_grad():  # all rows unknown: the live routing, the live log-probs
        unknown = torch.full_like(replay, -1)
        free, _, _ = mg.forward_logprobs(ids, attention, response)
        same, _, _ = mg.forward_logprobs(ids, attention, response, replay=unknown)
        assert torch.equal(same, free) and not torch.equal(logp.detach(), free)


def test_steps_track_the_transformers_engine_and_checkpoints_round_trip(ckpt, tmp_path):
    """Two AdamW steps on the same batch move both engines alike (R2: record at the
    first, replay later); a saved engine restores into a fresh one exactly."""
    optim = UpdateSettings(lr=1e-3, grad_clip=0.5)
    a = TorchTrainingEngine(ckpt, optim)
    b = MegatronTrainingEngine(ckpt, optim)
    ids, attention, response = _batch(2)
    with torch.no_grad():
        _, _, old_routes = b.forward_logprobs(ids, attention, response, record=True)
    for eng in (a, b):
        for _ in range(2):
            logp, _, _ = eng.forward_logprobs(ids, attention, response, replay=old_routes)
            stats = eng.step(-logp.sum())
            assert stats["optim/grad_norm"] > 0.5 and stats["optim/lr"] == 1e-3
    with torch.no_grad():
        la, _, _ = a.forward_logprobs(ids, attention, response)
        lb, _, _ = b.forward_logprobs(ids, attention, response)
    torch.testing.assert_close(lb, la, rtol=0, atol=1e-4)

    b.set_lr_scale(0.5)
    b.save(tmp_path / "engine.pt")  # torch.load(weights_only=True) in load
    c = MegatronTrainingEngine(ckpt, optim)
    c.load(tmp_path / "engine.pt")
    assert c.lr_scale == 0.5
    for eng in (b, c):
        logp, _, _ = eng.forward_logprobs(ids, attention, response)
        eng.step(-logp.sum())
    pairs = zip(b.policy.module.named_parameters(), c.policy.module.parameters(), strict=True)
    for (name, pb), pc in pairs:
        assert torch.equal(pb, pc), name

    with pytest.raises(UserError, match=r"engine\.training=torch"):
        c.load_state_dict(a.state_dict())

    _, cosine = b.step_with_grad_cosine(
        *(2 * [b.forward_logprobs(ids, attention, response)[0].sum()])
    )
    assert cosine == pytest.approx(1.0)  # a loss against itself


def test_user_errors(ckpt, tmp_path, monkeypatch):
    dense = build_tiny_checkpoint(ModelConfig(arch="qwen3", seed=1), tmp_path)
    with pytest.raises(UserError, match="qwen3_moe"):
        MegatronTrainingEngine(dense, UpdateSettings())
    with pytest.raises(UserError, match="fp32"):
        make_training_engine(
            ckpt, EngineConfig(training="megatron", train_dtype="bf16"), OptimConfig()
        )
    with pytest.raises(ValueError, match="training"):
        EngineConfig(training="jax")
    monkeypatch.setitem(sys.modules, "megatron.core", None)  # as if not installed
    with pytest.raises(UserError, match=r"pip install 'minirl\[megatron\]'"):
        MegatronTrainingEngine(ckpt, UpdateSettings())


def test_the_loop_on_megatron_r2_then_resume(tiny_config, monkeypatch):
    """`engine.training: megatron` through trainer.run: R2 replays the θ_old pass's
    Megatron routes (a no-op on the first mini-batch), fp32 inference agrees with the
    Megatron policy (no mismatch), and a resume loads the Megatron checkpoint."""
    from monitor import RunReader
    from trainer.run import train

    calls = []
    original = MegatronTrainingEngine.forward_logprobs

    def spy(engine, *args, replay=None, **kwargs):
        out = original(engine, *args, replay=replay, **kwargs)
        calls.append((replay, out[0].detach().clone(), out[2]))
        return out

    monkeypatch.setattr(MegatronTrainingEngine, "forward_logprobs", spy)
    sections = dict(
        engine={"training": "megatron", "inference_dtype": "fp32"},
        checkpoint_every=2,
    )
    r2 = {"routing_replay": "R2", "mini_batches": 2}
    result = train(tiny_config(train={"steps": 2, **r2}, **sections), progress=False)
    assert (result.last_step, result.stopped) == (2, "completed")
    (old_replay, old_logp, old_routes), (first_replay, first_logp, _) = calls[:2]
    half = len(first_logp)
    assert old_replay is None and torch.equal(first_replay, old_routes[:half])
    torch.testing.assert_close(first_logp, old_logp[:half], rtol=0, atol=1e-6)
    reader = RunReader(result.run_dir)
    series = reader.scalars(["mismatch/kl_k1", "routing/mismatch_train_infer"])
    assert max(abs(v) for v in series["mismatch/kl_k1"][1].tolist()) < 1e-5
    assert series["routing/mismatch_train_infer"][1].tolist() == [0.0, 0.0]

    again = train(tiny_config(train={"steps": 3, **r2}, **sections), resume=True, progress=False)
    assert (again.last_step, again.stopped) == (3, "completed")
