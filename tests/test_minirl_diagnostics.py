"""Diagnostics against independent numpy / pure-python / decimal implementations of the
formulas in each module's docstring, plus hypothesis properties that must hold for any input."""

from __future__ import annotations

import decimal
import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirl import (
    LossConfig,
    approx_residual,
    entropy_metrics,
    grad_cosine,
    group_advantages,
    is_weight,
    minirl_mask,
    mismatch_metrics,
    policy_loss,
    routing_metrics,
    sequence_is_loss,
    token_entropy,
)


def _random_batch(seed, b=6, t=9, scale=0.3):
    rng = np.random.default_rng(seed)
    old = np.log(rng.uniform(0.01, 1.0, (b, t)))
    roll = old + scale * rng.standard_normal((b, t))
    lengths = rng.integers(1, t + 1, b)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float64)
    mask[2] = 0  # one response with no tokens at all
    return old, roll, mask


# --- mismatch -----------------------------------------------------------------------------


def np_mismatch(old, roll, mask, band=(0.5, 2.0)):
    m = mask.astype(bool)
    ell = (old - roll)[m]
    rho = np.exp(ell)
    rows = [i for i in range(len(m)) if m[i].any()]
    seq = np.array([(old[i] - roll[i])[m[i]].sum() for i in rows])
    w = np.exp(seq)
    p_old, p_roll = np.exp(old[m]), np.exp(roll[m])
    return {
        "mismatch/kl_k1": np.mean(-ell),
        "mismatch/kl_k2": 0.5 * np.mean(ell**2),
        "mismatch/kl_k3": np.mean(rho - 1 - ell),
        "mismatch/ratio_mean": rho.mean(),
        "mismatch/ratio_min": rho.min(),
        "mismatch/ratio_max": rho.max(),
        "mismatch/ratio_p01": np.percentile(rho, 1),
        "mismatch/ratio_p99": np.percentile(rho, 99),
        "mismatch/frac_outside_band": np.mean((rho < band[0]) | (rho > band[1])),
        "mismatch/chi2_token": np.mean((rho - 1) ** 2),
        "mismatch/chi2_seq": np.mean((w - 1) ** 2),
        "mismatch/ess": w.sum() ** 2 / (len(w) * (w**2).sum()),
        "mismatch/prob_corr": np.corrcoef(p_old, p_roll)[0, 1],
        "mismatch/max_abs_prob_diff": np.mean(
            [np.abs(np.exp(old[i]) - np.exp(roll[i]))[m[i]].max() for i in rows]
        ),
    }


@pytest.mark.parametrize("seed", range(3))
def test_mismatch_metrics_match_numpy(seed):
    old, roll, mask = _random_batch(seed)
    # garbage on padding must be ignored
    old_t = torch.tensor(np.where(mask > 0, old, np.nan), dtype=torch.float32)
    roll_t = torch.tensor(np.where(mask > 0, roll, -np.inf), dtype=torch.float32)
    got = mismatch_metrics(old_t, roll_t, torch.tensor(mask), band=(0.5, 2.0))
    # the reference sees the same float32-rounded inputs
    want = np_mismatch(
        old_t.double().nan_to_num().numpy(), roll_t.double().nan_to_num().numpy(), mask
    )
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_mismatch_is_zero_when_engines_agree():
    old, _, mask = _random_batch(0)
    t = torch.tensor(old)
    got = mismatch_metrics(t, t.clone(), torch.tensor(mask))
    assert got["mismatch/kl_k1"] == got["mismatch/kl_k3"] == got["mismatch/chi2_seq"] == 0
    assert got["mismatch/ratio_min"] == got["mismatch/ratio_max"] == 1
    assert got["mismatch/ess"] == pytest.approx(1.0, abs=1e-15)
    assert got["mismatch/prob_corr"] == pytest.approx(1.0)


# --- approximation residual ----------------------------------------------------------------


def test_approx_residual_matches_the_direct_formula():
    rng = np.random.default_rng(1)
    lw = 0.2 * rng.standard_normal((5, 7))
    mask = np.ones((5, 7))
    mask[1, 4:] = 0
    want = np.mean(
        [
            abs(np.prod(np.exp(lw[i][mask[i] > 0])) - 1 - np.sum(np.exp(lw[i][mask[i] > 0]) - 1))
            for i in range(5)
        ]
    )
    got = approx_residual(torch.tensor(lw), torch.tensor(mask))["approx/seq_residual"]
    assert got == pytest.approx(want, rel=1e-10)


