"""Write bench/results/<machine>.md and .png from a tune_bench journal.

Cells are the median of the final interleaved rounds with ± half the interquartile range
(relative) and the rounds measured. The paired ratios and the TARGETS table (issue 17) compare
each arm with the other in the same round (paired.py), with a t-interval over the rounds; a
target counts as met only when its interval's lower bound clears it. The issue-6 targets keep
their blocked fit (hwtune.tune.stats.Blocked: one level per round, pooled residual noise).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import background
import budgets
import paired
from peers import COLUMNS, HEADINGS, not_run_lines, paired_table, targets17
from scenarios import FULL_ORACLE_ROUNDS, SCENARIOS

from hwtune.tune.stats import Blocked, Comparison, summarize

TUNE_RUNS = {"tune": 1, "tune2": 2}
# Issue 6, "Correct": two tuner runs pick settings whose throughputs are within 3%.
REPRODUCIBLE_WITHIN = 0.03
QUICK = "QUICK run (tiny grid, 1 round: checks the machinery, measures nothing)"
SMOKE = "SMOKE run (plan and peers only, 2 short rounds: checks the machinery, measures nothing)"
TITLES = {s.name: f"{s.name} {s.title}" for s in SCENARIOS}
TITLES["S3"] = "S3 MLP training in a 1-CPU CFS quota (real cgroup)"


def load(journal: Path) -> list[dict[str, Any]]:
    """The journal's entries in order; an id written again (a session's runtime, rewritten
    after each step) counts once, with its last value."""
    entries: dict[str, dict[str, Any]] = {}
    for line in journal.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            entries[entry.get("id", f"line/{len(entries)}")] = entry
    return list(entries.values())


def tune_runs(mine: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The scenario's `hwtune tune` entries by run number (journals before the second run
    was added have one, without a "run" field)."""
    return {e.get("run", 1): e for e in mine if e["phase"] == "tune"}


