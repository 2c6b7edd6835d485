"""Held-out evaluation: the KV-cache decoder against a full-recompute reference, padding
invariance, seeded sampling from the right distribution, and exact accuracies."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trainer.engines.base import Rollout
from trainer.evaluate import EvalConfig, decode_responses, encode_prompts, evaluate, generate
from trainer.models import ModelConfig, build_tiny_checkpoint, load_policy
from trainer.tasks import TaskConfig, make_task


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = build_tiny_checkpoint(ModelConfig(seed=3), tmp_path_factory.mktemp("tiny"))
    return load_policy(path, torch.float32)


def _greedy_reference(model, prompt, max_new_tokens, eos_id):
    """No cache, no padding: re-run the whole sequence for every token."""
    ids = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            out.append(token)
            ids.append(token)
            if token == eos_id:
                break
    return out


def test_greedy_kv_cache_matches_full_recompute_and_ignores_padding(policy):
    model, tok = policy
    prompts = encode_prompts(tok, ["12+34=", "9+987654=", "5="])  # different lengths
    kw = dict(max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, greedy=True)
    batched = generate(model, prompts, n=1, **kw)
    for prompt, got in zip(prompts, batched, strict=True):
        assert got == _greedy_reference(model, prompt, 12, tok.eos_token_id)
        assert generate(model, [prompt], n=1, **kw) == [got]  # alone == in a padded batch


def test_sampling_is_seeded_and_follows_the_model(policy):
    model, tok = policy
    prompt = encode_prompts(tok, ["3+4="])[0]
    kw = dict(eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, greedy=False)
    a = generate(model, [prompt], n=8, max_new_tokens=6, seed=1, **kw)
    assert a == generate(model, [prompt], n=8, max_new_tokens=6, seed=1, **kw)
    assert a != generate(model, [prompt], n=8, max_new_tokens=6, seed=2, **kw)
    # first tokens of 4000 samples at temperature 2 against softmax(logits / 2)
    first = generate(
        model, [prompt], n=4000, max_new_tokens=1, seed=0, temperature=2.0, batch_size=4000, **kw
    )
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1] / 2.0, -1)
    counts = torch.bincount(torch.tensor([r[0] for r in first]), minlength=probs.numel())
    freq = counts.double() / counts.sum()
    top = probs.argsort(descending=True)[:5]
    assert torch.allclose(freq[top], probs[top].double(), atol=4 * (0.25 / 4000) ** 0.5)


class _Oracle(torch.nn.Module):
    """Test double of a causal LM: answers each prompt with its task target, except the
    prompts listed in `wrong`, whose answers get a wrong last digit."""

    def __init__(self, tok, task, wrong: set[str]):
        super().__init__()
        self.tok, self.wrong = tok, wrong
        self.targets = {ex.prompt: ex.target for ex in task.heldout()}

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache):
        if past_key_values is None:  # the prompt: remember it per row
            texts = self.tok.batch_decode(input_ids, skip_special_tokens=True)
            past_key_values = [[t, ""] for t in texts]
        else:
            for state, token in zip(past_key_values, input_ids[:, 0].tolist(), strict=True):
                state[1] += self.tok.decode([token], skip_special_tokens=True)
        logits = torch.full((len(past_key_values), 1, len(self.tok)), -30.0)
        for row, (prompt, done) in enumerate(past_key_values):
            target = self.targets[prompt]
            if prompt in self.wrong:
                target = target[:-1] + str((int(target[-1]) + 1) % 10)
            nxt = target[len(done)] if len(done) < len(target) else None
            tid = self.tok.eos_token_id if nxt is None else self.tok.convert_tokens_to_ids(nxt)
            logits[row, 0, tid] = 30.0
        return SimpleNamespace(logits=logits, past_key_values=past_key_values)


def test_evaluate_counts_exact_accuracy(policy):
    _, tok = policy
    task = make_task(TaskConfig(kind="add_trace", digits=3, heldout_size=40))
    wrong = {ex.prompt for ex in task.heldout()[:10]}
    oracle = _Oracle(tok, task, wrong)
    cfg = EvalConfig(mode="both", samples=3)
    metrics = evaluate(oracle, tok, task, cfg, max_new_tokens=task.max_target_chars + 1)
    assert metrics == {"eval/acc_greedy": 0.75, "eval/acc_sampled": 0.75, "eval/acc": 0.75}
    # a cap one token too short truncates every answer: nothing is correct
    short = evaluate(oracle, tok, task, EvalConfig(mode="greedy"), max_new_tokens=8)
    assert short == {"eval/acc_greedy": 0.0, "eval/acc": 0.0}


class _Engine:
    """Test double of an InferenceEngine: returns the targets, every other one wrong."""

    def __init__(self, tok, task):
        self.tok, self.task, self.calls = tok, task, []

    def generate(self, prompts, params, seed):
        self.calls.append(params)
        rows, masks = [], []
        for i, (prompt, ex) in enumerate(zip(prompts, self.task.heldout(), strict=True)):
            for j in range(params.n):
                text = ex.target if (i + j) % 2 == 0 else "0>0"
                resp = self.tok(text, add_special_tokens=False)["input_ids"]
                rows.append(list(prompt) + resp + [self.tok.eos_token_id])
                masks.append([0] * len(prompt) + [1] * (len(resp) + 1))
        width = max(map(len, rows))
        ids = torch.tensor([r + [self.tok.pad_token_id] * (width - len(r)) for r in rows])
        mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.float32)
        attn = (ids != self.tok.pad_token_id).long()
        truncated = torch.zeros(len(rows), dtype=torch.bool)
        return Rollout(ids, attn, mask, torch.zeros_like(mask), truncated)


def test_evaluate_with_an_inference_engine(policy):
    _, tok = policy
    task = make_task(TaskConfig(kind="add_trace", digits=3, heldout_size=9))
    engine = _Engine(tok, task)
    metrics = evaluate(engine, tok, task, EvalConfig(samples=2), max_new_tokens=40)
    assert metrics["eval/acc_greedy"] == pytest.approx(5 / 9)  # rows 0, 2, 4, 6, 8
    assert metrics["eval/acc_sampled"] == pytest.approx(0.5)
    greedy, sampled = engine.calls
    assert greedy.temperature == 0.0 and greedy.n == 1 and sampled.n == 2
    assert sampled.max_new_tokens == 40


def test_decode_cuts_at_eos(policy):
    _, tok = policy
    ids = tok("12>3", add_special_tokens=False)["input_ids"]
    assert decode_responses(tok, [[*ids, tok.eos_token_id, *ids], ids]) == ["12>3", "12>3"]