def test_approx_residual_is_accurate_where_the_direct_formula_cancels():
    """|log w| ~ 1e-10: the residual is ~1e-19 while both sides of the direct difference are
    ~1e-9. Against 60-digit decimal arithmetic the stable form keeps 12+ digits; even the
    expm1 form of the direct difference keeps only ~7, the naive product none."""
    decimal.getcontext().prec = 60
    rng = np.random.default_rng(2)
    lw = 1e-10 * rng.standard_normal((3, 40))
    ref = []
    for row in lw:
        ws = [decimal.Decimal(float(x)).exp() for x in row]
        prod = math.prod(ws, start=decimal.Decimal(1))
        ref.append(abs(prod - 1 - sum(w - 1 for w in ws)))
    want = float(sum(ref) / len(ref))
    got = approx_residual(torch.tensor(lw), torch.ones(3, 40))["approx/seq_residual"]
    assert got == pytest.approx(want, rel=1e-12, abs=0), (got, want)
    direct = np.mean([abs(np.expm1(r.sum()) - np.sum(np.expm1(r))) for r in lw])
    assert abs(direct - want) > 1e-9 * want  # the direct difference really does lose digits


def test_approx_residual_is_zero_for_one_token_responses():
    lw = torch.tensor([[0.7, 0.0], [-2.0, 0.0]], dtype=torch.float64)
    got = approx_residual(lw, torch.tensor([[1, 0], [1, 0]]))
    assert got["approx/seq_residual"] == 0.0  # Π w = 1 + (w − 1) exactly


# --- entropy ------------------------------------------------------------------------------


def test_token_entropy_matches_numpy_and_ignores_chunking():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((5, 4, 11)) * 3
    logits[0, 0, :5] = -np.inf  # filtered tokens contribute 0
    want = np.zeros((5, 4))
    for i in range(5):
        for t in range(4):
            z = logits[i, t]
            p = np.exp(z - z.max())
            p /= p.sum()
            nz = p > 0
            want[i, t] = -(p[nz] * np.log(p[nz])).sum()
    for chunk in (None, 1, 3, 7, 100):
        got = token_entropy(torch.tensor(logits), chunk_size=chunk)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    uniform = token_entropy(torch.zeros(1, 1, 11, dtype=torch.bfloat16))
    assert uniform.dtype == torch.float32
    assert float(uniform) == pytest.approx(math.log(11), rel=1e-6)
    mask = torch.tensor([[1, 1, 0, 0]] * 5)
    got = entropy_metrics(torch.tensor(want), mask)
    assert got == {"policy/entropy": pytest.approx(want[:, :2].mean(), rel=1e-12)}


# --- routing ------------------------------------------------------------------------------


def py_routing(a, b, mask, num_experts):
    """Plain loops over python sets."""
    bsz, t, layers, k = len(a), len(a[0]), len(a[0][0]), len(a[0][0][0])
    diff, total, overlap = 0, 0, 0.0
    per_layer = [[0, 0] for _ in range(layers)]
    tok_any, tok_n = 0, 0
    for i in range(bsz):
        for j in range(t):
            if not mask[i][j]:
                continue
            any_diff, any_valid = False, False
            for layer in range(layers):
                sa, sb = set(a[i][j][layer]), set(b[i][j][layer])
                if -1 in sa or -1 in sb:
                    continue
                any_valid = True
                d = sa != sb
                diff += d
                total += 1
                overlap += len(sa & sb) / k
                per_layer[layer][0] += d
                per_layer[layer][1] += 1
                any_diff |= d
            tok_n += any_valid
            tok_any += any_diff
    cvs = []
    for layer in range(layers):
        counts = [0] * num_experts
        for i in range(bsz):
            for j in range(t):
                ids = a[i][j][layer]
                if mask[i][j] and -1 not in ids:
                    for e in ids:
                        counts[e] += 1
        if sum(counts):
            cvs.append(float(np.std(counts) / np.mean(counts)))
    return diff / total, overlap / total, tok_any / tok_n, per_layer, float(np.mean(cvs))


