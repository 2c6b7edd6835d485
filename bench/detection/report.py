"""bench/results/detection.md and detection.json from the scored runs of both monitors."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.detection import uncertainty
from bench.detection.corpus import UNSEEN_SEEDS
from bench.detection.score import LEAD_GOAL, MEDIAN_LEAD_GOAL, RunScore, Summary, summarise
from bench.markdown import seed_ranges

MONITORS = ("ours", "rlwatch")
TRIED = [
    "- Thresholds tuned on the lab alone: on real runs the breakdown rule paged healthy "
    "runs as they sharpened (ESS falling, entropy falling, lengths growing while the reward "
    "rose). Now sharpening is info while the outcome holds, and joint precursors page only "
    "with a setting or a jump of orders of magnitude among them.",
    "- A 1e-4 floor under the staleness KL's baseline: ordinary PPO KLs (3e-4 to 1e-3) read "
    "as 3-35× above it on most stable runs. The baseline is now the run's own level.",
    "- Warm-ups counted in logged points: a run logged every 5 steps (40 points) had its "
    "outcome collapse paged 100+ steps after the onset. They count steps now, with floors "
    "in points; the outcome's starting level is a reference of its own.",
    "- Smoothing the outcome per step rather than per point on such runs (α per step): "
    "their noisy rewards paged far more stable runs on the tuning fold; not kept.",
    "- Bug signatures (signatures.py) are not precursors: they never feed the breakdown "
    "rule, but a signature firing before an onset counts as the first alert.",
    "- A gradient norm of exactly 0 taught the grad-norm baseline: trainers log 0 on steps "
    "with nothing to learn (every group's advantages zero; two thirds of one source's "
    "steps), the baseline sat at the floor and every later gradient read as a 10^7× "
    "explosion. Zeros are skipped now; one tuning-fold catch was this artefact and is gone. "
    "The hindsight precursor test (*announced*) kept them for longer: a baseline of zeros "
    "read the norm's usual 0.5 as |z| 10^11, and two of the four collapses counted as "
    "announced (one per fold) were this; it drops them now as the live rule does.",
    "- The tuning fold's in-reach misses, read from their streams: the collapses are abrupt "
    "(answers run into the length cap within 2-5 steps, or entropy and the gradient norm "
    "jump one step before NaN); nothing but the slow length growth healthy runs share "
    "moves 10 steps before them, so they are paged after the onset, not ahead of it.",
    "- The label rule called noise a collapse: on a reward of a few prompts a step (or of a "
    "run whose gradient was 0 on most steps: nothing trained), the running median's peak "
    "and its last window differ by half the gain by chance. A collapse now needs a fall "
    "its noise cannot explain (`collapse.fall_z`: the mean after the onset at least 4 "
    "standard errors below as many points before it); 14 public runs and 2 lab runs "
    "labelled collapse before are stable since. Every public collapse left falls ≥ 4.9 "
    "standard errors (one more is labelled by its non-finite loss); the 14 fell ≤ 2.5.",
    "- How many public collapses any rule could have caught in time: with hindsight, a "
    "health metric moved by `minirl analyze`'s precursor test 10 or more steps before the "
    "onset on few of them (*announced*, in the table above); a rule that warns on the "
    "others 10 steps ahead warns on noise, and pays for it on the stable runs.",
    "- Runs set up against the paper's recipe move no setting, so the change rules see "
    "nothing, and their streams announce little: the lab's organic collapses (off-policy 2×, "
    "4×, 8× without clipping, length normalisation on 4-digit traces, lr 1e-3, all from step "
    "1) show no precursor 10 steps ahead. The setup rules (`unclipped_off_policy`, "
    "`length_normalised`) read the settings at the first RL step instead; the collapses that "
    "come 10 or more steps after it are alerted in time, the others (4× and 8× at steps "
    "6-13, lr 1e-3 at 5-6) cannot be by anything. Two slower configs were added to see "
    "whether a later collapse is announced by the trajectory alone: 4× without clipping at "
    "lr 1.4e-4 collapses on all 4 report seeds, at steps 18-168, and with the settings "
    "hidden only the latest (onset 168: a χ² warning at step 102) is alerted in time; an "
    "on-policy lr of 3e-4 erodes the reward on 1 of 4 report seeds (onset 16) and on both "
    "tuning seeds (44 and 63), with nothing but the reward moving first, paged 13-70 steps "
    "after the onset as the slow fall crosses half the gain. Another of its report seeds "
    "dipped by a quarter of its gain at step 217 and recovered: paged, the lab's one stable "
    "run paged (the outcome falling with one precursor, ESS, open).",
    "- A non-finite gradient norm paged at once: three stable runs of both folds logged one "
    "inf/NaN norm and trained on (a step the optimizer skipped, as mixed-precision loss "
    "scaling does). A lone one is a warning now (`NonFiniteRule.skippable`), critical when "
    "the next logged norm is non-finite too; a non-finite loss is critical at once.",
    "- Faster precursors, for the lab's settings-hidden streams (a jump to 4× or 8× "
    "mini-batches is seen 3-4 steps after it): holding a change rule for 2 points, not 3, "
    "gives 214/320 in time (from 199), but warnings per 100 stable steps rise to 0.58 on "
    "the public tuning fold (from 0.46) and 0.73 on the lab report seeds (from 0.30), and "
    "2 stable lab runs are paged; held for 1 point, 228/320 at 0.59 and 1.17. Not kept: "
    "the tuning fold's warning budget (0.5) ruled both out. Measured again on the tuning set "
    "with today's rules: held for 2 points, no more collapses caught (2/23 public, 5/6 lab "
    "with the settings hidden) at 0.26 warnings per 100 public stable steps (from 0.20); for "
    "1 point, the same catches at 0.28 and 0.83 on the lab's tuning seeds (over the budget). "
    "Nothing gained where it is chosen, so the calmer 3 stays. Showing a sharpening move as a "
    "warning sooner (`sharpening_drop` 0-0.1 instead of 0.25) changes no lab catch (199/320 "
    "hidden at each); on the public tuning fold 0.05-0.1 change none either, and 0 (every "
    "sharpening move a warning) catches one more collapse at 0.86 warnings per 100.",
    "- A gain within the noise read as a gain: a shaped reward wandering around 0 (a "
    "fold-A economic agent's, -0.3 to 0.3 a step) had a smoothed peak of 0.07 at the end of "
    "the warm-up, and its next dip below 0 read as 279 % of that gain lost: a page. The "
    "gain must now exceed the same noise guard as the fall; no other run of either fold, "
    "and no lab run, changes.",
    "- A faster reading of the outcome for sparse logs (an EWMA of α = 0.1 per point loses "
    "half of a fall in ~7 points, 35 steps on a log every 5 steps): the mean of the last 3, "
    "5 or 8 logged rewards judged against the peak, with that mean's noise measured while "
    "the reward held its level. On the tuning fold, with 3, the median delay of the first "
    "critical after the onset falls from 25.5 to 15 steps, but 2 more stable runs are paged "
    "(7/80, from 5: rewards that dipped to a fifth of their peak for 3-4 points and "
    "recovered) and one collapse fewer is caught (a page more than 60 steps before its "
    "onset); 5 and 8 page the same 7. A dip that recovers and a fall that does not look "
    "alike for those few points; only the EWMA's slower verdict tells them apart. Not kept "
    "(measuring the mean's noise over the whole history instead, the fall included, kept the "
    "pages at 5 only because a fall under way then inflates its own noise).",
    "- A rule on the share of answers cut at the length cap (`response/trunc_frac`, logged "
    "by 16 of the public collapses): it rises (3× its early level and 0.2 above it, for 2 "
    "points) at the onset or after it on 11 of them, never on 3, and 10 or more steps "
    "before it on 2 (one 90 steps early, on a dip that recovered before the real fall); 22 "
    "stable runs of 11 sources sit at a median share of 0.5 or more (tasks whose answer "
    "comes early in a long text). No signal ahead of the collapses, a level stable runs "
    "share: not added.",
    "- An early level learned while the mismatch already climbed: on a public prime-rl run "
    "(fold A, added after the defaults were frozen) the training-inference KL climbed from "
    "0.001 to 4 over 120 steps and no rule fired. The drift rule's early level, 20 points, "
    "spanned a 200× climb, and their MAD took the climb for noise (z 1.4 at 15× that level). "
    "The drift rules now read their noise from the early level's step-to-step changes "
    "(median |Δ| / 0.954): the run is warned at step 46; no catch or page changed on either "
    "fold or in the lab (32 lab streams gain or lose one drift warning). The same noise for "
    "every change rule, moving baselines too, was tried on the tuning sets: no collapse more "
    "caught on fold A, warnings 0.20 -> 0.31 per 100 stable steps, one lab collapse fewer "
    "caught with the settings hidden (6/10 -> 5/10): not kept.",
    "- A clip share rising within the level a healthy clipped update has: the clip-share "
    "rule's noise floor was 0.1 %, and shares going from 0.1-0.2 % to 0.4-0.7 % warned on "
    "public PPO and GRPO runs that held (verl PPO, TRL GRPO, DAPO) and on every lab seed "
    "sharing one early trajectory (the lab's healthy share: 0.2 % median, 0.4 % at the 90th "
    "percentile). Chosen on the tuning sets: floors of 0.3 % to 10 % catch the same "
    "collapses there (fold A 2/23; lab 8/10, 6/10 hidden), one fold-A critical comes 5 "
    "steps later (after its onset), and the lab's warnings per 100 healthy steps fall from "
    "0.55 to 0.09; 0.3 %, the smallest, was taken. Then scored: fold B catches the same, "
    "pages one stable run fewer (8 -> 7 of 224); the lab report seeds catch the same.",
]
TITLES = {"ours": "ours (defaults)", "rlwatch": "rlwatch 0.5.1 (defaults)"}


def _frac(a: int, b: int) -> str:
    return f"{a}/{b}" if b else "-"


def _lead(s: Summary) -> str:
    if not s.leads:
        return "-"
    return f"{s.median_lead:g} ({s.leads[0]}-{s.leads[-1]})"


def summary_table(summaries: dict[str, Summary]) -> list[str]:
    rows = [
        f"| monitor | collapses alerted ≥ {LEAD_GOAL} steps early | median lead (range) | late "
        "| missed | stable runs with a critical | criticals before an incident | warnings / 100 "
        "healthy steps | blamed factor = induced cause | survived incidents alerted |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summaries.items():
        wpm = "-" if s.warnings_per_100_steps is None else f"{s.warnings_per_100_steps:.2f}"
        rows.append(
            f"| {TITLES.get(name, name)} | {_frac(s.caught, s.collapses)} | {_lead(s)} | "
            f"{s.late} | {s.missed} | {_frac(s.false_critical, s.stable)} | "
            f"{s.criticals_before_incident} | {wpm} | "
            f"{_frac(s.blame_correct, s.blame_known)} | {_frac(s.survived_alerted, s.survived)} |"
        )
    return rows


def lab_table(scores: dict[str, list[RunScore]], hidden: Sequence[RunScore]) -> list[str]:
    """Lab runs pooled by config and split, seeds as a range (one row per config, not
    per seed); `hidden`: ours on the same runs with their settings hidden."""
    rows = [
        "| config | set | seeds | runs | collapses caught (ours \\| rlwatch) | caught, settings "
        "hidden (ours) | stable with a critical (ours \\| rlwatch) | warnings (ours) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    theirs = {r.run: r for r in scores["rlwatch"]}
    blind = {r.run: r for r in hidden}
    pools: dict[tuple[str, str], list[RunScore]] = {}
    for r in scores["ours"]:
        if r.run.startswith("lab/"):
            pools.setdefault((r.run.removeprefix("lab/").rsplit("/", 1)[0], r.split), []).append(r)
    for (config, split), runs in sorted(pools.items()):
        seeds = sorted(_seed(r) for r in runs)
        a = summarise(runs)
        b = summarise([theirs[r.run] for r in runs])
        c = summarise([blind[r.run] for r in runs if r.run in blind])
        rows.append(
            f"| {config} | {split} | {seeds[0]}-{seeds[-1]} | {len(runs)} | "
            f"{a.caught} \\| {b.caught}/{a.collapses} | "
            f"{_frac(c.caught, a.collapses)} | "
            f"{a.false_critical} \\| {b.false_critical}/{a.stable} | "
            f"{sum(r.warnings for r in runs)} |"
        )
    return rows


def organic(scores: dict[str, list[RunScore]], hidden: Sequence[RunScore]) -> dict[str, Summary]:
    """Both monitors, and ours with the settings hidden, on the organic lab runs of the
    report seeds: collapses no scripted incident announces, the lab's nearest to a real
    run."""

    def kept(runs: Sequence[RunScore]) -> list[RunScore]:
        return [r for r in runs if r.run.startswith("lab/organic/") and r.split == "report"]

    return {
        "ours": summarise(kept(scores["ours"])),
        "ours, settings hidden": summarise(kept(hidden)),
        "rlwatch": summarise(kept(scores["rlwatch"])),
    }


def write(
    scores: dict[str, list[RunScore]],
    command: str,
    out: Path,
    real: tuple[list[str], dict, dict] | None = None,
    hidden: Sequence[RunScore] = (),
) -> dict:
    """Write the markdown and the JSON beside it; returns the JSON object. `real`: the
    public runs' section (real_table.section) and their per-run objects, which lead;
    `hidden`: ours on the lab runs with their settings hidden (`without_settings`)."""
    by_split = {
        split: {m: summarise([r for r in scores[m] if r.split == split]) for m in MONITORS}
        for split in ("report", "tune")
    }

    def report_runs(m: str, keep: Callable[[RunScore], bool]) -> Summary:
        return summarise([r for r in scores[m] if r.split == "report" and keep(r)])

    groups = {
        group: {m: report_runs(m, lambda r, g=group: r.run.startswith(g + "/")) for m in MONITORS}
        for group in ("lab", "real")
    }
    unseen = {m: report_runs(m, lambda r: _seed(r) in UNSEEN_SEEDS) for m in MONITORS}
    blind = {
        "ours": groups["lab"]["ours"],
        "ours, settings hidden": summarise([r for r in hidden if r.split == "report"]),
        "rlwatch": groups["lab"]["rlwatch"],
    }
    natural = organic(scores, hidden)
    lab_seeds = sorted({k for r in scores["ours"] if r.split == "report" and (k := _seed(r)) >= 0})
    counts = {
        label: sum(r.label == label for r in scores["ours"])
        for label in ("collapse", "stable", "survived")
    }
    lines = [
        "# Detection benchmark: our default detectors vs rlwatch, on labelled runs",
        "",
        f"Command: `{command}`. Runs: {len(scores['ours'])} ({counts['collapse']} collapsing, "
        f"{counts['stable']} stable, {counts['survived']} with an incident that did not "
        "collapse). Both monitors read the same streams step by step, with their defaults.",
        "",
        *(real[0] if real else []),
        "",
        "## Lab and public runs pooled: report set (every run outside the tuning set)",
        "",
        *summary_table(by_split["report"]),
        "",
        f"Goals (issue 13): ≥ 80 % of collapses alerted ≥ {LEAD_GOAL} steps before the onset, "
        f"median lead against {MEDIAN_LEAD_GOAL} steps; ≤ 1 stable run in 10 with a critical; "
        "≤ 0.5 warnings per 100 steps on stable runs; blamed factor = induced cause in ≥ 80 %.",
        "",
        "### Report set by source",
        "",
        f"Lab runs (seeds {seed_ranges(lab_seeds)}):",
        "",
        *summary_table(groups["lab"]),
        "",
        uncertainty.lab(
            groups["lab"]["ours"].caught,
            groups["lab"]["ours"].collapses,
            groups["lab"]["ours"].false_critical,
            groups["lab"]["ours"].stable,
        ),
        "",
        f"Of which seeds {seed_ranges(UNSEEN_SEEDS)} alone: no default was designed on "
        "them (the lab's on seeds before them, the public runs' free parameters on a fold "
        "of public runs):",
        "",
        *summary_table(unseen),
        "",
        "The same lab runs with their settings hidden, as a log of another trainer reads "
        "them: no policy updates per rollout, rollout precision, clip or "
        "length-normalisation setting, only what the run measured and its learning rate, "
        "which trainers log (`monitors.without_settings`). Most lab incidents are a setting "
        "moving, which the setting rules read the step it moves; hidden, only the measured "
        "trajectory can announce them, as on a real run. rlwatch's detectors use none of "
        "these settings, so its row is the same:",
        "",
        *summary_table(blind),
        "",
        "Of which the organic runs alone (`configs/lab/organic/`): no scripted incident, each "
        "run set up so from step 1 and left to fail or not, as users' runs are. Hidden, they "
        "are the lab's nearest to a real run, whose cause no logged setting announces:",
        "",
        *summary_table(natural),
        "",
        "Public logs of other trainers (bench/data/real/SOURCES.md):",
        "",
        *summary_table(groups["real"]),
        "",
        "## Tuning set (where the defaults were chosen: optimistic)",
        "",
        *summary_table(by_split["tune"]),
        "",
        "## What we tried, and why it failed",
        "",
        *TRIED,
        "",
        "## Lab runs by config",
        "",
        *lab_table(scores, hidden),
        "",
    ]
    out.write_text("\n".join(lines))
    obj = {
        "command": command,
        "report": {m: by_split["report"][m].as_json() for m in MONITORS},
        "tune": {m: by_split["tune"][m].as_json() for m in MONITORS},
        "report_by_source": {g: {m: s.as_json() for m, s in v.items()} for g, v in groups.items()},
        "report_unseen_seeds": {m: s.as_json() for m, s in unseen.items()},
        "report_lab_settings_hidden": blind["ours, settings hidden"].as_json(),
        "report_lab_organic": {m: s.as_json() for m, s in natural.items()},
        "runs": {m: [vars(r) for r in scores[m] if r.run.startswith("lab/")] for m in MONITORS},
    }
    if real:
        obj["real_runs"] = real[2]
        obj["real_runs_totals"] = real[1]
    out.with_suffix(".json").write_text(json.dumps(obj, indent=1) + "\n")
    return obj


def _seed(r: RunScore) -> int:
    """The seed of a lab run (`lab/<config>/seed<k>`), -1 for a public log."""
    last = r.run.rsplit("/", 1)[-1]
    return int(last[4:]) if r.run.startswith("lab/") and last[4:].isdigit() else -1
