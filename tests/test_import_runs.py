"""`minirl import` of what papers and dashboards publish: a W&B chart export per metric
holding several runs, a TensorBoard log dir with a directory per run, several files of one
run, and a log saved as one JSON document (pandas' `to_json` in each of its shapes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from monitor.importers.jsonl import parse_jsonl
from monitor.store.reader import RunReader, list_runs


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _series(run: Path) -> dict[str, dict[int, float]]:
    with RunReader(run) as reader:
        return {
            name: dict(zip(s.tolist(), v.tolist(), strict=True))
            for name, (s, v) in reader.scalars(reader.metric_names()).items()
        }


def _chart_export(path: Path, metric: str, runs: dict[str, list[float]]) -> None:
    """A W&B panel's "Export CSV": Step, then per run "<run> - <metric>" and its envelope."""
    header = ["Step"]
    for run in runs:
        header += [f"{run} - {metric}", f"{run} - {metric}__MIN", f"{run} - {metric}__MAX"]
    lines = [",".join(header)]
    n = max(len(v) for v in runs.values())
    for step in range(n):
        cells = [str(step)]
        for values in runs.values():
            v = f"{values[step]!r}" if step < len(values) else ""
            cells += [v, v, v]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")


ENTROPY = {"grpo - eps 0.2": [1.0 / (s + 1) for s in range(12)], "dapo": [0.5] * 10}
SCORE = {"grpo - eps 0.2": [0.01 * s for s in range(12)], "dapo": [0.02 * s for s in range(10)]}


def test_a_chart_export_of_several_runs_becomes_one_store_per_run(tmp_path, capsys):
    _chart_export(tmp_path / "entropy.csv", "actor/entropy", ENTROPY)
    _chart_export(tmp_path / "score.csv", "critic/score/mean", SCORE)
    out = tmp_path / "clips"
    code, stdout, err = _cli(
        capsys,
        "import",
        str(tmp_path / "entropy.csv"),
        str(tmp_path / "score.csv"),
        "--out",
        str(out),
    )
    assert code == 0, err
    assert "2 runs in the input" in stdout
    # the run name with the separator in it ("grpo - eps 0.2") is split at the last " - "
    assert sorted(p.name for p in out.iterdir()) == ["dapo", "grpo_-_eps_0.2"]
    grpo, dapo = _series(out / "grpo_-_eps_0.2"), _series(out / "dapo")
    assert grpo["policy/entropy"] == dict(enumerate(ENTROPY["grpo - eps 0.2"]))
    assert grpo["reward/mean"] == dict(enumerate(SCORE["grpo - eps 0.2"]))
    assert dapo["reward/mean"] == dict(enumerate(SCORE["dapo"]))  # 10 steps, not 12
    assert set(dapo) == {"policy/entropy", "reward/mean"}  # no envelope columns
    with RunReader(out / "dapo") as reader:
        assert reader.meta().config["run"] == "dapo"
    # the dashboard's folder of runs lists both; a command that takes one run names them
    assert {Path(s.path).name for s in list_runs(out)} == {"dapo", "grpo_-_eps_0.2"}
    code, _, err = _cli(capsys, "export", str(out), "--format", "csv")
    assert code == 2 and "is a folder of runs (dapo, grpo_-_eps_0.2)" in err


def test_one_run_of_several_is_chosen_with_run_and_nothing_is_overwritten(tmp_path, capsys):
    _chart_export(tmp_path / "entropy.csv", "actor/entropy", ENTROPY)
    code, _, err = _cli(
        capsys,
        "import",
        str(tmp_path / "entropy.csv"),
        "--run",
        "dapo",
        "--out",
        str(tmp_path / "d"),
    )
    assert code == 0, err
    assert _series(tmp_path / "d") == {"policy/entropy": dict(enumerate(ENTROPY["dapo"]))}
    code, _, err = _cli(
        capsys,
        "import",
        str(tmp_path / "entropy.csv"),
        "--run",
        "ppo",
        "--out",
        str(tmp_path / "p"),
    )
    assert code == 2 and "no run named 'ppo'" in err and "'dapo', 'grpo - eps 0.2'" in err
    assert "Traceback" not in err and not (tmp_path / "p").exists()
    # a folder where one of the runs already is: refused before anything is written
    (tmp_path / "clips").mkdir()
    args = ["import", str(tmp_path / "entropy.csv"), "--run", "dapo"]
    code, _, _ = _cli(capsys, *args, "--out", str(tmp_path / "clips" / "dapo"))
    assert code == 0
    code, _, err = _cli(
        capsys, "import", str(tmp_path / "entropy.csv"), "--out", str(tmp_path / "clips")
    )
    assert code == 2 and "already holds a run" in err
    assert not (tmp_path / "clips" / "grpo_-_eps_0.2").exists()