def test_routing_metrics_match_python_sets():
    g = torch.Generator().manual_seed(4)
    bsz, t, layers, k, e = 4, 6, 3, 2, 8
    a = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(bsz * t * layers)])
    a = a.view(bsz, t, layers, k)
    b = a.clone()
    flip = torch.rand(bsz, t, layers, generator=g) < 0.3
    b[flip] = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(int(flip.sum()))])
    b[0, 0, 0] = a[0, 0, 0].flip(0)  # same set, other order: not a difference
    a[1, 1, 2, 0] = -1  # unknown: excluded
    b[2, 3, 1] = -1
    mask = torch.ones(bsz, t, dtype=torch.long)
    mask[3, 4:] = 0
    a[3, 5] = 99  # garbage under padding is not inspected
    got = routing_metrics(a, b, mask, e, "mismatch_stale")
    a[3, 5] = 0
    frac, overlap, any_diff, per_layer, cv = py_routing(a.tolist(), b.tolist(), mask.tolist(), e)
    assert got["routing/mismatch_stale"] == pytest.approx(frac)
    assert got["routing/mismatch_stale/overlap"] == pytest.approx(overlap)
    assert got["routing/mismatch_stale/tokens_any_layer_diff"] == pytest.approx(any_diff)
    assert got["routing/mismatch_stale/load_cv"] == pytest.approx(cv)
    for i, (d, n) in enumerate(per_layer):
        assert got[f"routing/mismatch_stale/layer{i}"] == pytest.approx(d / n)
    assert "routing/overlap" not in got  # only the headline pair owns the unsuffixed names

    head = routing_metrics(a, b, mask, e, "mismatch_train_infer")
    assert head["routing/overlap"] == head["routing/mismatch_train_infer/overlap"]
    assert head["routing/load_cv"] == pytest.approx(cv)
    assert not set(head) & set(got)  # the two calls merge without a collision


def test_identical_routing_has_no_mismatch():
    a = torch.tensor([[[[0, 1], [2, 3]]]])
    got = routing_metrics(a, a.flip(-1), torch.ones(1, 1), 4, "x")
    assert got["routing/x"] == 0 and got["routing/x/overlap"] == 1


# --- advantages ---------------------------------------------------------------------------


def test_group_advantages_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    assert group_advantages(r, 4).tolist() == [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]
    loo = group_advantages(r, 4, baseline="loo").tolist()
    # R_i − mean of the other three: 1 − 1/3, 0 − 2/3
    assert loo == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0])
    std = group_advantages(r, 4, std_normalize=True, eps=0.0)[:4]
    s = np.std([1, 0, 0, 1], ddof=1)
    assert std.tolist() == pytest.approx([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s])
    assert group_advantages(r, 4, std_normalize=True)[4:].tolist() == [0, 0, 0, 0]
    assert group_advantages(torch.tensor([3, 5]), 2).tolist() == [-1.0, 1.0]  # ints accepted


# --- sequence-level probe -----------------------------------------------------------------