def scenario_data(entries: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    mine = [e for e in entries if e.get("scenario") == name]
    if not mine:
        return None
    skipped = [e for e in mine if e["phase"] == "skipped"]
    columns = [e for e in mine if e["phase"] == "columns"]
    if not columns:
        return {"skipped": skipped[-1]["reason"]} if skipped else {"incomplete": True}
    cols = columns[-1]
    design = Blocked()
    values: dict[str, list[float]] = defaultdict(list)
    failures: dict[str, list[str]] = defaultdict(list)
    for e in mine:
        if e["phase"] != "final":
            continue
        if e["value"] is None:
            failures[e["config"]].append(e["failure"])
            continue
        values[e["config"]].append(e["value"])
        design.add(e["config"], e["round"], e["value"])
    oracle = [e for e in mine if e["phase"] == "oracle"]
    space = next((e for e in mine if e["phase"] == "space"), {})
    return {
        "columns": cols["columns"],
        "labels": cols["labels"],
        "design": design,
        "values": values,
        "failures": failures,
        "space": space,
        "tunes": tune_runs(mine),
        "rounds": paired.rounds_of(mine),
        "oracle_s": sum(e["wall_s"] for e in oracle),
        "oracle_trials": len(oracle),
        "oracle_configs": len({e["config"] for e in oracle}),
    }


def ratio(
    data: dict[str, Any], a: str, b: str, equivalence: float = REPRODUCIBLE_WITHIN
) -> Comparison | None:
    """a's throughput over b's in the final rounds; "same" when the interval lies within
    ±`equivalence` (only the reproducibility target reads that verdict)."""
    ka, kb = data["columns"].get(a), data["columns"].get(b)
    if ka is None or kb is None:
        return None
    if ka == kb:
        return Comparison("same", 1.0, 1.0, 1.0)
    design: Blocked = data["design"]
    if not design.count(ka) or not design.count(kb):
        return None
    return design.compare(ka, kb, equivalence=equivalence)


def cell(data: dict[str, Any], column: str) -> str:
    key = data["columns"].get(column)
    if key is None:
        if column in TUNE_RUNS:
            return "failed" if TUNE_RUNS[column] in data["tunes"] else "not run"
        return "—"
    values = data["values"].get(key, [])
    if not values:
        return "failed: " + "; ".join(data["failures"].get(key, ["not measured"]))[:60]
    s = summarize(values)
    return f"{s.median:,.0f} ±{s.spread / 2:.0%} (n={s.n})"


def show(c: Comparison | None) -> str:
    if c is None:
        return "—"
    if c.low == c.high == 1.0:
        return "1.00× (same settings)"
    return f"{c.ratio:.2f}× [{c.low:.2f}–{c.high:.2f}]"


def judge(c: Comparison | None, target: float, indistinguishable_ok: bool = False) -> str:
    """✓ met, ✗ missed (the whole interval below target), ~ within noise of the target."""
    if c is None:
        return "—"
    if c.ratio >= target:
        return "✓"
    if indistinguishable_ok and c.verdict in ("same", "unclear", "better"):
        return "✓ (indistinguishable)"
    return "✗" if c.high < target else "~ (within noise)"


def judge_reproducible(c: Comparison | None) -> str:
    """Two tuner runs: ✓ when they picked the same settings or the ratio's 95% interval lies
    within ±3% (Comparison "same", the equivalence test); ~ when the interval is wider but
    contains 1; ✗ when it excludes 1 (one pick is clearly faster)."""
    if c is None:
        return "—"
    if c.verdict == "same":
        return "✓"
    return "~ (within noise)" if c.low <= 1.0 <= c.high else "✗"


def has_precision(space: dict[str, Any]) -> bool:
    """Whether the searched grid had a mixed-precision configuration (a bf16-capable CPU);
    True when the journal does not say."""
    grid = space.get("grid")
    return grid is None or any(c.get("precision") for c in grid)


def targets(name: str, data: dict[str, Any]) -> list[tuple[str, str, str]]:
    runs = [c for c in ("tune", "tune2") if c in data["columns"]]  # the runs that picked
    rows = [
        (
            "plan ≥ 0.95× oracle",
            show(ratio(data, "plan", "oracle")),
            judge(ratio(data, "plan", "oracle"), 0.95),
        ),
    ]
    for who in runs:
        c = ratio(data, who, "oracle")
        rows.append(
            (
                f"{HEADINGS[who]} ≥ 0.98× oracle (or indistinguishable)",
                show(c),
                judge(c, 0.98, indistinguishable_ok=True),
            )
        )
    # The share is of a full run's oracle, three passes over the grid; a run with fewer
    # passes (--oracle-rounds) scales its oracle's time up to three (tune_bench.tuner_share).
    passes = data.get("oracle_passes")
    passes = passes if isinstance(passes, int) and passes > 0 else FULL_ORACLE_ROUNDS
    full_oracle_s = data["oracle_s"] * max(1.0, FULL_ORACLE_ROUNDS / passes)
    shares = [
        data["tunes"][run]["measuring_s"] / full_oracle_s
        for run in sorted(data["tunes"])
        if "measuring_s" in data["tunes"][run] and full_oracle_s
    ]
    if shares:
        each = " (each run)" if len(shares) > 1 else ""
        if passes < FULL_ORACLE_ROUNDS:
            each += f"; its {passes}-pass time × {FULL_ORACLE_ROUNDS}/{passes}"
        rows.append(
            (
                f"tune's measuring ≤ 25% of the oracle's{each}",
                ", ".join(f"{share:.0%}" for share in shares),
                "✓" if max(shares) <= 0.25 else "✗",
            )
        )
    if len(data["tunes"]) > 1:  # journals from before the second run have no such line
        if len(runs) == 2:
            c = ratio(data, "tune2", "tune", equivalence=REPRODUCIBLE_WITHIN)
            rows.append(("two tuner runs within 3% (2nd / 1st)", show(c), judge_reproducible(c)))
        else:
            rows.append(("two tuner runs within 3% (2nd / 1st)", "a tuner run failed", "✗"))
    if name in ("S3", "S4"):
        for who in ("plan", *runs):
            c = ratio(data, who, "defaults")
            rows.append((f"{HEADINGS[who]} ≥ 1.25× TF defaults", show(c), judge(c, 1.25)))
    if name == "S1":
        for who in runs:
            c = ratio(data, who, "defaults")
            verdict = (
                judge(c, 1.4)
                if has_precision(data["space"])
                else "n/a: no bf16 in the grid (the target is for bf16-capable CPUs)"
            )
            rows.append((f"{HEADINGS[who]} ≥ 1.4× TF defaults (bf16 allowed)", show(c), verdict))
    return rows


def chart(results: dict[str, dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [n for n, d in results.items() if "columns" in d]
    if not names:
        return False
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(COLUMNS)
    for i, column in enumerate(COLUMNS):
        heights, low, high = [], [], []
        for name in names:
            data = results[name]
            oracle = data["values"].get(data["columns"].get("oracle", ""), [])
            mine = data["values"].get(data["columns"].get(column, ""), [])
            if not oracle or not mine:
                heights.append(0.0)
                low.append(0.0)
                high.append(0.0)
                continue
            base = summarize(oracle).median
            s = summarize(mine)
            heights.append(s.median / base)
            low.append((s.median - s.q1) / base)
            high.append((s.q3 - s.median) / base)
        xs = [k + (i - (len(COLUMNS) - 1) / 2) * width for k in range(len(names))]
        ax.bar(xs, heights, width, yerr=[low, high], capsize=3, label=HEADINGS[column])
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("throughput / oracle's median")
    ax.set_title(
        "TF defaults, the folklore recipe, hwtune (plan, exec, tune ×2), the grid's best "
        "(median, IQR)",
        fontsize="medium",
    )
    # Below the axes: seven peers in one row would cover the bars.
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def provenance(entries: list[dict[str, Any]]) -> str:
    """Which hwtune (git commit) and Python the run was made with, from its sessions."""
    sessions = [e for e in entries if e.get("phase") == "session"]
    if not sessions:
        return "hwtune commit, version and Python not recorded"

    def distinct(field: str) -> str:
        seen = list(dict.fromkeys(str(s.get(field) or "unknown") for s in sessions))
        return seen[0] if len(seen) == 1 else " then ".join(seen) + " (resumed)"

    return (
        f"hwtune {distinct('hwtune')} at commit `{distinct('commit')}`"
        f"{by_scenario(entries)}, Python {distinct('python')}"
    )


def by_scenario(entries: list[dict[str, Any]]) -> str:
    """Which commits measured which scenarios, where they differ: a scenario measured again
    on newer code (its entries removed from the journal, then `bench/run --scenarios S7`)
    sits beside others measured before. Entries belong to the session above them."""
    commit: str | None = None
    seen: dict[str, dict[str, None]] = {}
    for entry in entries:
        if entry.get("phase") == "session":
            commit = str(entry.get("commit") or "unknown")
        elif commit is not None and isinstance(entry.get("scenario"), str):
            seen.setdefault(entry["scenario"], {})[commit] = None
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, commits in seen.items():
        groups.setdefault(tuple(commits), []).append(name)
    if len(groups) < 2:
        return ""
    parts = [
        f"{', '.join(sorted(names))} at `{' then '.join(commits)}`"
        for commits, names in sorted(groups.items(), key=lambda item: sorted(item[1])[0])
    ]
    return " (by scenario: " + "; ".join(parts) + ")"


def load_lines(entries: list[dict[str, Any]]) -> list[str]:
    """The machine's background load during the run, and a warning when it was not quiet."""
    sessions = [e for e in entries if e.get("phase") == "session"]
    at_start = "; ".join(
        f"{s['loadavg'][0]:.2f} on {s['cpus']} CPUs" for s in sessions if s.get("loadavg")
    )
    start = f" 1-minute load average at start: {at_start}." if at_start else ""
    summary = background.summarize(entries)
    if summary is None:
        return [f"Background load: not recorded in this journal.{start}", ""]
    share = f"{background.QUIET_SHARE:.0%}"
    text = (
        f"other work used {summary.other:.1%} of the CPUs on average while the benchmark "
        f"measured (hypervisor steal {summary.steal:.1%}); {summary.noisy_trials} of "
        f"{summary.trials} trials saw more than {share} (worst {summary.worst:.0%}).{start}"
    )
    if summary.quiet:
        return [f"Background load: {text} Quiet (≤ {share} on average).", ""]
    return [
        f"> **Warning: the machine was not quiet.** Background load: {text} A loaded "
        "machine makes the same configuration vary between rounds and can favour "
        "settings that leave CPUs idle; rerun on a quiet machine before trusting the "
        "ratios.",
        "",
    ]


def oracle_rounds_text(settings: dict[str, Any]) -> str:
    """The grid's passes; a full run with fewer than three says so: its grid's best is the
    best of fewer measurements (each pick is measured again, paired, in the final rounds)."""
    rounds = settings.get("oracle_rounds")
    text = f"{rounds} oracle round{'s' if rounds != 1 else ''}"
    if not settings.get("quick") and isinstance(rounds, int) and rounds < 3:
        text += (
            " (fewer than a default full run's 3, to fit the time: the grid's best is picked "
            "from fewer measurements, then measured again, paired, in the final rounds; the "
            "tuner's budget is still 25% of three passes)"
        )
    return text


def final_rounds_text(entries: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """The final rounds asked for; a run extended later (`bench/run --final-rounds N` on a
    finished journal) says from how many, and that the added rounds came in a later session."""
    rounds = settings.get("final_rounds")
    extensions = [e for e in entries if e.get("phase") == "extend"]
    if not extensions:
        return f"{rounds} final rounds"
    last = max(int(e["final_rounds"]) for e in extensions)
    first = int(rounds or 0)
    # Scenarios measured only after the extension (run again on newer code) had all their
    # rounds, grid and tuner in the later session.
    extended_at = entries.index(extensions[0])
    before = {e.get("scenario") for e in entries[:extended_at]}
    later = sorted(
        {str(e["scenario"]) for e in entries[extended_at:] if isinstance(e.get("scenario"), str)}
        - before
    )
    whole = (
        f"; {', '.join(later)}: all {last} rounds, its grid and tuner in one later session"
        if later
        else ""
    )
    return (
        f"{last} final rounds ({first} in the first session, rounds {first + 1}-{last} "
        "added in a resumed one: the grid and the tuner were not measured again, and each "
        f"round pairs its own arms{whole})"
    )


def write(journal: Path, out_dir: Path, machine: str) -> Path:
    entries = load(journal)
    header = next((e for e in entries if e["id"] == "header"), {})
    settings = header.get("settings", {})
    results = {n: d for n in TITLES if (d := scenario_data(entries, n)) is not None}
    for data in results.values():  # the passes the run was asked for (--oracle-rounds)
        data["oracle_passes"] = settings.get("oracle_rounds")
    runtime = sum(e["wall_s"] for e in entries if e.get("phase") == "runtime")
    png = out_dir / f"{machine}.png"
    has_chart = chart(results, png)
    lines = [
        f"# hwtune benchmark — {machine}",
        "",
        f"{time.strftime('%Y-%m-%d', time.gmtime(header.get('started', time.time())))}, "
        f"{provenance(entries)}, "
        f"{(SMOKE if settings.get('smoke') else QUICK) if settings.get('quick') else 'full run'}, "
        f"{oracle_rounds_text(settings)}, {final_rounds_text(entries, settings)}, "
        f"{settings.get('seconds')} s measurement window per trial; "
        f"total runtime {runtime / 60:.0f} min. Made by `bench/run` (bench/tune_bench.py).",
        "",
        *load_lines(entries),
        "Throughput in samples/s (S8: MFLOP/s of useful work): median of the final "
        "interleaved rounds ± half the interquartile range, n = rounds. Paired ratios and "
        "the TARGETS table compare arms within each round (t-interval over the rounds); "
        "the issue-6 table's ratios come from a fit that removes each round's load level "
        "(`~` = the interval reaches the target: within noise)."
        + (
            " The tuner runs twice (seeds 0 and 1) with the same budget; both picks are measured."
            if settings.get("tune_runs", 1) > 1
            else ""
        ),
        "",
        "## Scenarios",
        "",
        "| scenario | "
        + " | ".join(HEADINGS[c] for c in COLUMNS)
        + " | tune search (each run) | oracle search |",
        "|---|" + "---:|" * (len(COLUMNS) + 2),
    ]
    detail: list[str] = []
    target_rows: list[str] = []
    for name, data in results.items():
        if "columns" not in data:
            why = data.get("skipped") or "incomplete (run `bench/run` again to resume)"
            lines.append(f"| {TITLES[name]} | skipped: {why} |" + " |" * (len(COLUMNS) + 1))
            continue
        tunes = data["tunes"]
        tune_search = (
            "; ".join(
                f"{tunes[run]['measuring_s']:.0f} s, {tunes[run]['trials']} trials"
                if "measuring_s" in tunes[run]
                else "failed"
                for run in sorted(tunes)
            )
            or "not run"
        )
        oracle_search = (
            f"{data['oracle_s']:.0f} s, {data['oracle_trials']} trials "
            f"({data['oracle_configs']} configs)"
        )
        lines.append(
            f"| {TITLES[name]} | "
            + " | ".join(cell(data, c) for c in COLUMNS)
            + f" | {tune_search} | {oracle_search} |"
        )
        space = data["space"]
        intent = f" planned with `--model {space['model']}`" if space.get("model") else ""
        args = space.get("args") or []
        if "--mode" in args[:-1]:
            intent += f" and `--mode {args[args.index('--mode') + 1]}`"
        plan_s = space.get("plan_s")
        timing = (
            f" (plan: `hwtune tune --dry-run` {plan_s:.1f} s incl. start-up)" if plan_s else ""
        )
        detail.append(f"- **{name}**{intent}{timing}")
        for column in COLUMNS:
            if column not in data["labels"]:
                continue
            seed = tunes.get(TUNE_RUNS.get(column, 0), {}).get("seed")
            note = f" (seed {seed})" if seed is not None else ""
            detail.append(f"  - {HEADINGS[column]}: `{data['labels'].get(column, '—')}`{note}")
        for run in sorted(tunes):
            if "failure" in tunes[run]:
                last = tunes[run]["failure"].strip().splitlines()[-1:]
                detail.append(f"  - tune run {run} failed: `{last}`")
        for what, value, verdict in targets(name, data):
            target_rows.append(f"| {name} | {what} | {value} | {verdict} |")
    lines += ["", "## Paired ratios", ""]
    lines += [
        "Each arm over the other in the same round (both measured minutes apart at most), "
        "geometric mean over the rounds and its 95% t-interval; n = rounds paired.",
        "",
        *paired_table(results),
    ]
    lines += ["", "## TARGETS (issue 17)", ""]
    if settings.get("quick"):
        lines += [
            f"> {SMOKE if settings.get('smoke') else QUICK}: the verdicts below judge "
            "nothing; the full run's do.",
            "",
        ]
    lines += [
        "A target is met only when the whole 95% interval of its paired ratio clears it.",
        "",
        "| scenario | target | paired ratio [95%] (rounds) | verdict |",
        "|---|---|---|---|",
        *("| " + " | ".join(row) + " |" for row in targets17(results)),
        "",
        "Not run on this machine:",
        "",
        *not_run_lines(entries),
    ]
    lines += ["", "## Targets (issue 6)", ""]
    if settings.get("quick"):
        lines.append("Not evaluated: a quick run measures too little.")
    else:
        lines += ["| scenario | target | measured | met |", "|---|---|---|---|", *target_rows]
    lines += ["", "## Settings chosen", "", *detail, ""]
    if has_chart:
        lines += [f"![throughput relative to the oracle]({png.name})", ""]
    else:
        lines += [
            "No chart: matplotlib is missing (`pip install 'hwtune[bench]'`, then "
            "`bench/run --report-only`).",
            "",
        ]
    lines += ["## Earlier budgets", "", *budgets.report_lines(entries)]
    path = out_dir / f"{machine}.md"
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    return path