def test_files_of_one_run_are_merged_and_an_unnamed_one_joins_the_named_run(tmp_path, capsys):
    log = tmp_path / "trainer.jsonl"
    log.write_text(
        "".join(json.dumps({"step": s, "actor/grad_norm": 1.0 + s}) + "\n" for s in range(12))
    )
    _chart_export(tmp_path / "score.csv", "critic/score/mean", {"grpo": SCORE["dapo"]})
    code, _, err = _cli(
        capsys, "import", str(log), str(tmp_path / "score.csv"), "--out", str(tmp_path / "r")
    )
    assert code == 0, err
    series = _series(tmp_path / "r")  # one store (not a folder): one run in the input
    assert series["optim/grad_norm"] == {s: 1.0 + s for s in range(12)}
    assert series["reward/mean"] == dict(enumerate(SCORE["dapo"]))
    # beside a file of two named runs, an unnamed one is ambiguous: say so, write nothing
    _chart_export(tmp_path / "entropy.csv", "actor/entropy", ENTROPY)
    code, _, err = _cli(
        capsys, "import", str(log), str(tmp_path / "entropy.csv"), "--out", str(tmp_path / "x")
    )
    assert code == 2 and "--run NAME" in err and not (tmp_path / "x").exists()
    both = ["import", str(log), str(tmp_path / "entropy.csv")]
    code, _, err = _cli(capsys, *both, "--run", "dapo", "--out", str(tmp_path / "x"))
    assert code == 0, err
    assert set(_series(tmp_path / "x")) == {"optim/grad_norm", "policy/entropy"}


def _write_tb(log_dir: Path, steps: range, entropy: float) -> None:
    from tensorboardX import SummaryWriter

    # the suffix: two writers within one second would otherwise share a file name
    writer = SummaryWriter(str(log_dir), filename_suffix=f".from{steps.start}")
    for step in steps:
        writer.add_scalar("actor/entropy", entropy, step)
    writer.close()


