"""`minirl bench remediation-pool`: remediation tables pooled, beside the bound no policy beats.

    minirl bench remediation-pool TABLE.json [TABLE.json ...] [--noise NOISE.json] [--out MD]

`minirl bench remediation` writes one table per batch of seeds. This pools the verdicts of
tables over disjoint seeds (a pair in two tables is refused) per config, as they were
judged there, and sets beside each incident config what a remediation that undid the
incident entirely would score on the "worse" verdict: its stable twin (same seed, the
incident never happened) against the run without remediation. Where the twin itself ends
more than 5 points lower, no remediation can be sure not to lose the pair: the best it can
do is give the run back what the incident took. `--noise` adds how often a fork with no
action at all ends that much lower (`minirl bench remediation-noise`).
Writes bench/results/remediation.md and .json; the JSON keeps every pair, so a new batch of
seeds is pooled with it: `minirl bench remediation-pool bench/results/remediation.json NEW.json`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
from pathlib import Path

from bench import RESULTS
from bench.markdown import seed_ranges
from bench.remediation.results import write_page
from bench.remediation.verdicts import TOLERANCE, noise_share, undone_is_worse
from core.errors import UserError

FIELDS = (
    "config", "seed", "collapses_without", "rescued", "worse_with_remediation",
    "final_acc_off", "final_acc_on", "twin_final_acc", "final_pi_off", "final_pi_on", "on",
)  # fmt: skip
"""What a pair of a table must carry to be pooled."""


def _rows(path: Path) -> list[dict]:
    """A table's pairs, or one message saying why the file is not a table."""
    try:
        rows = json.loads(path.read_text())["pairs"]
        missing = next(filter(None, map(_missing, rows)), None)
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a `minirl bench remediation` table ({exc!r})") from None
    if missing:
        raise UserError(
            f"{path}: not a `minirl bench remediation` table (a pair without {missing})"
        )
    return rows


def _missing(row: object) -> str | None:
    """The first field a pair lacks, if any."""
    if not isinstance(row, dict) or not isinstance(row.get("on"), dict):
        return "its arm with remediation"
    absent = [f for f in FIELDS if f not in row] + [
        f"on.{f}" for f in ("collapsed", "actions") if f not in row["on"]
    ]
    if absent:
        return absent[0]
    if not isinstance(row["config"], str) or not isinstance(row["seed"], int):
        return "a config name and a whole seed"
    numbers = [row[f] for f in FIELDS if f.startswith(("final_", "twin_"))]
    if not all(x is None or isinstance(x, int | float) for x in numbers):
        return "numbers for its accuracies"
    return None


def load(paths: list[Path]) -> list[dict]:
    """Every pair of the tables, each once, with the table it came from."""
    pairs: dict[tuple[str, int], dict] = {}
    for path in paths:
        for row in _rows(path):
            key = (row["config"], row["seed"])
            if key in pairs:
                raise UserError(
                    f"{row['config']} seed {row['seed']} is in {pairs[key]['table']} and "
                    f"{path}: pool tables of disjoint seeds"
                )
            pairs[key] = {**row, "table": str(path)}
    if not pairs:
        raise UserError("the tables hold no pairs")
    return list(pairs.values())


def summarise(rows: list[dict]) -> dict:
    """One config's (or all configs') pooled verdicts and the undone-incident bound."""
    collapsing = [r for r in rows if r["collapses_without"]]
    incident = [r for r in rows if not r["config"].startswith("stable")]
    known = [r for r in rows if r["final_acc_on"] is not None and r["final_acc_off"] is not None]
    gaps = [r["final_acc_on"] - r["final_acc_off"] for r in known]
    undone = [undone_is_worse(r["final_acc_off"], r["twin_final_acc"]) for r in incident]
    pi = [r for r in rows if None not in (r["final_pi_on"], r["final_pi_off"])]
    return {
        "pairs": len(rows),
        "seeds": sorted({r["seed"] for r in rows}),
        "collapsing": len(collapsing),
        "prevented": sum(not r["on"]["collapsed"] for r in collapsing),
        "rescued": sum(r["rescued"] for r in collapsing),
        "worse": sum(r["worse_with_remediation"] for r in rows),
        "gap_mean": statistics.fmean(gaps) if gaps else None,
        "gap_sd": statistics.stdev(gaps) if len(gaps) > 1 else None,
        "incident_pairs": sum(u is not None for u in undone),
        "twin_worse": sum(u is True for u in undone),
        "pi_pairs": len(pi),
        "pi_worse": sum(r["final_pi_on"] < r["final_pi_off"] - TOLERANCE for r in pi),
    }


