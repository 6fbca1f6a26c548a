"""Write bench/results/<machine>.md and .png from a tune_bench journal.

Cells are the median of the final interleaved rounds with ± half the interquartile range
(relative). Ratios come from a fit with one level per round (hwtune.tune.stats.Blocked: the
machine's load drifts between rounds, not within one), with their 95% interval; a ratio whose
interval contains the target is reported as within noise ("~"), as the issue asks that a ratio
count only where the spreads allow it.
"""

from __future__ import annotations

import json
import platform
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from hwtune import __version__
from hwtune.tune.stats import Blocked, Comparison, summarize

COLUMNS = ("defaults", "plan", "tune", "oracle")
QUICK = "QUICK run (tiny grid, 1 round: checks the machinery, measures nothing)"
TITLES = {
    "S1": "S1 CNN training, whole machine, mixed precision allowed",
    "S2": "S2 MLP training, whole machine",
    "S3": "S3 MLP training in a 1-CPU CFS quota (real cgroup)",
    "S4": "S4 MLP training, two jobs at once",
}


def load(journal: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]


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
    tune = next((e for e in mine if e["phase"] == "tune"), {})
    return {
        "columns": cols["columns"], "labels": cols["labels"], "design": design,
        "values": values, "failures": failures, "space": space, "tune": tune,
        "oracle_s": sum(e["wall_s"] for e in oracle), "oracle_trials": len(oracle),
        "oracle_configs": len({e["config"] for e in oracle}),
    }


def ratio(data: dict[str, Any], a: str, b: str) -> Comparison | None:
    ka, kb = data["columns"].get(a), data["columns"].get(b)
    if ka is None or kb is None:
        return None
    if ka == kb:
        return Comparison("same", 1.0, 1.0, 1.0)
    design: Blocked = data["design"]
    if not design.count(ka) or not design.count(kb):
        return None
    return design.compare(ka, kb)


def cell(data: dict[str, Any], column: str) -> str:
    key = data["columns"].get(column)
    if key is None:
        return "failed" if column == "tune" else "—"
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


def targets(name: str, data: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = [
        ("plan ≥ 0.95× oracle", show(ratio(data, "plan", "oracle")),
         judge(ratio(data, "plan", "oracle"), 0.95)),
        ("tune ≥ 0.98× oracle (or indistinguishable)", show(ratio(data, "tune", "oracle")),
         judge(ratio(data, "tune", "oracle"), 0.98, indistinguishable_ok=True)),
    ]
    tune = data["tune"]
    if "measuring_s" in tune and data["oracle_s"]:
        share = tune["measuring_s"] / data["oracle_s"]
        rows.append(("tune's measuring ≤ 25% of the oracle's", f"{share:.0%}",
                     "✓" if share <= 0.25 else "✗"))
    if name in ("S3", "S4"):
        for who in ("plan", "tune"):
            c = ratio(data, who, "defaults")
            rows.append((f"{who} ≥ 1.25× TF defaults", show(c), judge(c, 1.25)))
    if name == "S1":
        c = ratio(data, "tune", "defaults")
        rows.append(("tune ≥ 1.4× TF defaults (bf16 allowed)", show(c), judge(c, 1.4)))
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
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.2
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
        xs = [k + (i - 1.5) * width for k in range(len(names))]
        ax.bar(xs, heights, width, yerr=[low, high], capsize=3, label=column)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("throughput / oracle's median")
    ax.set_title("TF defaults, hwtune plan, hwtune tune and the grid's best (median, IQR)")
    ax.legend(ncol=4, loc="lower center", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(journal: Path, out_dir: Path, machine: str) -> Path:
    entries = load(journal)
    header = next((e for e in entries if e["id"] == "header"), {})
    settings = header.get("settings", {})
    results = {n: d for n in TITLES if (d := scenario_data(entries, n)) is not None}
    runtime = sum(e["wall_s"] for e in entries if e.get("phase") == "runtime")
    png = out_dir / f"{machine}.png"
    has_chart = chart(results, png)
    lines = [
        f"# hwtune benchmark — {machine}",
        "",
        f"{time.strftime('%Y-%m-%d', time.gmtime(header.get('started', time.time())))}, "
        f"hwtune {__version__}, Python {platform.python_version()}, "
        f"{QUICK if settings.get('quick') else 'full run'}, "
        f"{settings.get('oracle_rounds')} oracle rounds, {settings.get('final_rounds')} final "
        f"rounds, {settings.get('seconds')} s measurement window per trial; "
        f"total runtime {runtime / 60:.0f} min. Made by `bench/run` (bench/tune_bench.py).",
        "",
        "Throughput in samples/s: median of the final interleaved rounds ± half the "
        "interquartile range. Ratios with their 95% interval after removing each round's "
        "load level; `~` = the interval reaches the target (within noise).",
        "",
        "## Scenarios",
        "",
        "| scenario | TF defaults | plan | tune | oracle (grid's best) | tune search "
        "| oracle search |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    detail: list[str] = []
    target_rows: list[str] = []
    for name, data in results.items():
        if "columns" not in data:
            why = data.get("skipped") or "incomplete (run `bench/run` again to resume)"
            lines.append(f"| {TITLES[name]} | skipped: {why} | | | | | |")
            continue
        tune = data["tune"]
        tune_search = (
            f"{tune['measuring_s']:.0f} s, {tune['trials']} trials"
            if "measuring_s" in tune else "failed"
        )
        oracle_search = (
            f"{data['oracle_s']:.0f} s, {data['oracle_trials']} trials "
            f"({data['oracle_configs']} configs)"
        )
        lines.append(
            f"| {TITLES[name]} | " + " | ".join(cell(data, c) for c in COLUMNS)
            + f" | {tune_search} | {oracle_search} |"
        )
        plan_s = data["space"].get("plan_s")
        detail.append(f"- **{name}** (plan: `hwtune tune --dry-run` {plan_s:.1f} s incl. start-up)"
                      if plan_s else f"- **{name}**")
        for column in COLUMNS:
            detail.append(f"  - {column}: `{data['labels'].get(column, '—')}`")
        if "failure" in tune:
            detail.append(f"  - tune failed: `{tune['failure'].strip().splitlines()[-1:]}`")
        for what, value, verdict in targets(name, data):
            target_rows.append(f"| {name} | {what} | {value} | {verdict} |")
    lines += ["", "## Targets (issue 6)", ""]
    if settings.get("quick"):
        lines.append("Not evaluated: a quick run measures too little.")
    else:
        lines += ["| scenario | target | measured | met |", "|---|---|---|---|", *target_rows]
    lines += ["", "## Settings chosen", "", *detail, ""]
    if has_chart:
        lines += [f"![throughput relative to the oracle]({png.name})", ""]
    lines += ["## Earlier budgets", ""]
    if not any(e.get("phase") == "budget" for e in entries):
        lines += ["Not run in this journal (`--no-budgets`).", ""]
    for e in entries:
        if e.get("phase") != "budget":
            continue
        status = e["status"]
        if status == "missing":
            lines.append(f"- `bench/{e['script']}`: missing")
            continue
        lines += [f"### bench/{e['script']} (exit {status}, {e.get('wall_s', 0):.0f} s)", "",
                  "```text", e.get("output", "").rstrip(), "```", ""]
    path = out_dir / f"{machine}.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