def test_a_tensorboard_log_dir_holds_one_run_per_directory(tmp_path, capsys):
    root = tmp_path / "tb"
    _write_tb(root / "ppo", range(0, 10), 0.5)
    _write_tb(root / "ppo", range(10, 20), 0.4)  # resumed: a second event file, same run
    _write_tb(root / "grpo" / "seed1", range(0, 15), 0.7)
    code, _, err = _cli(capsys, "import", str(root), "--out", str(tmp_path / "runs"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["grpo_seed1", "ppo"]
    ppo = _series(tmp_path / "runs" / "ppo")["policy/entropy"]
    assert ppo == {s: float(np.float32(0.5 if s < 10 else 0.4)) for s in range(20)}
    assert _series(tmp_path / "runs" / "grpo_seed1")["policy/entropy"] == {
        s: float(np.float32(0.7)) for s in range(15)
    }
    # `minirl watch` follows one run: it refuses a log dir of two, and follows the one named
    code, _, err = _cli(capsys, "watch", str(root), "--out", str(tmp_path / "w"), "--once")
    assert code == 2 and "holds 2 TensorBoard runs" in err and "--run" in err
    code, _, err = _cli(
        capsys, "watch", str(root), "--run", "ppo", "--out", str(tmp_path / "w"), "--once"
    )
    assert code == 0, err
    assert _series(tmp_path / "w")["policy/entropy"] == ppo


def _same(rows: dict[int, dict[str, float]], expected: dict[int, dict[str, float]]) -> bool:
    """Equal steps and names, values to pandas' 10 written digits."""
    return rows.keys() == expected.keys() and all(
        rows[s] == pytest.approx(expected[s], rel=1e-9) for s in expected
    )


HISTORY = [
    {"_step": s, "actor/entropy": 1.0 / (s + 1), "critic/score/mean": 0.1 * s} for s in range(6)
]
EXPECTED = {s: {"actor/entropy": 1.0 / (s + 1), "critic/score/mean": 0.1 * s} for s in range(6)}


@pytest.mark.parametrize("orient", ["records", "columns", "index", "split", "table"])
def test_pandas_json_in_every_table_shape_reads_as_the_history(tmp_path, orient):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(HISTORY)
    path = tmp_path / f"{orient}.json"
    frame.to_json(path, orient=orient, indent=2)
    parsed = parse_jsonl(path)
    assert parsed.garbage == 0, parsed.examples
    assert _same(parsed.rows, EXPECTED)
    # indexed by step (no step column): the row labels are the steps
    indexed = tmp_path / f"indexed-{orient}.json"
    frame.assign(step=frame["_step"] + 100).drop(columns="_step").set_index("step").to_json(
        indexed, orient=orient, indent=2
    )
    if orient != "records":  # records drop the index: no step left, every row is garbage
        assert _same(parse_jsonl(indexed).rows, {s + 100: r for s, r in EXPECTED.items()})
    else:
        bad = parse_jsonl(indexed)
        assert bad.rows == {} and bad.garbage == 6 and "no step" in bad.examples[0]


def test_json_documents_written_by_hand(tmp_path):
    cases = {
        "array.json": json.dumps(HISTORY, indent=2),
        "lists.json": json.dumps({k: [r[k] for r in HISTORY] for k in HISTORY[0]}, indent=1),
        "one.json": json.dumps(HISTORY[2], indent=2),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    assert _same(parse_jsonl(tmp_path / "array.json").rows, EXPECTED)
    assert _same(parse_jsonl(tmp_path / "lists.json").rows, EXPECTED)
    assert _same(parse_jsonl(tmp_path / "one.json").rows, {2: EXPECTED[2]})
    # columns of unequal length are no table: one garbage document, not a guess
    (tmp_path / "ragged.json").write_text(json.dumps({"_step": [0, 1], "loss": [1.0]}))
    ragged = parse_jsonl(tmp_path / "ragged.json")
    assert ragged.rows == {} and ragged.garbage == 1
    # an array of non-objects: each element is garbage, counted
    (tmp_path / "values.json").write_text(json.dumps([[0, 1.0], [1, 2.0]]))
    values = parse_jsonl(tmp_path / "values.json")
    assert values.rows == {} and values.garbage == 2 and "not an object" in values.examples[0]


def test_a_dashboard_upload_of_several_runs_lists_each_beside_the_others(tmp_path):
    pytest.importorskip("streamlit")  # not in the torch-free core install
    from dashboard.analysis_page import _run_import

    _chart_export(tmp_path / "entropy.csv", "actor/entropy", ENTROPY)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "clips-dapo").mkdir()  # a name already taken: that run stays in the folder
    (runs / "clips-dapo" / "keep.txt").write_text("not mine")
    ok, said = _run_import(
        "entropy.csv", (tmp_path / "entropy.csv").read_bytes(), "csv", runs / "clips"
    )
    assert ok, said
    assert "listed here as clips-grpo_-_eps_0.2" in said and "left in" in said and "dapo" in said
    listed = {Path(s.path).name for s in list_runs(runs)}
    assert listed == {"clips-grpo_-_eps_0.2"}  # clips/ still holds dapo, not listed
    assert (runs / "clips" / "dapo" / "store.sqlite").exists()
    assert (runs / "clips-dapo" / "keep.txt").read_text() == "not mine"
    assert _series(runs / "clips-grpo_-_eps_0.2")["policy/entropy"] == dict(
        enumerate(ENTROPY["grpo - eps 0.2"])
    )


def test_analyze_of_a_folder_of_imported_runs_says_which_collapsed_and_why(tmp_path, capsys):
    rng = np.random.default_rng(3)
    score = {"healthy": [], "broken": []}
    kl = {"healthy": [], "broken": []}
    for s in range(120):
        noise = float(np.exp(rng.normal(0, 0.05)))
        score["healthy"].append(0.6 + rng.normal(0, 0.01))
        kl["healthy"].append(1e-3 * noise)
        score["broken"].append((0.6 if s < 80 else 0.05) + rng.normal(0, 0.01))
        kl["broken"].append(1e-3 * (1.0 if s < 60 else 30.0) * noise)
    _chart_export(tmp_path / "score.csv", "critic/score/mean", score)
    _chart_export(tmp_path / "kl.csv", "rollout_corr/kl", kl)
    runs = tmp_path / "runs"
    code, _, err = _cli(
        capsys, "import", str(tmp_path / "score.csv"), str(tmp_path / "kl.csv"), "--out", str(runs)
    )
    assert code == 0, err
    code, out, err = _cli(capsys, "analyze", str(runs))
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "collapse at 80 (reward/mean)" in lines["broken"]
    assert "broke first: train_inference" in lines["broken"]
    assert "no collapse" in lines["healthy"]
    code, out, _ = _cli(capsys, "analyze", str(runs), "--json")
    data = {Path(a["run"]).name: a for a in json.loads(out)}
    assert data["broken"]["onset"]["step"] == 80 and not data["healthy"]["collapsed"]
    code, _, err = _cli(capsys, "analyze", str(runs), "--html", str(tmp_path / "r.html"))
    assert code == 2 and "one run" in err


def _import_table(tmp_path: Path, capsys, text: str) -> str:
    """`text` as table.csv imported into tmp_path/t; what the import said on stderr."""
    table = tmp_path / "table.csv"
    table.write_text(text)
    code, _, err = _cli(capsys, "import", str(table), "--out", str(tmp_path / "t"))
    assert code == 0, err
    return err


def test_tensorboard_csv_downloads_and_scalar_tables_name_their_runs(tmp_path, capsys):
    # TensorBoard's "Download CSV": one metric per file, run and tag in the file name with
    # every "/" made "_"; the tag's slashes come back where that gives a known name
    for tag, values in (("actor_pg_clipfrac", [0.5, 0.4]), ("my_own_metric", [3.0, 4.0])):
        lines = ["Wall time,Step,Value"] + [f"{1.7e9 + s},{s},{v}" for s, v in enumerate(values)]
        (tmp_path / f"run-ppo_seed1-tag-{tag}.csv").write_text("\n".join(lines) + "\n")
    files = sorted(str(p) for p in tmp_path.glob("run-*.csv"))
    code, stdout, err = _cli(capsys, "import", *files, "--out", str(tmp_path / "r"))
    assert code == 0, err
    assert "(run 'ppo_seed1')" in stdout
    assert _series(tmp_path / "r") == {
        "staleness/mask_frac": {0: 0.5, 1: 0.4},  # actor/pg_clipfrac, mapped
        "my_own_metric": {0: 3.0, 1: 4.0},  # no known name: kept as written
    }
    # `experiment.get_scalars()` as CSV: a long table with a run column, one run per value
    err = _import_table(
        tmp_path,
        capsys,
        "run,tag,step,value\nppo,actor/entropy,0,0.9\nppo,actor/entropy,1,0.8\n"
        "grpo,actor/entropy,0,0.7\ngrpo,actor/entropy,x,0.6\n",
    )
    assert "1 garbage row(s) of 4 skipped" in err  # the step "x"
    assert _series(tmp_path / "t" / "ppo") == {"policy/entropy": {0: 0.9, 1: 0.8}}
    assert _series(tmp_path / "t" / "grpo") == {"policy/entropy": {0: 0.7}}


def test_a_table_of_concatenated_run_histories_splits_by_its_run_column(tmp_path, capsys):
    err = _import_table(
        tmp_path,
        capsys,
        "_step,run,actor/entropy,critic/score/mean\n"
        "0,a,0.9,0.1\n1,a,0.8,0.2\n0,b,0.7,0.3\n1,b,,0.4\n",
    )
    assert "repeated" not in err  # the runs' steps no longer land on each other
    assert _series(tmp_path / "t" / "a") == {
        "policy/entropy": {0: 0.9, 1: 0.8},
        "reward/mean": {0: 0.1, 1: 0.2},
    }
    assert _series(tmp_path / "t" / "b") == {
        "policy/entropy": {0: 0.7},
        "reward/mean": {0: 0.3, 1: 0.4},
    }
