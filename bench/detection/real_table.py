"""The public runs, judged as a user would: per run, per fold, per source, both monitors.

A collapse is *caught* when the first warning or critical comes at least `LEAD_GOAL`
steps before the onset and no critical comes more than `EARLY_PAGE` steps before it (a
page that early is not about this collapse). A stable run is *paged* when any critical
fires; stable runs whose gradient norm rose 1000× or more above its early level (the
median of its first 10 logged values) while the outcome held are counted apart.

Beside the caught rate: a collapse is *too early* for any 10-step lead when its onset
comes before a default change rule first has a baseline on the run's own logged steps
(`ready`) plus `LEAD_GOAL`; *announced* when, with hindsight, a health metric moved
`LEAD_GOAL` steps or more before the onset (`announced`); caught *near* the onset when
its first alert is at most `EARLY_PAGE` steps ahead (a warning of any age counts as a
catch, and one long before the turn tells a user little). The *delay* is the steps from
the onset to the first critical at or after it; its median is over those paged after it.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Sequence

from bench.detection.corpus import Run
from bench.detection.monitors import Fired
from bench.detection.score import LEAD_GOAL
from bench.detection.uncertainty import interval, uncertainty
from monitor.analysis.precursors import find_precursors
from monitor.config import MonitorConfig
from monitor.detectors.change import ChangeDetector
from monitor.detectors.config import ChangeRule
from monitor.detectors.rules import SETTINGS

EARLY_PAGE = 60
DEFINITIONS = (
    "Definitions: a collapse is *too early* for any 10-step lead when its onset comes "
    "before the step at which a default change rule first has a baseline on the run's own"
    " logged steps, plus 10 steps; *caught, of the rest* is the caught rate without them;"
    " a collapse is *announced* when, with hindsight, a health metric (IS factors,"
    " optimisation, lengths; not a setting, not the outcome) moved by `minirl analyze`'s"
    " precursor test (robust z ≥ 5 for 3 points against the first half of the steps"
    " before the onset from where the outcome had gained half its peak, so that what"
    " moves as the run learns is no precursor) at least 10 steps before the onset;"
    f" a catch is *near* the onset when its first alert is at most {EARLY_PAGE} steps"
    " ahead (the definition lets a warning of any age count);"
    " the *delay* is the steps from the onset to the first critical at or after it (a "
    "late page is still a page), its median over the collapses paged after the onset."
)
EXPLODED = 1000.0
HEALTH = ("mismatch/", "is/", "staleness/", "routing/", "approx/", "policy/", "response/")
"""Prefixes of the health metrics (with `optim/grad_norm`) whose move announces a collapse."""
LONG = 130
"""Steps from which a run is long (typical verl GRPO and DAPO recipes run 130-500)."""
HEALTH_GROUPS = {
    "gradient norm": ("optim/grad_norm",),
    "entropy": ("policy/entropy",),
    "lengths": ("response/",),
    "clip share or PPO KL": ("staleness/",),
    "training-inference mismatch": ("mismatch/", "is/"),
}
RICH = 4
"""Health groups a run must log, of `HEALTH_GROUPS`, to be rich (verl logs all five)."""
FAMILIES = {"verl": r"(?i)\bverl\b", "TRL": r"\bTRL\b", "slime": r"(?i)slime"}
"""A trainer family, and how a source's description names it (TRL in capitals only)."""


def exploded(run: Run) -> bool:
    g = [v["optim/grad_norm"] for _, v in run.stream if v.get("optim/grad_norm", 0.0) > 0]
    return len(g) >= 10 and max(g) >= EXPLODED * statistics.median(g[:10])


def ready(run: Run) -> int | None:
    """The step at which a default change rule first has a baseline on this run's steps."""
    d = ChangeDetector("probe", ChangeRule("probe", "optimisation", "up", ""))
    for i, (step, _) in enumerate(run.stream):
        d.update(step, {"probe": 1.0 + 0.01 * (i % 3)})
        if d.score() is not None:
            return step
    return None


