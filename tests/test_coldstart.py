"""Cold start: target-only labels, the lr schedule by hand, SFT that learns, and the cache
(reused on the second call, keyed on exactly the configs that shape the weights, never
left half-written)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from trainer import coldstart as cs
from trainer.coldstart import ColdStartConfig, cache_key, cold_start, lr_at, sft_batch
from trainer.evaluate import EvalConfig
from trainer.models import ModelConfig, build_tiny_checkpoint, load_policy
from trainer.models.tokenizer import build_char_tokenizer
from trainer.tasks import Example, TaskConfig, make_task

TASK = TaskConfig(kind="add_trace", digits=2, heldout_size=16)
QUICK = EvalConfig(samples=1, batch_size=64)


def test_labels_cover_target_and_eos_only():
    tok = build_char_tokenizer()
    batch = sft_batch(tok, [Example("12+34=", "46", "46"), Example("5+5=", "10>10", "10")])
    ids, labels, attn = batch["input_ids"], batch["labels"], batch["attention_mask"]
    assert tok.decode(ids[0][attn[0] > 0]) == "<bos>12+34=46<eos>"
    first = labels[0][labels[0] != -100].tolist()
    assert tok.decode(first) == "46<eos>"
    second = labels[1][labels[1] != -100].tolist()
    assert tok.decode(second) == "10>10<eos>"
    assert (labels[1][: len("<bos>5+5=") - len("<bos>") + 1] == -100).all()  # prompt
    assert (labels[attn == 0] == -100).all()  # padding


def test_lr_schedule_by_hand():
    cfg = ColdStartConfig(steps=12, warmup_steps=2, lr=1.0, min_lr_ratio=0.1)
    assert [lr_at(cfg, s) for s in (1, 2)] == [0.5, 1.0]
    assert lr_at(cfg, 7) == pytest.approx(0.55)  # half way through the cosine
    assert lr_at(cfg, 12) == pytest.approx(0.1)
    flat = dataclasses.replace(cfg, lr_schedule="constant")
    assert lr_at(flat, 9) == 1.0


def test_cache_key_covers_what_shapes_the_weights():
    base = cache_key(ModelConfig(), TASK, ColdStartConfig())
    assert base == cache_key(ModelConfig(), TASK, ColdStartConfig(cache_dir="/elsewhere"))
    changed = [
        cache_key(ModelConfig(seed=1), TASK, ColdStartConfig()),
        cache_key(ModelConfig(), dataclasses.replace(TASK, digits=3), ColdStartConfig()),
        cache_key(ModelConfig(), TASK, ColdStartConfig(lr=1e-3)),
        cache_key(ModelConfig(), TASK, ColdStartConfig(steps=401)),
    ]
    assert len({base, *changed}) == 5


def test_cold_start_trains_once_then_reuses(tmp_path):
    cfg = ColdStartConfig(
        steps=25, batch_size=32, warmup_steps=5, stop_at_sampled_acc=None, cache_dir=str(tmp_path)
    )
    first = cold_start(ModelConfig(), TASK, cfg, eval_cfg=QUICK, progress=False)
    assert not first.reused and first.path.parent == tmp_path
    assert first.metrics["coldstart/loss"] < 3.2  # from ln(101) ≈ 4.6 at random init
    assert {"coldstart/acc_greedy", "coldstart/acc_sampled"} <= set(first.metrics)
    weights = (first.path / "model.safetensors").stat().st_mtime_ns
    assert [p.name for p in tmp_path.iterdir()] == [first.path.name]  # no temp dir left

    again = cold_start(ModelConfig(), TASK, cfg, eval_cfg=QUICK, progress=False)
    assert again.reused and again.path == first.path and again.metrics == first.metrics
    assert (again.path / "model.safetensors").stat().st_mtime_ns == weights

    # the checkpoint is the trained model: its loss on a batch is the trained level
    model, tok = load_policy(first.path)
    batch = sft_batch(tok, make_task(TASK).sample_train(64, seed="check"))
    with torch.no_grad():
        assert model(**batch).loss.item() < 3.2


def test_stops_at_the_first_check_that_reaches_the_target(monkeypatch):
    calls = []

    def fake_check(model, tokenizer, task, examples, seed):
        calls.append({ex.prompt for ex in examples})
        return [0.0, 0.1, 0.29, 0.31, 0.9][len(calls) - 1]

    monkeypatch.setattr(cs, "check_accuracy", fake_check)
    model = torch.nn.Linear(1, 1)
    fake_loss = SimpleNamespace(loss=None)

    def forward(**batch):
        fake_loss.loss = (model.weight**2).sum() + 1.0
        return fake_loss

    monkeypatch.setattr(model, "forward", forward)
    cfg = ColdStartConfig(steps=100, check_every=3, stop_at_sampled_acc=0.3, check_prompts=8)
    task = make_task(TASK)
    result = cs.train_sft(model, build_char_tokenizer(), task, cfg, progress=False)
    assert result.steps == 12 and result.check_acc == 0.31  # checks at 3, 6, 9, 12
    assert len(calls) == 4 and all(c == calls[0] for c in calls)  # one fixed check set
    held = {ex.prompt for ex in task.heldout()}
    assert calls[0].isdisjoint(held)  # the stopping rule never sees held-out prompts


def test_failed_cold_start_leaves_no_cache_entry(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(cs, "train_sft", boom)
    cfg = ColdStartConfig(steps=2, cache_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="killed"):
        cold_start(ModelConfig(), TASK, cfg, eval_cfg=QUICK, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_disabled_cold_start_is_the_random_model(tmp_path):
    cfg = ColdStartConfig(enabled=False, cache_dir=str(tmp_path))
    start = cold_start(ModelConfig(), TASK, cfg, eval_cfg=QUICK, progress=False)
    assert start.metrics["coldstart/steps"] == 0 and "coldstart/loss" not in start.metrics
    assert start.metrics["coldstart/acc_greedy"] == 0.0
    model, _ = load_policy(start.path)
    fresh, _ = load_policy(build_tiny_checkpoint(ModelConfig(), tmp_path / "fresh"))
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)