def _points(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def write(rows: list[dict], noise: tuple[int, int] | None, command: str, out: Path) -> None:
    configs = sorted({r["config"] for r in rows})
    per = {c: summarise([r for r in rows if r["config"] == c]) for c in configs}
    total = summarise(rows)
    stable = [r for r in rows if r["config"].startswith("stable")]
    touched = sum(bool(r["on"]["actions"]) for r in stable)
    lines = [
        "# Remediation benchmark, tables pooled",
        "",
        f"Command: `{command}`. Seeds {seed_ranges(total['seeds'])}; the verdicts are the "
        "tables' own (μ's final accuracy, 32 responses per held-out prompt; 5 points "
        "count as the same). *Incident undone*: the stable twin (same seed, the incident "
        "never happened) against the run without remediation, judged as a remediation "
        "would be: a pair on which it ends more than 5 points lower is one that no policy, "
        "not even one that gave back everything the incident took, can be sure not to lose.",
        "",
        "| config | pairs | collapse without | prevented | rescued | worse with remediation "
        "| on − off, mean ± SD (points) | incident undone: worse | π worse |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in [*per.items(), ("**all**", total)]:
        sd = "" if s["gap_sd"] is None else f" ± {100 * s['gap_sd']:.1f}"
        undone = f"{s['twin_worse']}/{s['incident_pairs']}" if s["incident_pairs"] else "-"
        lines.append(
            f"| {name} | {s['pairs']} | {s['collapsing']} | {s['prevented']}/{s['collapsing']} "
            f"| {s['rescued']}/{s['collapsing']} | {s['worse']}/{s['pairs']} "
            f"| {_points(s['gap_mean'])}{sd} | {undone} | {s['pi_worse']}/{s['pi_pairs']} |"
        )
    lines += ["", f"Stable runs with an automatic action: {touched}/{len(stable)}."]
    if noise is not None:
        lines.append(
            f"A fork with no action at all (same run, another seed from a checkpoint) ends "
            f"more than 5 points lower in {noise[0]}/{noise[1]} forks."
        )
    tables = ", ".join(f"`{t}`" for t in sorted({r["table"] for r in rows}))
    lines += ["", f"Tables pooled: {tables}.", ""]
    lines += ["Every pair is in the JSON beside this page (`pairs`): it pools with new tables."]
    write_page(
        out,
        lines,
        command,
        configs=per,
        all=total,
        stable_runs=len(stable),
        stable_runs_with_an_action=touched,
        noise_forks_lower=None if noise is None else {"lower": noise[0], "forks": noise[1]},
        pairs=[{k: v for k, v in r.items() if k != "table"} for r in rows],
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="minirl bench remediation-pool", description=__doc__.split("\n")[0]
    )
    p.add_argument("tables", nargs="+", type=Path, help="remediation tables (.json)")
    p.add_argument("--noise", type=Path, help="a remediation-noise table (.json)")
    p.add_argument("--out", default=str(RESULTS / "remediation.md"))
    args = p.parse_args(argv)
    rows = load(args.tables)
    noise = noise_share(args.noise) if args.noise else None
    command = ("minirl bench remediation-pool " + shlex.join(argv)).strip()
    write(rows, noise, command, Path(args.out))
    print(f"wrote {args.out}")
    return 0