def announced(run: Run) -> bool:
    """Whether a health metric moved at least LEAD_GOAL steps before the onset (module
    docstring): hindsight, the whole log known, so an upper bound for any live rule."""
    if run.onset is None or run.outcome is None:
        return False
    outcome = run.outcome

    def kept(name: str) -> bool:
        health = name.startswith(HEALTH) or name == "optim/grad_norm"
        return (health and name not in SETTINGS) or name == outcome

    arrays = run.series(kept)
    found = find_precursors(arrays, run.onset, outcome, MonitorConfig())
    return found is not None and any(p.lead >= LEAD_GOAL for p in found[2])


def family(trainer: str) -> str:
    """The trainer family a source's description names: verl, TRL, slime, or other."""
    for name, pattern in FAMILIES.items():
        if re.search(pattern, trainer):
            return name
    return "other"


def long_and_rich(run: Run) -> bool:
    """A run as verl logs one: `LONG` steps or more, `RICH` health groups logged."""
    names = set().union(*(values for _, values in run.stream))
    groups = sum(any(n.startswith(g) for n in names) for g in HEALTH_GROUPS.values())
    return bool(run.stream) and run.stream[-1][0] >= LONG and groups >= RICH


def judge(run: Run, fired: Sequence[Fired]) -> dict:
    """One public run's object of detection.json's `real_runs`."""
    crit = [f.step for f in fired if f.severity == "critical"]
    first = fired[0].step if fired else None
    caught = too_early = delay = told = None
    if run.label == "collapse" and run.onset is not None:
        told = announced(run)
        r = ready(run)
        too_early = r is None or run.onset < r + LEAD_GOAL
        late = [c for c in crit if c >= run.onset]
        delay = late[0] - run.onset if late else None
        caught = (
            first is not None
            and run.onset - first >= LEAD_GOAL
            and not any(c < run.onset - EARLY_PAGE for c in crit)
        )
    return {
        "run": run.name,
        "source": run.meta.get("repository", ""),
        "trainer": run.meta.get("trainer", ""),
        "family": family(run.meta.get("trainer", "")),
        "long_and_rich": long_and_rich(run),
        "label": run.label,
        "onset": run.onset,
        "fold": run.split,
        "first_alert": first,
        "first_critical": crit[0] if crit else None,
        "warnings": sum(f.severity == "warning" for f in fired),
        "caught": caught,
        "lead": run.onset - first if caught else None,
        "too_early": too_early,
        "announced": told,
        "critical_delay": delay,
        "steps": run.steps,
        "grad_exploded": exploded(run) if run.label == "stable" else None,
    }


def totals(objs: Sequence[dict]) -> dict:
    col = [o for o in objs if o["label"] == "collapse"]
    held = [o for o in objs if o["label"] == "stable" and not o["grad_exploded"]]
    boom = [o for o in objs if o["label"] == "stable" and o["grad_exploded"]]
    stable_steps = sum(o["steps"] for o in held + boom)
    warnings = sum(o["warnings"] for o in held + boom)
    rest = [o for o in col if not o.get("too_early")]
    told = [o for o in col if o.get("announced")]
    delays = sorted(o["critical_delay"] for o in col if o.get("critical_delay") is not None)
    caught = sum(bool(o["caught"]) for o in col)
    paged = sum(o["first_critical"] is not None for o in held)
    return {
        "runs": len(objs),
        "too_early": len(col) - len(rest),
        "caught_rest": sum(bool(o["caught"]) for o in rest),
        "announced": len(told),
        "caught_announced": sum(bool(o["caught"]) for o in told),
        "paged_after_onset": len(delays),
        "median_critical_delay": statistics.median(delays) if delays else None,
        "sources": len({o["source"] for o in objs}),
        "collapses": len(col),
        "caught": caught,
        "caught_interval": interval(caught, len(col)),
        "caught_near": sum(bool(o["caught"]) and o["lead"] <= EARLY_PAGE for o in col),
        "stable_held": len(held),
        "stable_held_paged": paged,
        "stable_held_paged_interval": interval(paged, len(held)),
        "stable_exploded": len(boom),
        "stable_exploded_paged": sum(o["first_critical"] is not None for o in boom),
        "stable_steps": stable_steps,
        "warnings_per_100_stable_steps": round(100 * warnings / stable_steps, 2)
        if stable_steps
        else None,
    }


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else "-"


