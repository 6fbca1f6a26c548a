"""The earlier budgets: run each script with --json, and quote its figures in the report.

bench_detect.py (issue 2: `hwtune detect` vs py-cpuinfo), bench_configure.py (issue 4:
configure()'s start-up cost), bench_plan.py (issue 3: planning time) and bench_daemon.py
(issue 5: the daemon's idle cost, how fast it follows a change, how fast it stops) and
bench_doctor.py (issue 16: the doctor's own CPU while it samples). Each
prints its figures, budgets and verdict as JSON; a script that gives no JSON (it crashed, or
a command it times failed) is quoted with its output instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import background

# Each script, with the arguments of a quick run (a few rounds: enough to see that it works);
# a full run uses the scripts' own defaults, the figures their issues budget.
SCRIPTS = {
    "bench_detect.py": ["--rounds", "3"],
    "bench_configure.py": ["--rounds", "3"],
    "bench_plan.py": ["--rounds", "20"],
    "bench_daemon.py": ["--seconds", "6"],
    "bench_doctor.py": ["--seconds", "4", "--rounds", "2"],
}
TIMEOUT_S = 1200  # the longest, bench_daemon.py, takes ~100 s on the 2-core VM


def measure(path: Path, quick: bool) -> dict[str, Any]:
    """Run one script; its journal entry: exit status, parsed JSON, output, time, load."""
    if not path.exists():
        return {"status": "missing"}
    argv = [sys.executable, str(path), "--json", *(SCRIPTS.get(path.name, []) if quick else [])]
    started = time.monotonic()
    meter = background.Meter()
    status: int | str
    result: dict[str, Any] | None = None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
        status, output = proc.returncode, proc.stderr[-2000:]
        try:
            result = json.loads(proc.stdout)
        except ValueError:
            output = proc.stdout[-2000:] + output
    except subprocess.TimeoutExpired:
        status, output = "timeout", ""
    # A traceback names this checkout's path; the report names files from the repository root.
    output = output.replace(f"{path.resolve().parent.parent}{os.sep}", "")
    return {
        "status": status,
        "result": result,
        "output": output,
        "wall_s": round(time.monotonic() - started, 1),
        "load": meter.stop(),
    }


def _figures_detect(r: dict[str, Any]) -> tuple[str, str, str, bool]:
    res = r["results"]
    ours = [(name, s) for name, s in res.items() if name != "py-cpuinfo"]
    measured = "; ".join(
        f"`{name}` {s['median_ms']:.0f} ms ({s['ratio_vs_py_cpuinfo']:.1f}× faster)"
        for name, s in ours
    )
    return (
        f"`hwtune detect --json` vs py-cpuinfo, whole processes, {r['rounds']} rounds",
        f"{measured}; py-cpuinfo {res['py-cpuinfo']['median_ms']:,.0f} ms",
        f"median < {r['budget_ms']:g} ms, ≥ {r['min_ratio']:g}× faster",
        bool(r["pass"]),
    )


def _figures_configure(r: dict[str, Any]) -> tuple[str, str, str, bool]:
    base = r["results"]["python -c pass"]["median_ms"]
    measured = "; ".join(
        f"`{name}` {o['median_overhead_ms']:+.1f} ms (paired IQR {o['paired']['iqr_ms']:.1f})"
        for name, o in r["overhead"].items()
    )
    return (
        f"`hwtune.configure()` start-up over `python -c pass` ({base:.0f} ms), "
        f"{r['rounds']} rounds",
        measured,
        f"median ≤ +{r['budget_ms']:g} ms",
        bool(r["pass"]),
    )


def _figures_plan(r: dict[str, Any]) -> tuple[str, str, str, bool]:
    fixture = r.get("fixture", {})
    measured = "; ".join(f"{name} {s['median_ms']:.2f} ms" for name, s in r["results"].items())
    ok = r.get("pass", all(s["median_ms"] < r["budget_ms"] for s in r["results"].values()))
    return (
        f"`plan()` in-process on the largest fixture ({fixture.get('cpus')} CPUs, "
        f"{fixture.get('numa_nodes')} NUMA nodes, {fixture.get('gpus')} GPUs), "
        f"{r['rounds']} rounds, medians",
        measured,
        f"each < {r['budget_ms']:g} ms",
        bool(ok),
    )


def _figures_daemon(r: dict[str, Any]) -> tuple[str, str, str, bool]:
    budgets = r.get("budgets", {})
    idle, inotify, poll, stop = r["idle"], r["follow_inotify"], r["follow_poll_only"], r["stop"]
    measured = (
        f"idle {idle['percent_of_one_core']:.3f}% of a core over {idle['wall_s']:.0f} s; "
        f"follows a quota change in ≤ {inotify['max_intervals']:.2f} intervals (inotify), "
        f"≤ {poll['max_intervals']:.2f} (polling); SIGTERM to exit ≤ {stop['max_s']:.2f} s"
    )
    budget = (
        f"idle < {budgets.get('idle_percent', 0.5):g}%, follow ≤ "
        f"{budgets.get('follow_intervals', 2):g} intervals, stop < {budgets.get('stop_s', 1):g} s"
    )
    return (
        "`hwtune daemon`: idle CPU, following a change, stopping",
        measured,
        budget,
        bool(r["within_budget"]),
    )


def _figures_doctor(r: dict[str, Any]) -> tuple[str, str, str, bool]:
    command = r["whole_command"]
    whole = (
        f"whole command {command['cpu_s']:.2f} CPU s in {command['wall_s']:.0f} s"
        if command
        else "whole command not timed: no TensorFlow"
    )
    return (
        f"`hwtune doctor`'s own CPU while sampling {r['threads']} threads every "
        f"{r['interval_s']:g} s, {len(r['rounds'])} rounds",
        f"{r['median_percent_of_one_cpu']:.2f}% of one CPU ({whole})",
        f"< {r['budget_percent']:g}% of one CPU",
        bool(r["pass"]),
    )


FIGURES: dict[str, Callable[[dict[str, Any]], tuple[str, str, str, bool]]] = {
    "bench_detect.py": _figures_detect,
    "bench_configure.py": _figures_configure,
    "bench_plan.py": _figures_plan,
    "bench_daemon.py": _figures_daemon,
    "bench_doctor.py": _figures_doctor,
}


def report_lines(entries: list[dict[str, Any]]) -> list[str]:
    """A table of the earlier budgets' figures; raw output where a script gave no JSON."""
    ran = [e for e in entries if e.get("phase") == "budget"]
    if not ran:
        return ["Not run in this journal (`--no-budgets`).", ""]
    rows = ["| script | measures | result | budget | met |", "|---|---|---|---|---|"]
    raw: list[str] = []
    for e in ran:
        script, status = e["script"], e["status"]
        if status == "missing":
            rows.append(f"| `bench/{script}` | | missing | | — |")
            continue
        result, figures = e.get("result"), FIGURES.get(script)
        if isinstance(result, dict) and figures is not None:
            try:
                what, measured, budget, ok = figures(result)
            except (KeyError, TypeError, ValueError) as err:
                what, measured, budget, ok = "", f"unreadable result ({err!r})", "", False
            rows.append(
                f"| `bench/{script}` | {what} | {measured} | {budget} | "
                f"{'✓' if ok and status == 0 else '✗'} |"
            )
            continue
        if status == 0:  # a journal from before --json: the script's text, quoted below
            rows.append(f"| `bench/{script}` | | exit 0, output below | | ✓ |")
        else:
            last = ((e.get("output") or "").strip().splitlines() or ["no output"])[-1][:120]
            rows.append(f"| `bench/{script}` | | failed (exit {status}): `{last}` | | ✗ |")
        raw += [
            f"### bench/{script} (exit {status}, {e.get('wall_s', 0):.0f} s)",
            "",
            "```text",
            (e.get("output") or "").rstrip(),
            "```",
            "",
        ]
    return [*rows, "", *raw]
