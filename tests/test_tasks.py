"""Tasks: determinism by seed, a provably disjoint held-out split, verifiers, JSONL errors."""

from __future__ import annotations

import json
import random
import sys
import textwrap

import pytest

from core.errors import UserError
from trainer.tasks import TaskConfig, in_heldout, make_task
from trainer.tasks.generated import KINDS, GeneratedTask, add_trace_target
from trainer.tasks.verifiers import exact, numeric, resolve_verifier


@pytest.mark.parametrize("kind", ["add", "add_trace", "reverse", "sort"])
def test_generation_is_deterministic_by_seed(kind):
    a = make_task(TaskConfig(kind=kind, digits=4, seed=3))
    b = make_task(TaskConfig(kind=kind, digits=4, seed=3))
    assert a.heldout() == b.heldout()
    assert a.sample_train(32, seed=7) == b.sample_train(32, seed=7)
    assert a.sample_train(32, seed=7) != a.sample_train(32, seed=8)
    other = make_task(TaskConfig(kind=kind, digits=4, seed=4))
    assert other.heldout() != a.heldout()


def test_a_task_is_usable_without_the_config():
    """make_task passes every TaskConfig field the task uses: the same task built by hand."""
    cfg = TaskConfig(kind="sort", digits=5, seed=2, heldout_size=30, heldout_frac=0.3)
    by_hand = GeneratedTask("sort", exact, digits=5, seed=2, heldout_size=30, heldout_frac=0.3)
    task = make_task(cfg)
    assert task.heldout() == by_hand.heldout() and len(task.heldout()) == 30
    assert task.sample_train(16, seed=1) == by_hand.sample_train(16, seed=1)


def test_split_is_disjoint_over_the_whole_space():
    """Enumerate every prompt of 2-digit addition: each is on exactly one side, train
    draws never hit a held-out prompt, and the held-out share is close to heldout_frac."""
    cfg = TaskConfig(kind="add", digits=2, seed=5, heldout_size=100, heldout_frac=0.2)
    task = make_task(cfg)
    every = [f"{a}+{b}=" for a in range(10, 100) for b in range(10, 100)]
    held = {p for p in every if in_heldout(p, cfg.seed, cfg.heldout_frac)}
    assert 0.17 < len(held) / len(every) < 0.23
    heldout_prompts = {ex.prompt for ex in task.heldout()}
    assert len(heldout_prompts) == cfg.heldout_size  # distinct
    assert heldout_prompts <= held
    train_prompts = {ex.prompt for s in range(40) for ex in task.sample_train(64, seed=s)}
    assert train_prompts.isdisjoint(held)
    assert len(train_prompts) > 1000  # the train side is really sampled, not a few prompts


def test_add_trace_target_by_hand():
    assert add_trace_target(347, 685) == "7+5+0=12,4+8+1=13,3+6+1=10>1032"
    assert add_trace_target(12, 34) == "2+4+0=06,1+3+0=04>46"
    task = make_task(TaskConfig(kind="add_trace", digits=3))
    for ex in task.sample_train(200, seed=0):
        a, b = (int(x) for x in ex.prompt.rstrip("=").split("+"))
        assert ex.answer == str(a + b)
        assert ex.target.endswith(">" + ex.answer)
        assert len(ex.target) <= task.max_target_chars
        assert task.reward(ex.target, ex.answer) == 1.0


@pytest.mark.parametrize("kind", list(KINDS))
def test_max_target_chars_is_tight(kind):
    task = make_task(TaskConfig(kind=kind, digits=4))
    lengths = [len(ex.target) for ex in task.sample_train(2000, seed=1)]
    assert max(lengths) == task.max_target_chars


def test_reward_judges_the_final_answer_only():
    task = make_task(TaskConfig(kind="add_trace", digits=3))
    assert task.reward("garbage trace>1032", "1032") == 1.0
    assert task.reward("7+5+0=12>1032 ", "1032") == 1.0
    assert task.reward("1032", "1032") == 0.0  # no marker: no final answer
    assert task.reward("x>1031", "1032") == 0.0
    assert task.reward("a>9>1032", "1032") == 1.0  # the last marker counts
    add = make_task(TaskConfig(kind="add", digits=3))
    assert add.reward("1032", "1032") == 1.0
    assert add.reward("10320", "1032") == 0.0