def _row(label: str, t: dict) -> str:
    w = t["warnings_per_100_stable_steps"]
    return (
        f"| {label} | {t['runs']} | {pct(t['caught'], t['collapses'])} | "
        f"{pct(t['caught_near'], t['collapses'])} | "
        f"{pct(t['stable_held_paged'], t['stable_held'])} | "
        f"{pct(t['stable_exploded_paged'], t['stable_exploded'])} | "
        f"{'-' if w is None else f'{w:.2f}'} | {t['too_early']} | "
        f"{pct(t['caught_rest'], t['collapses'] - t['too_early'])} | "
        f"{t['announced']}/{t['collapses']} | {pct(t['caught_announced'], t['announced'])} | "
        f"{_dash(t['median_critical_delay'])} ({t['paged_after_onset']}/{t['collapses']}) |"
    )


HEAD = [
    f"| monitor · set | runs | collapses caught (≥ {LEAD_GOAL} steps early, no critical > "
    f"{EARLY_PAGE} before) | caught near the onset (first alert ≤ {EARLY_PAGE} ahead) | "
    "stable paged (grad norm held) | stable paged (grad norm ≥ "
    f"{EXPLODED:g}×, outcome held) | warnings / 100 stable steps | collapses too early "
    "for a lead | caught, of the rest | announced ≥ 10 steps ahead (hindsight) | caught, of "
    "the announced | median delay of the first critical after the onset (paged after it) |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
]


