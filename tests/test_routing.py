"""Routing capture and replay on real transformers MoE models (Qwen3-MoE, OLMoE, Mixtral),
checked against an independent float64 recomputation of the router and the experts."""

import pytest
import torch
import torch.nn.functional as F

from trainer import routing
from trainer.models import ModelConfig

ARCHS = {
    "qwen3_moe": ModelConfig(arch="qwen3_moe", seed=1),
    "olmoe": ModelConfig(arch="olmoe", num_heads=2, norm_topk_prob=False, seed=2),
    "mixtral": ModelConfig(arch="mixtral", seed=3),
}
B, S = 3, 9


def _model(arch: str, dtype=torch.float32):
    import transformers

    cfg = ARCHS[arch]
    torch.manual_seed(cfg.seed)
    hf = cfg.hf_config(vocab_size=99, pad_id=0, bos_id=1, eos_id=2)
    return transformers.AutoModelForCausalLM.from_config(hf, dtype=dtype).eval()


@pytest.fixture(scope="module", params=list(ARCHS))
def model(request):
    return _model(request.param)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 6:] = 0  # a right-padded row
    ids[1, 6:] = 0
    return ids, mask


def _block_io(model):
    """Hooks that keep each MoE block's input [B, S, H] and output, per layer."""
    seen = {"in": [], "out": []}

    def hook(_m, args, out):
        seen["in"].append(args[0].detach())
        seen["out"].append(out.detach())

    blocks = [r.block for r in routing._routers(model)]
    return seen, [b.register_forward_hook(hook) for b in blocks]


def _reference_block(block, x, experts, renormalise):
    """One token's MoE block output in float64, from the weights, for a given expert set."""
    x = x.double()
    probs = torch.softmax(block.gate.weight.double() @ x, dim=-1)
    w = probs[experts]
    if renormalise:
        w = w / w.sum()
    out = torch.zeros_like(x)
    for e, we in zip(experts.tolist(), w, strict=True):
        gate, up = (block.experts.gate_up_proj[e].double() @ x).chunk(2)
        out += we * (block.experts.down_proj[e].double() @ (F.silu(gate) * up))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_replaying_recorded_routing_is_bit_identical(arch, dtype):
    model = _model(arch, dtype)
    ids, mask = _batch()
    with torch.no_grad(), routing.record(model) as rec:
        live = model(input_ids=ids, attention_mask=mask).logits
    idx = rec.indices()
    assert idx.shape == (B, S, routing.num_moe_layers(model), 2) and idx.dtype == torch.long
    with torch.no_grad(), routing.replay(model, idx):
        replayed = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(live, replayed)


def test_recorded_layout_is_batch_seq_layer_k(model):
    """Index [b, s, l] is the top-k of the router of layer l on token (b, s): compared with
    a float64 top-k of the block's own input, taken from a hook."""
    ids, mask = _batch(1)
    seen, handles = _block_io(model)
    with torch.no_grad(), routing.record(model) as rec:
        model(input_ids=ids, attention_mask=mask)
    for h in handles:
        h.remove()
    idx = rec.indices()
    for layer, x in enumerate(seen["in"]):  # x [B, S, H]
        gate = routing._routers(model)[layer].gate.weight.double()
        ref = torch.topk(x.double() @ gate.T, 2, dim=-1).indices  # softmax keeps the order
        assert torch.equal(idx[:, :, layer], ref)


def test_record_spans_prefill_and_decode_along_s(model):
    """Forwards inside one record() are laid end to end: prefill + cached decode steps give
    the routing of one full forward over the same tokens."""
    from transformers import DynamicCache

    ids, _ = _batch(2)
    with torch.no_grad(), routing.record(model) as full:
        model(input_ids=ids)
    with torch.no_grad(), routing.record(model) as steps:
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :5], past_key_values=cache, use_cache=True)
        for j in range(5, S):
            model(input_ids=ids[:, j : j + 1], past_key_values=cache, use_cache=True)
    assert steps.num_forwards == 1 + S - 5
    assert torch.equal(full.indices(), steps.indices())