def test_builtin_verifiers():
    assert exact(" 42\n", "42") == 1.0
    assert exact("042", "42") == 0.0
    assert numeric("so x = 12.0", "12") == 1.0
    assert numeric("1,234", "1234") == 1.0
    assert numeric("12 then 13", "12") == 0.0  # the last number counts
    assert numeric("-3e2", "-300") == 1.0
    assert numeric("no number", "1") == 0.0
    assert numeric("12.0000001", "12") == 1.0  # within 1e-6 relative
    assert numeric("12.001", "12") == 0.0


def test_user_verifier_module_function(tmp_path, monkeypatch):
    (tmp_path / "myverif.py").write_text(
        textwrap.dedent(
            """
            def lower(response, answer):
                return response.strip().lower() == answer.lower()
            def half(response, answer):
                return 0.5
            def boom(response, answer):
                raise KeyError("x")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "myverif", raising=False)
    v = resolve_verifier("myverif:lower")
    assert v(" ABC ", "abc") == 1.0 and v("abd", "abc") == 0.0
    with pytest.raises(UserError, match=r"returned 0\.5"):
        resolve_verifier("myverif:half")("a", "a")
    with pytest.raises(UserError, match="raised KeyError"):
        resolve_verifier("myverif:boom")("a", "a")
    with pytest.raises(UserError, match="no function 'nope'"):
        resolve_verifier("myverif:nope")
    with pytest.raises(UserError, match="cannot import"):
        resolve_verifier("no_such_module_xyz:f")


def _write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_jsonl_task_split_and_sampling(tmp_path):
    rows = [{"prompt": f"q{i}?", "answer": str(i)} for i in range(300)]
    rows[0]["target"] = "because 0"
    path = _write(tmp_path / "d.jsonl", rows)
    task = make_task(TaskConfig(kind="jsonl", train_path=path, heldout_frac=0.2, heldout_size=500))
    held = {ex.prompt for ex in task.heldout()}
    train = {ex.prompt for ex in task.train}
    assert held and train and held.isdisjoint(train) and len(held | train) == 300
    assert task.sample_train(10, seed=1) == task.sample_train(10, seed=1)
    assert len(task.sample_train(1000, seed=2)) == 1000  # more than the set: with replacement
    assert task.reward(" 7 ", "7") == 1.0
    by_prompt = {ex.prompt: ex for ex in task.train + task.heldout()}
    assert by_prompt["q0?"].target == "because 0" and by_prompt["q1?"].target == "1"
    # an eval file: its prompts are removed from training
    eval_path = _write(tmp_path / "e.jsonl", rows[:5])
    task = make_task(TaskConfig(kind="jsonl", train_path=path, eval_path=eval_path))
    assert len(task.heldout()) == 5 and len(task.train) == 295


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        ('["a"]', "line 2: expected an object"),
        ('{"prompt": "a"}', "line 2: missing 'answer'"),
        ('{"prompt": "a", "answer": 3}', "line 2: 'answer' must be a non-empty string"),
        ('{"prompt": "", "answer": "3"}', "line 2: 'prompt' must be a non-empty string"),
        ('{"prompt": "a", "answer": "3", "extra": 1}', r"line 2: unknown key\(s\) \['extra'\]"),
    ],
)
def test_jsonl_bad_lines_name_the_line(tmp_path, line, message):
    path = _write(tmp_path / "bad.jsonl", [{"prompt": "p", "answer": "a"}, line])
    with pytest.raises(UserError, match=message):
        make_task(TaskConfig(kind="jsonl", train_path=path))


def test_jsonl_file_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        make_task(TaskConfig(kind="jsonl", train_path=str(tmp_path / "missing.jsonl")))
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(UserError, match="no examples"):
        make_task(TaskConfig(kind="jsonl", train_path=str(tmp_path / "empty.jsonl")))


def test_too_small_space_is_a_clear_error():
    with pytest.raises(UserError, match="too few for heldout_size"):
        make_task(TaskConfig(kind="sort", digits=2, heldout_size=200))


def test_random_is_not_the_global_rng():
    random.seed(1)
    a = make_task(TaskConfig(kind="add", digits=3)).sample_train(5, seed=0)
    random.seed(2)
    b = make_task(TaskConfig(kind="add", digits=3)).sample_train(5, seed=0)
    assert a == b
