"""`minirl import`: each format into a run store, peers' names mapped onto ours, malformed
input counted and skipped, hopeless input refused. TensorBoard files come from a real
writer (tensorboardX and the protobuf library), never from our own parser's inverse."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from torchless_cli import run_cli

from app.cli import main
from monitor.importers.names import _PEERS, PEER_NAMES, canonical_name
from monitor.importers.tensorboard import parse_tensorboard
from monitor.store.reader import RunReader


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys):
    """`minirl ...` in-process (fast); the torch-free check runs it in a subprocess below."""

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.fixture
def imp(cli, tmp_path):
    def run(file: Path, *extra: str) -> tuple[Result, Path]:
        out_dir = tmp_path / f"run-{file.name}"
        return cli("import", str(file), "--out", str(out_dir), *extra), out_dir

    return run


def _series(run: Path) -> dict[str, dict[int, float]]:
    with RunReader(run) as reader:
        return {
            name: dict(zip(s.tolist(), v.tolist(), strict=True))
            for name, (s, v) in reader.scalars(reader.metric_names()).items()
        }


# ------------------------------------------------------------------------------ names


def test_peer_names_map_onto_ours_and_unknown_names_stay():
    assert canonical_name("rollout_corr/kl") == "mismatch/kl_k1"  # verl
    assert canonical_name("actor/pg_clipfrac") == "staleness/mask_frac"
    assert canonical_name("mismatch/mismatch_kl") == "mismatch/kl_k1"  # verl, October 2025
    assert canonical_name("mismatch/rollout_is_eff_sample_size") == "mismatch/ess"
    assert canonical_name("sampling/importance_sampling_ratio/max") == "mismatch/ratio_max"  # TRL
    assert canonical_name("train/sampling/importance_sampling_ratio/min") == "mismatch/ratio_min"
    assert canonical_name("train/entropy") == "policy/entropy"  # TRL through HF's prefix
    assert canonical_name("train/train_rollout_logprob_abs_diff") == "mismatch/logprob_abs_diff"
    assert canonical_name("mismatch_kl/mean") == "mismatch/kl_k3"  # prime-rl (k3 estimator)
    assert canonical_name("mismatch_kl/all/mean") == "mismatch/kl_k3"  # prime-rl of 2026
    assert canonical_name("completion_len/mean") == "response/len_mean"  # its orchestrator's
    assert canonical_name("completion_len/max") == "completion_len/max"  # a max of means
    # open-instruct (OLMo 3's RLVR trainer)
    assert canonical_name("debug/vllm_vs_local_logprob_diff_mean") == "mismatch/logprob_abs_diff"
    assert canonical_name("objective/verifiable_correct_rate") == "reward/acc"
    assert canonical_name("policy/clipfrac_avg") == "staleness/mask_frac"
    assert canonical_name("train/gen_kl_error") == "mismatch/kl_k3"  # NeMo-RL (k3 by default)
    assert canonical_name("entropy") == "policy/entropy"
    assert canonical_name("train/vllm_kl") == "mismatch/kl_k1"  # OpenRLHF
    assert canonical_name("train/ppo_clip_ratio") == "staleness/mask_frac"
    assert canonical_name("train/kl") == "train/kl"  # OpenRLHF's KL to the reference model
    assert canonical_name("train/mis_k3_kl") == "mismatch/kl_k3"  # slime's mismatch helper
    assert canonical_name("train/mis_kl") == "mismatch/kl_k1"
    assert canonical_name("rollout_correction/k3_kl") == "mismatch/kl_k3"  # ms-swift
    assert canonical_name("train/rollout_correction/chi2_token") == "mismatch/chi2_token"
    assert canonical_name("rollout_correction/kl") == "rollout_correction/kl"  # its sign moved
    assert canonical_name("rollout_correction/chi2_seq") == "rollout_correction/chi2_seq"
    assert canonical_name("my/own_metric") == "my/own_metric"
    assert canonical_name("train/something_else") == "train/something_else"
    # a name two peers log means one quantity of ours
    targets: dict[str, set[str]] = {}
    for peer in _PEERS:
        for name, ours in peer.items():
            targets.setdefault(name, set()).add(ours)
    assert all(len(ours) == 1 for ours in targets.values())
    # every target is in our namespaces
    prefixes = ("mismatch/", "staleness/", "policy/", "optim/", "reward/", "response/", "perf/")
    assert all(target.startswith(prefixes) for target in PEER_NAMES.values())


def test_held_out_scores_are_matched_by_pattern_and_only_the_mean_is_an_accuracy():
    assert canonical_name("val-core/openai/gsm8k/reward/mean@1") == "eval/acc"  # verl
    assert canonical_name("val-core/aime24/acc/mean@16") == "eval/acc"
    assert canonical_name("val/test_score/lighteval/MATH") == "eval/acc"  # verl before 0.3
    assert canonical_name("eval_reward") == "eval/acc"  # TRL's evaluation log
    assert canonical_name("eval/reward") == "eval/acc"  # ... through HF's W&B callback
    assert canonical_name("eval/eval_gsm8k_pass1") == "eval/acc"  # OpenRLHF
    assert canonical_name("validation/accuracy") == "eval/acc"  # NeMo-RL
    assert canonical_name("actor/entropy_loss") == "policy/entropy"  # verl 2025: the entropy
    # best-of-N and majority votes are not accuracies; val-aux holds the other variables
    for name in (
        "val-core/aime24/acc/best@16/mean",
        "val-core/aime24/acc/maj@16/mean",
        "val-aux/aime24/reward/mean@16",
        "val-core/aime24/acc/mean@16/std",
        "eval_reward_std",
        "eval/eval_gsm8k_pass8",  # OpenRLHF's best-of-8
        "eval/eval_gsm8k_response_length_mean",
    ):
        assert canonical_name(name) == name


def test_a_verl_log_with_two_validation_sets_gets_one_held_out_accuracy(tmp_path, cli, imp):
    """verl names every validation set's score after its dataset: the first in the row
    becomes eval/acc, the second keeps its name (nothing is dropped), and the held-out
    accuracy collapsing is found by the held-out rule, not only by the training reward."""
    rows = []
    for t in range(1, 121):
        row = {"step": t, "actor/entropy_loss": 0.5, "critic/score/mean": 0.6}
        if t % 5 == 0:
            row["val-core/gsm8k/acc/mean@1"] = 0.6 if t < 80 else 0.05
            row["val-core/math/acc/mean@1"] = 0.3
        rows.append(row)
    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert series["eval/acc"][75] == pytest.approx(0.6) and series["eval/acc"][80] == 0.05
    assert series["val-core/math/acc/mean@1"][80] == pytest.approx(0.3)
    assert set(series["policy/entropy"]) == set(range(1, 121))
    out = cli("analyze", str(run), "--json")
    assert out.returncode == 0, out.stderr
    collapse = [a for a in json.loads(out.stdout)["replayed"] if a["detector"] == "eval_collapse"]
    # EWMA (α 0.5) of the held-out points: 0.325 at step 80 (46 % of the gain lost), 0.19
    # at 85 (69 %, past the rule's half)
    assert collapse and collapse[0]["step"] == 85 and collapse[0]["severity"] == "critical"


# ------------------------------------------------------------------------------ JSONL


def test_an_open_instruct_log_keyed_by_training_step_shows_its_mismatch_drift(tmp_path, cli, imp):
    """open-instruct's own names and step key, imported and analyzed: the vLLM-vs-learner
    log-prob difference doubling slowly against its early level is a training-inference
    precursor, long before the verifier's correct rate falls."""
    rng = np.random.default_rng(11)
    rows = []
    for t in range(1, 501):
        drift = 10 ** min(max(t - 100, 0) / 300, 1.0)  # ×10 over steps 100-400
        rows.append(
            {
                "training_step": t,
                "episode": 64 * t,
                "debug/vllm_vs_local_logprob_diff_mean": 0.02 * drift * np.exp(rng.normal(0, 0.1)),
                "objective/verifiable_correct_rate": (0.5 if t < 430 else 0.05)
                + rng.normal(0, 0.02),
                "policy/entropy_avg": 0.6 + rng.normal(0, 0.01),
            }
        )
    log = tmp_path / "olmo.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert sorted(series["reward/acc"])[:2] == [1, 2]  # the optimizer step, not the episode
    assert "mismatch/logprob_abs_diff" in series and "policy/entropy" in series
    out = cli("analyze", str(run), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["onset"]["metric"] == "reward/acc" and 425 <= report["onset"]["step"] <= 435
    drift = [a for a in report["replayed"] if a["detector"] == "mismatch_logprob_drift"]
    assert drift and 150 <= drift[0]["step"] <= 220  # doubled at t = 190
    assert drift[0]["factor"] == "train_inference"


def test_a_wandb_history_of_a_hugging_face_run_is_read_at_the_optimizer_step(tmp_path, imp):
    """Hugging Face's W&B callback logs once per `logging_steps` and once per evaluation,
    and W&B's `_step` counts those calls; `train/global_step`, in every row, is the
    optimizer step, where an evaluation and the train log of one step meet."""
    rows, calls = [], 0
    for step in range(10, 310, 10):
        rows.append({"_step": calls, "train/global_step": step, "train/reward": 0.5})
        calls += 1
        if step % 50 == 0:
            rows.append({"_step": calls, "train/global_step": step, "eval/reward": 0.4})
            calls += 1
    log = tmp_path / "history.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert sorted(series["reward/mean"]) == list(range(10, 310, 10))
    assert sorted(series["eval/acc"]) == list(range(50, 310, 50))
    assert "train/global_step" not in series and "_step" not in series


def _openrlhf_history() -> list[dict]:
    """A W&B history of an OpenRLHF run: the train rows at `train/global_step`, each
    evaluation a row of its own at `eval/global_step`, W&B's `_step` counting the calls."""
    rows: list[dict] = []
    for step in range(1, 41):
        rows.append(
            {
                "_step": len(rows),
                "train/global_step": step,
                "train/vllm_kl": 1e-3,
                "train/ppo_clip_ratio": 0.01,
                "train/reward": 0.4,
                "train/kl": 0.02,
            }
        )
        if step % 10 == 0:
            rows.append(
                {
                    "_step": len(rows),
                    "eval/global_step": step,
                    "eval/eval_gsm8k_pass1": 0.3 + step / 100,
                    "eval/eval_gsm8k_pass4": 0.6,
                }
            )
    return rows


def _check_openrlhf(run: Path) -> None:
    series = _series(run)
    assert series["eval/acc"] == pytest.approx({10: 0.4, 20: 0.5, 30: 0.6, 40: 0.7})
    assert sorted(series["eval/eval_gsm8k_pass4"]) == [10, 20, 30, 40]
    assert sorted(series["mismatch/kl_k1"]) == list(range(1, 41))
    assert sorted(series["staleness/mask_frac"]) == sorted(series["reward/mean"])
    assert {"train/kl"} <= set(series)
    assert not {"eval/global_step", "train/global_step", "_step"} & set(series)


def test_an_openrlhf_wandb_history_puts_its_evaluations_at_the_training_step(tmp_path, imp):
    """OpenRLHF logs each evaluation in a row of its own whose only step is
    `eval/global_step`: read at `_step` (a count of log calls) each held-out accuracy
    would land one step later per evaluation before it."""
    log = tmp_path / "openrlhf.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in _openrlhf_history()))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    _check_openrlhf(run)


def test_an_openrlhf_wandb_csv_export_reads_each_row_at_its_own_step_column(tmp_path, imp):
    """The same history as W&B's CSV export: one table, the train rows' eval cells empty
    and the eval rows' train cells empty. Each row takes the first step column it fills;
    before, the file's first step column decided and every eval row was garbage."""
    rows = _openrlhf_history()
    columns = list(dict.fromkeys(k for r in rows for k in r))
    lines = [",".join(columns)]
    lines += [",".join(str(r.get(c, "")) for c in columns) for r in rows]
    log = tmp_path / "openrlhf.csv"
    log.write_text("\n".join(lines) + "\n")
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    assert "garbage" not in out.stdout + out.stderr
    _check_openrlhf(run)


@pytest.mark.parametrize("lines", [True, False], ids=["jsonl", "records"])
def test_an_openrlhf_history_dumped_through_pandas_reads_each_row_at_the_step_it_fills(
    tmp_path, imp, lines
):
    """`run.history()` is a DataFrame, and pandas writes a row's empty cells as null: every
    eval row carries `"train/global_step": null` before its `eval/global_step`. A row's
    step is the first step key it fills; before, a null step key made the row garbage."""
    pd = pytest.importorskip("pandas")
    log = tmp_path / "openrlhf.json"
    pd.DataFrame(_openrlhf_history()).to_json(log, orient="records", lines=lines)
    assert r'"train\/global_step":null' in log.read_text()  # pandas escapes "/"
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    assert "garbage" not in out.stdout + out.stderr
    _check_openrlhf(run)


def test_a_row_whose_step_keys_are_all_null_is_garbage_that_says_so(tmp_path, imp):
    log = tmp_path / "nulls.jsonl"
    rows = [{"step": s, "entropy": 0.5} for s in range(5)]
    rows[2] = {"step": None, "_step": float("nan"), "entropy": 0.5}
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    assert "line 3: no step (null step, _step)" in out.stderr
    assert sorted(_series(run)["policy/entropy"]) == [0, 1, 3, 4]


def test_a_slime_wandb_history_is_read_at_its_rollout_step(tmp_path, imp):
    """slime calls `wandb.log` without a step for its rollout, perf and train rows, each
    carrying its own step key: at `_step` one step's reward and mismatch would sit three
    log calls apart."""
    rows: list[dict] = []
    for rollout in range(30):
        rows.append({"_step": len(rows), "rollout/step": rollout, "rollout/raw_reward": 0.5})
        rows.append({"_step": len(rows), "rollout/step": rollout, "perf/step_time": 9.0})
        rows.append(
            {
                "_step": len(rows),
                "train/step": rollout,
                "train/train_rollout_logprob_abs_diff": 0.01 * (1 + rollout),
                "train/pg_clipfrac": 0.002,
            }
        )
    log = tmp_path / "slime.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert sorted(series["reward/mean"]) == list(range(30))
    assert series["mismatch/logprob_abs_diff"] == pytest.approx(
        {r: 0.01 * (1 + r) for r in range(30)}
    )
    assert sorted(series["staleness/mask_frac"]) == list(range(30))
    assert not {"rollout/step", "train/step"} & set(series)


def test_jsonl_wandb_history_with_trl_names(tmp_path, cli, imp):
    log = tmp_path / "history.jsonl"
    rows = [
        {
            "_step": s,
            "_runtime": 3.5 * s,
            "train/entropy": 1.0 - 0.01 * s,
            "train/sampling/importance_sampling_ratio/mean": 0.99,
            "train/reward": 0.1 * s,
            "train/epoch": 0.01 * s,
            "custom/thing": s,
            "text": "ignored",
        }
        for s in range(30)
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert series["policy/entropy"][29] == pytest.approx(0.71)
    assert series["mismatch/ratio_mean"][0] == 0.99
    assert series["reward/mean"][10] == pytest.approx(1.0)
    assert series["custom/thing"][7] == 7 and "train/epoch" in series
    assert "_runtime" not in series and "text" not in series
    assert "train/entropy -> policy/entropy" in out.stdout
    assert "imported 30 steps" in out.stdout and "1 non-numeric" not in out.stdout
    assert "30 non-numeric field(s) ignored" in out.stderr


def test_map_names_a_plain_scripts_metrics_before_the_peers_names(tmp_path, cli):
    """A script of one's own logs `token_entropy`: `--map` puts it where the detectors read
    it; a user's map wins over a peer's name (`loss`), and `--keep-names` keeps it."""
    log = tmp_path / "metrics.jsonl"
    rows = [
        {"step": s, "token_entropy": 0.5 - 0.01 * s, "gradient_norm": 1.0 + s, "loss": -s}
        for s in range(25)
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    maps = ("--map", "token_entropy=policy/entropy", "--map", "loss = custom/loss")
    out = cli("import", str(log), "--out", str(tmp_path / "a"), *maps)
    assert out.returncode == 0, out.stderr
    series = _series(tmp_path / "a")
    assert series["policy/entropy"][10] == pytest.approx(0.4)
    assert series["custom/loss"][3] == -3 and "optim/loss" not in series
    assert series["gradient_norm"][2] == 3.0  # no map, no peer's name: kept
    assert "token_entropy -> policy/entropy" in out.stdout
    kept = cli("import", str(log), "--out", str(tmp_path / "b"), "--keep-names", maps[0], maps[1])
    assert kept.returncode == 0, kept.stderr
    assert set(_series(tmp_path / "b")) == {"policy/entropy", "gradient_norm", "loss"}
    for bad, says in [
        (["--map", "token_entropy"], "expected THEIRS=OURS"),
        (["--map", "=policy/entropy"], "expected THEIRS=OURS"),
        (["--map", "loss=a", "--map", "loss=b"], "maps 'loss' twice"),
    ]:
        refused = cli("import", str(log), "--out", str(tmp_path / "c"), *bad)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and not (tmp_path / "c").exists()


def test_jsonl_verl_file_logger_long_format_and_trainer_state(tmp_path, cli, imp):
    verl = tmp_path / "verl.jsonl"
    verl.write_text(
        "".join(
            json.dumps({"step": s, "data": {"rollout_corr/kl": 1e-3 * s, "actor/entropy": 0.5}})
            + "\n"
            for s in range(1, 6)
        )
    )
    out, run = imp(verl)
    assert out.returncode == 0, out.stderr
    assert _series(run)["mismatch/kl_k1"] == {s: pytest.approx(1e-3 * s) for s in range(1, 6)}

    long = tmp_path / "export.jsonl"  # what `minirl export --format jsonl` writes
    long.write_text(
        "".join(
            json.dumps({"step": s, "name": "reward/mean", "value": s / 10}) + "\n" for s in range(4)
        )
    )
    out, run = imp(long)
    assert out.returncode == 0, out.stderr
    assert _series(run) == {"reward/mean": {0: 0.0, 1: 0.1, 2: 0.2, 3: 0.3}}

    state = tmp_path / "trainer_state.json"  # HF Trainer / TRL checkpoint file
    history = [
        {"step": s, "loss": 0.1, "clip_ratio/region_mean": 0.02, "epoch": 0.1} for s in (5, 10)
    ]
    state.write_text(json.dumps({"global_step": 10, "log_history": history}, indent=2))
    out, run = imp(state)
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert series["staleness/mask_frac"] == {5: 0.02, 10: 0.02}
    assert series["optim/loss"] == {5: 0.1, 10: 0.1}


def test_jsonl_garbage_is_counted_and_skipped(tmp_path, cli, imp):
    log = tmp_path / "mixed.jsonl"
    lines = [json.dumps({"step": s, "entropy": 0.5, "loss": float("nan")}) for s in range(10)]
    lines[3] = "{not json"
    lines[5] = json.dumps({"no_step_here": 1})
    lines[7] = json.dumps([1, 2, 3])
    lines.insert(8, json.dumps({"step": -4, "entropy": 1}))
    log.write_text("\n".join(lines) + "\n\n")
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    assert "4 garbage line(s) of 11 skipped" in out.stderr
    assert "line 4: not JSON" in out.stderr and "line 6: no step" in out.stderr
    series = _series(run)
    assert sorted(series["policy/entropy"]) == [0, 1, 2, 4, 6, 8, 9]
    assert all(np.isnan(v) for v in series["optim/loss"].values())  # NaN is data, kept


def test_hopeless_input_is_refused(tmp_path, cli, imp):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("hello\nworld\n{\n")
    out, run = imp(garbage)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no metric values found" in out.stderr and "3 garbage line(s)" in out.stderr
    assert not run.exists()
    out, _ = imp(tmp_path / "missing.jsonl")
    assert out.returncode == 2 and "no such file" in out.stderr
    noext = tmp_path / "log.dat"
    noext.write_text("x")
    out, _ = imp(noext)
    assert out.returncode == 2 and "--format" in out.stderr
    prose = tmp_path / "log.txt"  # read as console text: no metric line in it
    prose.write_text("x")
    out, _ = imp(prose)
    assert out.returncode == 2 and "no metric lines" in out.stderr and "--format" in out.stderr
    empty_dir = tmp_path / "tb-empty"
    empty_dir.mkdir()
    out, _ = imp(empty_dir, "--format", "tensorboard")
    assert out.returncode == 2 and "no TensorBoard event files" in out.stderr
    binary = tmp_path / "events.out.tfevents.123.host"
    binary.write_bytes(bytes(range(256)) * 8)
    out, _ = imp(binary)
    assert out.returncode == 2 and "no metric values found" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_existing_run_is_not_overwritten(tmp_path, cli, imp):
    log = tmp_path / "a.jsonl"
    log.write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    out, run = imp(log)
    assert out.returncode == 0
    again = cli("import", str(log), "--out", str(run))
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert _series(run) == {"optim/loss": {0: 1.0}}


# ------------------------------------------------------------------------------ CSV


def test_csv_wide_long_tsv_and_wandb_chart_export(tmp_path, cli, imp):
    wide = tmp_path / "history.csv"
    wide.write_text(
        "_step,actor/entropy,rollout_corr/k3_kl,note,_timestamp\n"
        "0,0.9,0.001,ok,1\n"
        "1,,0.002,ok,2\n"  # an empty cell is a missing value
        "2,0.8,bad,ok,3\n"  # a non-numeric cell is skipped
        "x,0.7,0.003,ok,4\n"  # garbage: step
        "4,0.6\n"  # garbage: field count
        "5,0.5,NaN,ok,6\n"
    )
    out, run = imp(wide)
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert series["policy/entropy"] == {0: 0.9, 2: 0.8, 5: 0.5}
    assert list(series["mismatch/kl_k3"])[:2] == [0, 1] and np.isnan(series["mismatch/kl_k3"][5])
    assert "2 garbage row(s) of 6 skipped" in out.stderr and "row 5" in out.stderr

    long = tmp_path / "export.csv"
    long.write_text("step,name,value\n0,reward/mean,0.5\n1,reward/mean,0.25\n1,eval/acc,0.3\n")
    out, run = imp(long)
    assert out.returncode == 0, out.stderr
    assert _series(run) == {"reward/mean": {0: 0.5, 1: 0.25}, "eval/acc": {1: 0.3}}

    tsv = tmp_path / "log.tsv"
    tsv.write_text("step\tgrad_norm\n0\t1.5\n1\t2.5\n")
    out, run = imp(tsv)
    assert out.returncode == 0, out.stderr
    assert _series(run) == {"optim/grad_norm": {0: 1.5, 1: 2.5}}

    chart = tmp_path / "chart.csv"  # W&B panel export: run prefix and min/max envelopes
    chart.write_text(
        "Step,grpo-7 - train/entropy,grpo-7 - train/entropy__MIN,grpo-7 - train/entropy__MAX\n"
        "10,0.4,0.3,0.5\n20,0.35,0.3,0.4\n"
    )
    out, run = imp(chart)
    assert out.returncode == 0, out.stderr
    assert _series(run) == {"policy/entropy": {10: 0.4, 20: 0.35}}


def test_a_wandb_csv_export_is_read_at_the_optimizer_step(tmp_path, imp):
    """The same choice in a CSV table: `train/global_step` over W&B's `_step` column."""
    lines = ["_step,train/global_step,train/reward"]
    lines += [f"{i},{10 * (i + 1)},0.5" for i in range(25)]
    log = tmp_path / "history.csv"
    log.write_text("\n".join(lines) + "\n")
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    assert sorted(_series(run)["reward/mean"]) == list(range(10, 260, 10))


def test_csv_without_a_step_column_is_refused(tmp_path, cli, imp):
    table = tmp_path / "nostep.csv"
    table.write_text("a,b\n1,2\n3,4\n")
    out, _ = imp(table)
    assert out.returncode == 2 and "no step column" in out.stderr and "Traceback" not in out.stderr


# ------------------------------------------------------------------------------ TensorBoard


def _write_events(log_dir: Path) -> None:
    """Scalars as tensorboardX writes them (simple_value), one tag as TF2 writes them
    (a one-element tensor, plugin metadata on the first event only), plus a histogram
    and a text summary that must be ignored."""
    from tensorboardX import SummaryWriter
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.proto.tensor_pb2 import TensorProto
    from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto

    writer = SummaryWriter(str(log_dir))
    for step in range(20):
        writer.add_scalar("actor/entropy", 1.0 / (step + 1), step)
        writer.add_scalar("critic/score/mean", 0.05 * step, step)
        tensor = TensorProto(dtype=2, double_val=[step * 0.125], tensor_shape=TensorShapeProto())
        value = Summary.Value(tag="rollout_corr/kl", tensor=tensor)
        if step == 0:
            value.metadata.CopyFrom(
                SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
            )
        writer._get_file_writer().add_summary(Summary(value=[value]), step)
    writer.add_histogram("weights", np.arange(10.0), 3)
    writer.add_text("notes", "hello", 3)
    writer.close()


def test_tensorboard_event_files(tmp_path, cli, imp):
    _write_events(tmp_path / "tb")
    out, run = imp(tmp_path / "tb", "--format", "tensorboard")
    assert out.returncode == 0, out.stderr
    series = _series(run)
    assert set(series) == {"policy/entropy", "reward/mean", "mismatch/kl_k1"}
    # simple_value is float32 on disk; the tensor scalars are float64
    assert series["policy/entropy"] == {s: float(np.float32(1.0 / (s + 1))) for s in range(20)}
    assert series["reward/mean"][19] == float(np.float32(0.05 * 19))
    assert series["mismatch/kl_k1"] == {s: s * 0.125 for s in range(20)}
    (event_file,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    out = cli("import", str(event_file), "--out", str(tmp_path / "single"))
    assert out.returncode == 0, out.stderr  # a single file, format from its name


def test_tensorboard_corruption_is_counted_not_fatal(tmp_path, cli, imp):
    _write_events(tmp_path / "tb")
    (event_file,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    data = bytearray(event_file.read_bytes())
    clean = parse_tensorboard(event_file)
    assert clean.garbage == 0
    # flip the last payload byte of record 10 (a scalar): its CRC fails, the rest is read
    pos = 0
    for _ in range(10):  # TFRecord framing: u64 length, u32 crc, payload, u32 crc
        pos += 8 + 4 + int.from_bytes(data[pos : pos + 8], "little") + 4
    data[pos + 8 + 4 + int.from_bytes(data[pos : pos + 8], "little") - 1] ^= 0xFF
    # and cut the file in the middle of its last record
    corrupt = tmp_path / "events.out.tfevents.corrupt"
    corrupt.write_bytes(bytes(data[:-7]))
    parsed = parse_tensorboard(corrupt)
    assert parsed.garbage == 2, parsed.examples
    assert any("checksum" in e for e in parsed.examples)
    assert any("truncated" in e for e in parsed.examples)
    assert parsed.n_values == clean.n_values - 1  # the histogram/text tail held no scalar
    out, _ = imp(corrupt)
    assert out.returncode == 0 and "2 garbage record(s)" in out.stderr


# ------------------------------------------------------------------------------ then analyze


def test_an_imported_collapse_is_analysed(tmp_path, cli, imp):
    log = tmp_path / "verl.jsonl"
    rng = np.random.default_rng(3)
    rows = []
    for s in range(120):
        score = 0.6 if s < 80 else 0.05
        kl = 1e-3 * (1.0 if s < 60 else 30.0) * float(np.exp(rng.normal(0, 0.05)))
        rows.append(
            {
                "step": s,
                "data": {"critic/score/mean": score + rng.normal(0, 0.01), "rollout_corr/kl": kl},
            }
        )
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, run = imp(log)
    assert out.returncode == 0, out.stderr
    analysis = cli("analyze", str(run), "--json")
    assert analysis.returncode == 0, analysis.stderr
    data = json.loads(analysis.stdout)
    assert data["outcome"] == "reward/mean" and data["onset"]["step"] == 80
    assert data["precursors"][0]["metric"] == "mismatch/kl_k1"
    assert data["precursors"][0]["moved_step"] == 60 and data["first_factor"] == "train_inference"


def test_import_cli_does_not_load_torch(tmp_path):
    log = tmp_path / "a.jsonl"
    log.write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    out = run_cli("import", str(log), "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr


def test_minirl_export_reimports_exactly(tmp_path, cli, imp):
    from monitor.monitor import Monitor

    rng = np.random.default_rng(5)
    with Monitor(tmp_path / "orig") as mon:
        for step in range(40):
            loss = float("nan") if step == 17 else float(rng.normal())
            mon.log(step, {"optim/loss": loss, "mismatch/kl_k1": float(rng.random()) * 1e-3})
    for fmt in ("csv", "jsonl"):
        exported = cli("export", str(tmp_path / "orig"), "--format", fmt)
        assert exported.returncode == 0, exported.stderr
        file = tmp_path / f"export.{fmt}"
        file.write_text(exported.stdout)
        out, run = imp(file)
        assert out.returncode == 0, out.stderr
        original, again = _series(tmp_path / "orig"), _series(run)
        assert set(again) == set(original)
        for name, values in original.items():
            np.testing.assert_array_equal(list(again[name].values()), list(values.values()))
            assert list(again[name]) == list(values)