def test_sequence_is_loss_gradient_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.4], [0.2, 0.9]], dtype=torch.float64))
    logp.requires_grad_()
    roll = torch.log(torch.tensor([[0.25, 0.8], [0.1, 0.0]], dtype=torch.float64))
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.tensor([3.0, -1.0], dtype=torch.float64)
    loss = sequence_is_loss(logp, roll, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    w0, w1 = (0.5 / 0.25) * (0.4 / 0.8), 0.2 / 0.1  # Π_t w_t = 1, 2
    assert float(loss.detach()) == pytest.approx(-(w0 * 3 + w1 * -1) / 2)
    want = torch.tensor([[-w0 * 3 / 2] * 2, [w1 / 2, 0.0]], dtype=torch.float64)
    assert torch.allclose(grad, want, rtol=1e-14, atol=0)


def test_grad_cosine_matches_numpy_and_handles_lists():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(30), rng.standard_normal(30)
    want = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert grad_cosine(torch.tensor(a), torch.tensor(b)) == pytest.approx(want, rel=1e-12)
    ga = [torch.tensor(a[:10]).view(2, 5), None, torch.tensor(a[10:])]
    gb = [torch.tensor(b[:10]).view(2, 5), torch.ones(3), torch.tensor(b[10:])]
    # None = zeros: the dot product is unchanged, b's norm gains the three ones
    want_list = a @ b / (np.linalg.norm(a) * math.sqrt(np.linalg.norm(b) ** 2 + 3))
    assert grad_cosine(ga, gb) == pytest.approx(want_list, rel=1e-12)
    assert math.isnan(grad_cosine(torch.zeros(3), torch.ones(3)))
    with pytest.raises(ValueError, match="g1 has 2 parameters but g2 has 1"):
        grad_cosine([torch.ones(1), torch.ones(1)], [torch.ones(1)])


# --- hypothesis properties ------------------------------------------------------------------

logprobs = hnp.arrays(
    np.float64, st.tuples(st.integers(1, 4), st.integers(1, 6)), elements=st.floats(-20, 0)
)


@st.composite
def engine_pairs(draw):
    old = draw(logprobs)
    noise = draw(hnp.arrays(np.float64, old.shape, elements=st.floats(-3, 3)))
    mask = draw(hnp.arrays(np.bool_, old.shape))
    mask[0, 0] = True
    return old, np.minimum(old + noise, 0.0), mask


@settings(max_examples=40, deadline=None)
@given(engine_pairs())
def test_mismatch_properties(pair):
    old, roll, mask = pair
    m = mismatch_metrics(torch.tensor(old), torch.tensor(roll), torch.tensor(mask))
    assert m["mismatch/kl_k3"] >= 0 and m["mismatch/kl_k2"] >= 0
    assert m["mismatch/chi2_token"] >= 0 and m["mismatch/chi2_seq"] >= 0
    lo, hi = m["mismatch/ratio_min"], m["mismatch/ratio_max"]
    assert lo <= m["mismatch/ratio_p01"] <= m["mismatch/ratio_p99"] <= hi
    assert lo * (1 - 1e-12) <= m["mismatch/ratio_mean"] <= hi * (1 + 1e-12)
    assert 0 <= m["mismatch/frac_outside_band"] <= 1
    assert 0 < m["mismatch/ess"] <= 1 + 1e-12
    corr = m["mismatch/prob_corr"]
    assert math.isnan(corr) or -1 <= corr <= 1
    assert 0 <= m["mismatch/max_abs_prob_diff"] <= 1


@settings(max_examples=40, deadline=None)
@given(engine_pairs(), st.sampled_from(["minirl", "dapo", "gspo", "cispo"]))
def test_policy_loss_properties(pair, variant):
    old, roll, mask = pair
    rng = np.random.default_rng(0)
    logp = torch.tensor(old + rng.normal(0, 0.3, old.shape), requires_grad=True)
    adv = torch.tensor(rng.normal(0, 1, old.shape[0]))
    cfg = LossConfig(variant=variant)
    old_t, roll_t, mask_t = torch.tensor(old), torch.tensor(roll), torch.tensor(mask)
    _, s = policy_loss(logp, old_t, roll_t, adv, mask_t, cfg)
    assert math.isfinite(s["optim/loss"])
    assert s["staleness/kl_k3"] >= 0
    assert s["staleness/ratio_min"] <= s["staleness/ratio_max"]
    assert s["staleness/ratio_min"] * (1 - 1e-12) <= s["staleness/ratio_mean"]
    assert s["staleness/ratio_mean"] <= s["staleness/ratio_max"] * (1 + 1e-12)
    assert 0 <= s["staleness/mask_frac"] <= 1 and 0 <= s["is/trunc_frac"] <= 1
    assert 0 < s["is/weight_mean"] <= s["is/weight_max"] * (1 + 1e-12)
    m = minirl_mask(logp.detach() - torch.tensor(old), adv)
    assert set(m.unique().tolist()) <= {0.0, 1.0}


@settings(max_examples=40, deadline=None)
@given(engine_pairs(), st.sampled_from(["token_tis", "seq_tis", "token_mis", "seq_mis", "icepop"]))
def test_is_weight_properties(pair, policy):
    old, roll, mask = pair
    mask_t = torch.tensor(mask)
    f, changed = is_weight(torch.tensor(old - roll), mask_t, policy, cap=5.0, band=(0.5, 5.0))
    assert bool((f >= 0).all()) and bool((f[~mask_t] == 0).all())
    assert not bool((changed & ~mask_t).any())
    if policy.endswith("tis"):
        assert bool((f <= 5.0 * (1 + 1e-12)).all())
    else:  # rejecting policies: a changed token has weight 0, a kept one is ≤ hi
        assert bool((f[changed] == 0).all()) and bool((f <= 5.0 * (1 + 1e-12)).all())
