"""The PyTorch inference engine against the training engine on the same checkpoint:
log μ and routing e^μ of sampled tokens, numerics, layout, EOS, weight sync, sampler."""

import math

import pytest
import torch

from core.errors import UserError
from trainer.engines.base import SamplingParams
from trainer.engines.config import EngineConfig
from trainer.engines.decode import _filter_logits, sample_next
from trainer.engines.placement import Placement
from trainer.engines.torch.inference import TorchInferenceEngine
from trainer.engines.torch.training import TorchTrainingEngine
from trainer.engines.update import UpdateSettings
from trainer.models import ModelConfig, build_tiny_checkpoint

PROMPTS = ["12+3=", "7*8-1=", "1="]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_tiny_checkpoint(ModelConfig(seed=11), tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def trainer(ckpt):
    return TorchTrainingEngine(ckpt, UpdateSettings())


@pytest.fixture(scope="module")
def engine(ckpt):
    eng = TorchInferenceEngine(ckpt, Placement(dtype="fp32"))
    yield eng
    eng.close()


def _prompts(engine):
    return [engine.tokenizer(p)["input_ids"] for p in PROMPTS]


def _recompute(trainer, ro):
    with torch.no_grad():
        logp, _, routed = trainer.forward_logprobs(
            ro.input_ids, ro.attention_mask, ro.response_mask, record=True
        )
    return logp, routed


def test_same_seed_same_rollout_other_seed_other_rollout(engine):
    params = SamplingParams(n=3, max_new_tokens=8)
    a = engine.generate(_prompts(engine), params, seed=7)
    b = engine.generate(_prompts(engine), params, seed=7)
    c = engine.generate(_prompts(engine), params, seed=8)
    for field in ("input_ids", "attention_mask", "response_mask", "logp", "truncated", "routing"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert not torch.equal(a.input_ids, c.input_ids)


def test_fp32_logp_and_routing_equal_the_training_engines(engine, trainer):
    ro = engine.generate(_prompts(engine), SamplingParams(n=4, max_new_tokens=10), seed=1)
    logp, routed = _recompute(trainer, ro)
    resp = ro.response_mask > 0
    assert (ro.logp[~resp] == 0).all() and (ro.logp[resp] < 0).all()
    assert (logp - ro.logp).abs().max() < 1e-5
    # e^μ is known on every fed token: prompt and response except its last token
    last = ro.attention_mask.sum(1) - 1
    fed = ro.attention_mask.bool().clone()
    fed[torch.arange(ro.batch_size), last] = False
    assert torch.equal(ro.routing[..., 0] >= 0, fed[..., None].expand_as(ro.routing[..., 0]))
    assert torch.equal(ro.routing[fed], routed[fed])
    assert (routed[ro.attention_mask == 0] == -1).all()


@pytest.mark.parametrize(
    "numerics",
    [
        ("bf16", {}),
        ("fp32", dict(weight_quant="fp8_e4m3")),
        ("bf16", dict(weight_quant="fp4", activation_quant="fp8_e4m3")),
    ],
)
def test_low_precision_engines_mismatch_a_little(ckpt, trainer, numerics):
    dtype, quant = numerics
    eng = TorchInferenceEngine(ckpt, Placement(dtype=dtype), **quant)
    ro = eng.generate(_prompts(eng), SamplingParams(n=4, max_new_tokens=10), seed=2)
    eng.close()
    logp, _ = _recompute(trainer, ro)
    resp = ro.response_mask > 0
    gap = (logp - ro.logp)[resp].abs().mean()
    k1 = (ro.logp - logp)[resp].mean()  # KL(μ‖π) estimate on tokens sampled from μ
    assert 1e-4 < gap < 0.2, gap
    assert math.isfinite(k1)
    assert (ro.routing >= 0).any()


def test_n_per_prompt_layout(engine):
    prompts = _prompts(engine)
    n, cap = 3, 6
    ro = engine.generate(prompts, SamplingParams(n=n, max_new_tokens=cap), seed=3)
    assert ro.batch_size == len(prompts) * n
    lengths = ro.response_lengths()
    for row in range(ro.batch_size):
        p = prompts[row // n]
        assert ro.input_ids[row, : len(p)].tolist() == p
        total = len(p) + int(lengths[row])
        assert ro.attention_mask[row].tolist() == [1] * total + [0] * (
            ro.input_ids.shape[1] - total
        )
        assert ro.response_mask[row, : len(p)].sum() == 0
        assert (ro.input_ids[row, total:] == engine.pad_id).all()
        assert 1 <= lengths[row] <= cap
    assert ro.input_ids.shape[1] == int((ro.attention_mask.sum(1)).max())
    assert ro.routing.shape == (*ro.input_ids.shape, 2, 2)


def test_eos_ends_a_response_and_the_cap_truncates(engine):
    # a random policy samples EOS (1 of 99 tokens) now and then: some rows stop, some hit the cap
    cap = 40
    ro = engine.generate(_prompts(engine), SamplingParams(n=8, max_new_tokens=cap), seed=4)
    lengths = ro.response_lengths().long()
    stopped = ~ro.truncated
    assert stopped.any() and ro.truncated.any()
    for row in range(ro.batch_size):
        resp = ro.input_ids[row][ro.response_mask[row] > 0]
        eos_at = (resp == engine.eos_id).nonzero().flatten().tolist()
        if ro.truncated[row]:
            assert lengths[row] == cap and eos_at == []
        else:
            assert eos_at == [int(lengths[row]) - 1]  # EOS included, once, last


def test_update_weights_makes_the_engine_match_a_changed_model(ckpt):
    trainer = TorchTrainingEngine(ckpt, UpdateSettings(lr=1e-2))
    engine = TorchInferenceEngine(ckpt, Placement(dtype="fp32"))
    ro = engine.generate(_prompts(engine), SamplingParams(n=2, max_new_tokens=6), seed=5)
    logp, _, _ = trainer.forward_logprobs(ro.input_ids, ro.attention_mask, ro.response_mask)
    trainer.step(-(logp.sum()))  # push up the sampled tokens
    before, _ = _recompute(trainer, ro)
    assert (before - ro.logp).abs().max() > 1e-3  # the engine is now stale
    engine.update_weights(trainer.model)
    ro2 = engine.generate(_prompts(engine), SamplingParams(n=2, max_new_tokens=6), seed=5)
    after, _ = _recompute(trainer, ro2)
    assert (after - ro2.logp).abs().max() < 1e-5
    engine.close()

    fp8 = TorchInferenceEngine(ckpt, Placement(dtype="bf16"), weight_quant="fp8_e4m3")
    fp8.update_weights(trainer.model)
    from trainer.engines.quant import round_weight

    src = trainer.model.model.layers[1].mlp.experts.down_proj
    dst = fp8.model.model.layers[1].mlp.experts.down_proj
    assert torch.equal(dst, round_weight(src, "fp8_e4m3").to(torch.bfloat16))
    assert torch.equal(fp8.model.lm_head.weight, trainer.model.lm_head.weight.bfloat16())
    dense = build_tiny_checkpoint(ModelConfig(arch="qwen3"), ckpt.parent / "dense")
    other = TorchTrainingEngine(dense, UpdateSettings())
    with pytest.raises(ValueError, match="missing"):
        fp8.update_weights(other.model)
    fp8.close()


def test_sampler_filters_and_logprobs_of_the_sampling_distribution():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    kept = _filter_logits(logits, top_k=0, top_p=0.75).isfinite()
    assert kept.tolist() == [[True, True, False, False]]  # smallest set with mass >= 0.75
    assert _filter_logits(logits, top_k=3, top_p=1.0).isfinite().tolist() == [
        [True, True, True, False]
    ]
    g = torch.Generator().manual_seed(0)
    many = logits.expand(20000, 4)
    tok, lp = sample_next(many, SamplingParams(temperature=1.0, top_p=0.75), g)
    assert set(tok.tolist()) == {0, 1}
    kept_probs = torch.tensor([0.5, 0.3, 0.0, 0.0]) / 0.8  # μ: renormalised over the nucleus
    torch.testing.assert_close(lp, kept_probs[tok].log())
    freq = torch.bincount(tok, minlength=4) / len(tok)
    assert abs(freq[0] - 0.5 / 0.8) < 0.015
    tok, lp = sample_next(many, SamplingParams(temperature=2.0), g)
    target = torch.softmax(logits[0] / 2.0, -1)
    assert (torch.bincount(tok, minlength=4) / len(tok) - target).abs().max() < 0.015
    torch.testing.assert_close(lp, target[tok].log())  # μ: after temperature
    tok, _ = sample_next(logits, SamplingParams(temperature=0.0), g)
    assert tok.tolist() == [0]


def test_factory_picks_the_configured_backend(ckpt):
    from trainer.engines.factory import make_inference_engine

    eng = make_inference_engine(ckpt, EngineConfig(inference="torch", inference_dtype="fp32"))
    assert isinstance(eng, TorchInferenceEngine) and eng.model.dtype == torch.float32
    assert eng.exact and eng.weight_quant == "none"
    eng.close()
    numerics = EngineConfig(device="cpu", weight_quant="fp4", activation_quant="fp8_e4m3")
    eng = make_inference_engine(ckpt, numerics)  # each setting reaches the engine
    assert eng.device == torch.device("cpu") and eng.model.dtype == torch.bfloat16
    assert (eng.weight_quant, eng.activation_quant) == ("fp4", "fp8_e4m3") and not eng.exact
    assert eng._act_hooks  # the activations are rounded
    eng.close()
    with pytest.raises(UserError, match="vllm_in_process"):
        make_inference_engine(ckpt, EngineConfig(inference="vllm", vllm_in_process=False))