def test_replay_keeps_router_gradients(model):
    ids, mask = _batch(3)
    with torch.no_grad(), routing.record(model) as rec:
        model(input_ids=ids, attention_mask=mask)
    grads = {}
    for name, idx in (("live", None), ("replay", rec.indices())):
        model.zero_grad()
        if idx is None:
            logits = model(input_ids=ids, attention_mask=mask).logits
        else:
            with routing.replay(model, idx):
                logits = model(input_ids=ids, attention_mask=mask).logits
        logits.float().log_softmax(-1)[..., 5].sum().backward()
        grads[name] = [r.gate.weight.grad.clone() for r in routing._routers(model)]
    for g_live, g_replay in zip(grads["live"], grads["replay"], strict=True):
        assert g_replay.abs().sum() > 0
        torch.testing.assert_close(g_replay, g_live, rtol=1e-5, atol=1e-8)
    model.zero_grad()


def test_forced_experts_follow_hand_computed_reference(model):
    """Replaying other experts changes the output; the block's output on one token equals
    the float64 mixture of the forced experts with gate weights from the live logits."""
    ids, mask = _batch(4)
    with torch.no_grad(), routing.record(model) as rec:
        live = model(input_ids=ids, attention_mask=mask).logits
    idx = rec.indices()
    forced = idx.clone()
    b, s, num_experts = 2, 4, routing._routers(model)[0].gate.num_experts
    # pick, for layer 0 on token (b, s), two experts the router did not choose, reversed
    others = [e for e in range(num_experts) if e not in idx[b, s, 0].tolist()]
    forced[b, s, 0] = torch.tensor([others[-1], others[0]])
    seen, handles = _block_io(model)
    with torch.no_grad(), routing.replay(model, forced):
        out = model(input_ids=ids, attention_mask=mask).logits
    for h in handles:
        h.remove()
    assert not torch.equal(out[b, s], live[b, s])
    # other rows keep their experts; equal up to the grouping of tokens per expert
    torch.testing.assert_close(out[:b], live[:b], rtol=1e-5, atol=1e-6)
    router = routing._routers(model)[0]
    ref = _reference_block(router.block, seen["in"][0][b, s], forced[b, s, 0], router.renormalise)
    torch.testing.assert_close(seen["out"][0][b, s].double(), ref, rtol=1e-5, atol=1e-7)


def test_unknown_rows_fall_back_to_the_live_top_k(model):
    ids, mask = _batch(5)
    with torch.no_grad(), routing.record(model) as rec:
        live = model(input_ids=ids, attention_mask=mask).logits
    idx = rec.indices()
    with torch.no_grad(), routing.replay(model, torch.full_like(idx, -1)):
        assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, live)

    # force other experts on a token of layer 1 everywhere, but mark (0, 2, 1) unknown:
    # the result equals replaying the same tensor with that row filled by the live choice
    num_experts = routing._routers(model)[0].gate.num_experts
    shifted = (idx + 1) % num_experts
    partial = shifted.clone()
    partial[0, 2, 1] = torch.tensor([-1, 3])  # any -1 makes the whole row unknown
    filled = shifted.clone()
    with torch.no_grad(), routing.replay(model, partial), routing.record(model) as under:
        a = model(input_ids=ids, attention_mask=mask).logits
    filled[0, 2, 1] = under.indices()[0, 2, 1]  # the live choice at that row, under replay
    with torch.no_grad(), routing.replay(model, filled):
        b = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(a, b)
    assert not torch.equal(a, live)


def test_replay_rejects_what_it_cannot_replay():
    model = _model("qwen3_moe")
    ids, _ = _batch()
    good = torch.zeros(B, S, 2, 2, dtype=torch.long)
    good[..., 1] = 1
    bad_cases = {
        "expected": good[:, :, :1],  # wrong L
        "outside": good.clone().fill_(8),
        "repeat": torch.zeros_like(good),
        "int64": good.int(),
    }
    for match, idx in bad_cases.items():
        with pytest.raises(ValueError, match=match), routing.replay(model, idx):
            pass
    with pytest.raises(ValueError, match="consumed"), routing.replay(model, good):
        model(input_ids=ids[:, :4])
    with pytest.raises(ValueError, match="past"), routing.replay(model, good[:, :4]):
        model(input_ids=ids)
    dense = ModelConfig(arch="qwen3").hf_config(99, 0, 1, 2)
    import transformers

    assert routing.num_moe_layers(transformers.AutoModelForCausalLM.from_config(dense)) == 0
