"""Benchmark: `hwtune detect --json` against py-cpuinfo, as whole processes, interleaved.

    python bench/bench_detect.py [--rounds N] [--json] [--budget-ms 150] [--min-ratio 8]

Each round runs, in turn, the installed `hwtune` console script, `python -m hwtune`, and
`python -c "import cpuinfo; cpuinfo.get_cpu_info()"`, so drift in machine load hits all three
alike. Wall time per process is measured with perf_counter around `subprocess.run` (start-up,
imports, probing and printing included). Children run without PYTHONDONTWRITEBYTECODE, with a
warm-up round first, so imports load cached bytecode as they do from an installed package (pip
compiles it at install time); otherwise every run re-compiles hwtune's sources. Prints the
median, the interquartile range and the min-max of each, and the ratio of py-cpuinfo's median
to each hwtune median.

Exit status 0 when both hwtune medians are under the budget (default 150 ms) and at least
`--min-ratio` (default 8) times faster than py-cpuinfo; 1 otherwise; 2 when a command fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BUDGET_MS = 150.0  # issue 2: "the median must be under 150 ms here"
MIN_RATIO = 8.0  # issue 2: "at least 8x faster than py-cpuinfo"


def commands(python: str) -> dict[str, list[str]]:
    script = Path(python).parent / "hwtune"
    console = str(script) if script.exists() else shutil.which("hwtune")
    cmds = {
        "python -m hwtune detect --json": [python, "-m", "hwtune", "detect", "--json"],
        "py-cpuinfo": [python, "-c", "import cpuinfo; cpuinfo.get_cpu_info()"],
    }
    if console:
        cmds = {"hwtune detect --json": [console, "detect", "--json"], **cmds}
    return cmds


def _shown(word: str) -> str:
    """A command word as the report shows it: the interpreter and console script by name, so
    that no path of the measuring machine lands in a committed result."""
    return Path(word).name if os.path.isabs(word) else word


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def time_once(argv: list[str]) -> float:
    """Milliseconds for one whole process; raises if it fails (a broken command is no figure)."""
    start = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=CHILD_ENV, check=False
    )
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-300:]!r}")
    return elapsed


def summarize(samples: list[float]) -> dict[str, float]:
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return {
        "median_ms": round(statistics.median(samples), 1),
        "q1_ms": round(q1, 1),
        "q3_ms": round(q3, 1),
        "iqr_ms": round(q3 - q1, 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
        "n": len(samples),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (page cache)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--budget-ms", type=float, default=BUDGET_MS)
    parser.add_argument("--min-ratio", type=float, default=MIN_RATIO)
    parser.add_argument("--python", default=sys.executable, help="interpreter (default: this)")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (quartiles need two samples)")

    cmds = commands(args.python)
    samples: dict[str, list[float]] = {name: [] for name in cmds}
    try:
        for round_ in range(args.warmup + args.rounds):
            for name, cmd in cmds.items():
                ms = time_once(cmd)
                if round_ >= args.warmup:
                    samples[name].append(ms)
    except (RuntimeError, OSError) as err:
        print(f"bench_detect: {err}", file=sys.stderr)
        return 2

    stats = {name: summarize(values) for name, values in samples.items()}
    baseline = stats["py-cpuinfo"]["median_ms"]
    verdicts = {}
    for name, s in stats.items():
        if name == "py-cpuinfo":
            continue
        s["ratio_vs_py_cpuinfo"] = round(baseline / s["median_ms"], 1)
        fast = s["median_ms"] < args.budget_ms
        verdicts[name] = fast and s["ratio_vs_py_cpuinfo"] >= args.min_ratio
    ok = all(verdicts.values())
    result = {
        "benchmark": "detect",
        "python": _shown(args.python),
        "rounds": args.rounds,
        "budget_ms": args.budget_ms,
        "min_ratio": args.min_ratio,
        "commands": {name: " ".join(map(_shown, cmd)) for name, cmd in cmds.items()},
        "results": stats,
        "pass": ok,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{'command':<34}{'median':>9}{'IQR':>9}{'min-max':>17}{'ratio':>8}")
        for name, s in stats.items():
            ratio = f"{s['ratio_vs_py_cpuinfo']:.1f}x" if "ratio_vs_py_cpuinfo" in s else ""
            spread = f"{s['min_ms']:.0f}-{s['max_ms']:.0f}"
            median, iqr = s["median_ms"], s["iqr_ms"]
            print(f"{name:<34}{median:>7.1f}ms{iqr:>7.1f}ms{spread:>15}ms{ratio:>8}")
        verdict = "PASS" if ok else "FAIL"
        print(
            f"{verdict}: budget median < {args.budget_ms:g} ms and ≥ {args.min_ratio:g}x "
            f"py-cpuinfo ({args.rounds} interleaved rounds)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