def section(
    objs: dict[str, list[dict]], swapped: list[dict], swapped_table: list[str]
) -> tuple[list[str], dict]:
    """Markdown lines leading detection.md, and the JSON totals (per monitor and fold,
    and per direction of the swapped folds: `folds.cross`, drawn as `swapped_table`)."""
    folds: dict = {
        m: {f: totals([o for o in v if o["fold"] == f]) for f in ("report", "tune")}
        for m, v in objs.items()
    }
    lines = [
        "## Public runs of other trainers (bench/data/real; split by repository into folds)",
        "",
        "Fold A (`tune`) and fold B (`report`) split the public runs by repository. The "
        "defaults (below) were frozen before the report fold was scored.",
        "",
        *HEAD,
    ]
    for fold in ("report", "tune"):
        for m in objs:
            lines.append(_row(f"{m} · {fold} fold (defaults)", folds[m][fold]))
    lines += [
        "",
        uncertainty(folds),
        "",
        DEFINITIONS,
        "",
        "Swapped folds: the breakdown rule's free parameters (`extreme` × `sharpening_drop`, "
        "bench/detection/folds.py) chosen on one fold, scored on the other:",
        "",
        *swapped_table,
        "",
        _frozen_note(folds["ours"], swapped),
    ]
    folds["cross"] = swapped
    lines += ["", *coverage(objs["ours"])]
    by_source: dict[str, list[dict]] = defaultdict(list)
    for o in objs["ours"]:
        by_source[o["source"]].append(o)
    theirs = {o["run"]: o for o in objs.get("rlwatch", [])}
    lines += [
        "",
        "Per source (ours | rlwatch): fold, runs, collapses caught, stable paged (all), "
        "warnings / 100 stable steps.",
        "",
        "| source | fold | runs | caught | stable paged | warnings / 100 |",
        "|---|---|---|---|---|---|",
    ]
    for src, mine in sorted(by_source.items()):
        a, b = totals(mine), totals([theirs[o["run"]] for o in mine if o["run"] in theirs])

        def both(key: str, a: dict = a, b: dict = b) -> str:
            return f"{_dash(a[key])} \\| {_dash(b.get(key))}"

        paged_a = a["stable_held_paged"] + a["stable_exploded_paged"]
        paged_b = b["stable_held_paged"] + b["stable_exploded_paged"]
        n_stable = a["stable_held"] + a["stable_exploded"]
        lines.append(
            f"| {src} | {mine[0]['fold']} | {a['runs']} | {both('caught')}/{a['collapses']} | "
            f"{paged_a} \\| {paged_b}/{n_stable} | "
            f"{both('warnings_per_100_stable_steps')} |"
        )
    lines += [
        "",
        "Per public run (ours; `detection.json` `real_runs` has both monitors):",
        "",
        "| run | fold | label | onset | first alert | first critical | warnings | caught |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in objs["ours"]:
        lines.append(
            f"| {o['run'][5:]} | {o['fold']} | {o['label']} | {_dash(o['onset'])} | "
            f"{_dash(o['first_alert'])} | {_dash(o['first_critical'])} | {o['warnings']} | "
            f"{_dash(o['caught'])} |"
        )
    return lines, folds


def coverage(objs: Sequence[dict]) -> list[str]:
    """Ours by trainer family and kind of run, both folds: which runs the rates stand on."""
    groups: dict[tuple[str, bool], list[dict]] = defaultdict(list)
    for o in objs:
        groups[(o["family"], o["long_and_rich"])].append(o)
    lines = [
        f"By kind of run (ours, both folds): *long and rich* is {LONG} steps or more with at "
        f"least {RICH} of {len(HEALTH_GROUPS)} health groups logged ("
        + ", ".join(HEALTH_GROUPS)
        + "), as verl and slime log by default. A rate over few collapses, or none, says "
        "little about that kind of run.",
        "",
        "| trainer | kind | runs | collapses caught | stable paged (grad norm held) "
        "| warnings / 100 stable steps |",
        "|---|---|---|---|---|---|",
    ]
    for (fam, rich), group in sorted(groups.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
        t = totals(group)
        w = t["warnings_per_100_stable_steps"]
        lines.append(
            f"| {fam} | {'long and rich' if rich else 'shorter or sparser'} | {t['runs']} | "
            f"{pct(t['caught'], t['collapses']) if t['collapses'] else '0 collapses'} | "
            f"{pct(t['stable_held_paged'], t['stable_held'])} | {'-' if w is None else w} |"
        )
    return lines


def _frozen_note(ours: dict, swapped: list[dict]) -> str:
    """Which choice the shipped defaults are, and on how much evidence each fold chose."""
    a, b = ours["tune"], ours["report"]
    by_a = next(d for d in swapped if d["chosen_on"] == "tune")
    same = len({str(d["point"]) for d in swapped}) == 1
    evidence = (
        f"{a['collapses']} collapses and {a['stable_held'] + a['stable_exploded']} stable "
        f"runs (fold B: {b['collapses']} and {b['stable_held'] + b['stable_exploded']})"
    )
    if by_a["frozen_is_this_choice"]:
        choice = (
            f"The shipped defaults are the point fold A chose (`folds.FROZEN`), on {evidence}; "
            + ("both folds choose the same point. " if same else "fold B chooses another. ")
        )
    else:  # runs added to fold A after the freeze moved its choice
        p, c, t = by_a["point"], by_a["chooser_totals"], by_a["totals"]
        choice = (
            "The shipped defaults (`folds.FROZEN`) are the point fold A chose when they were "
            f"frozen. On its runs now, {evidence}, with those added since (SOURCES.md marks "
            f"each), fold A chooses extreme {p['extreme']:g}, sharpening_drop "
            f"{p['sharpening_drop']:g}: {c['caught']}/{c['collapses']} caught there (the "
            f"defaults: {a['caught']}), {c['warnings_per_100_stable_steps']} warnings per "
            f"100 stable steps (the defaults: {a['warnings_per_100_stable_steps']}); on fold "
            f"B {t['caught']}/{t['collapses']} caught (the defaults: {b['caught']}), "
            f"{t['warnings_per_100_stable_steps']} warnings per 100 (the defaults: "
            f"{b['warnings_per_100_stable_steps']}). The defaults are kept: fold B has been "
            "scored with them in every report since, so a choice made now is not one that "
            "fold B had no part in. "
        )
    return choice + (
        "The mechanisms themselves (warm-ups in steps, the starting level as a reference, "
        "a zero gradient norm carrying no scale) were designed by reading fold A's streams, "
        "so B → A is a swap of the two parameters, not of the design. One was found on fold "
        "B: a page whose message gave the outcome's noise as ±0 (an unknown noise read as "
        "none, on a sparse log's first points); its fix changes nothing on fold A. The label "
        "rule's noise test was prompted by runs of both folds (a fold-B Wordle run whose "
        "reward is noise between −2 and 2); its threshold is the drop rules' existing "
        "`noise_z`, not chosen on any run, and the runs it relabelled, caught or not, are "
        "listed in SOURCES.md."
    )


def _dash(v: object) -> str:
    return "-" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
