"""Benchmark: the start-up cost of `hwtune.configure()` with a warm cache, as whole processes.

    python bench/bench_configure.py [--rounds N] [--json] [--budget-ms 30]

Each round runs, in turn, `python -c pass` and `python -c "import hwtune; hwtune.configure()"`
(and the same with `tensorflow=False`, which skips installing the import hook), so drift in
machine load hits them alike. A warm-up round fills the profile cache (a private
XDG_CACHE_HOME) and the bytecode cache: children run without PYTHONDONTWRITEBYTECODE, as an
installed package has its bytecode compiled by pip. Wall time per process is measured with
perf_counter around `subprocess.run`. The figure that matters is the difference of medians,
configure minus `pass`; per-round paired differences give its spread.

Exit status 0 when the median overhead is within the budget (issue 4: "at most 30 ms more
than `python -c pass`"), 1 otherwise, 2 when a command fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BUDGET_MS = 30.0

COMMANDS = {
    "python -c pass": "pass",
    "configure()": "import hwtune; hwtune.configure()",
    "configure(tensorflow=False)": "import hwtune; hwtune.configure(tensorflow=False)",
}


def time_once(python: str, code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [python, "-c", code],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        check=False,
    )
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0 or b"Warning" in done.stderr:
        raise RuntimeError(f"{code!r} exited {done.returncode}: {done.stderr[-300:]!r}")
    return elapsed


def summarize(samples: list[float]) -> dict[str, float]:
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return {
        "median_ms": round(statistics.median(samples), 1),
        "iqr_ms": round(q3 - q1, 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
        "n": len(samples),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds (default 30)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--budget-ms", type=float, default=BUDGET_MS)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")

    with tempfile.TemporaryDirectory(prefix="hwtune-bench-") as cache:
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith(("TF_", "HWTUNE_"))
        }
        env["XDG_CACHE_HOME"] = cache
        samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
        try:
            for round_ in range(args.warmup + args.rounds):
                for name, code in COMMANDS.items():
                    ms = time_once(args.python, code, env)
                    if round_ >= args.warmup:
                        samples[name].append(ms)
        except (RuntimeError, OSError) as err:
            print(f"bench_configure: {err}", file=sys.stderr)
            return 2

    base = samples["python -c pass"]
    stats = {name: summarize(values) for name, values in samples.items()}
    overhead = {
        name: {
            "median_overhead_ms": round(statistics.median(values) - statistics.median(base), 1),
            "paired": summarize([v - b for v, b in zip(values, base, strict=True)]),
        }
        for name, values in samples.items()
        if name != "python -c pass"
    }
    ok = all(o["median_overhead_ms"] <= args.budget_ms for o in overhead.values())
    result = {
        "benchmark": "configure",
        "python": os.path.basename(args.python),  # no path of the measuring machine
        "rounds": args.rounds,
        "budget_ms": args.budget_ms,
        "results": stats,
        "overhead": overhead,
        "pass": ok,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{'command':<30}{'median':>9}{'IQR':>9}{'min-max':>15}{'overhead':>11}")
        for name, s in stats.items():
            extra = f"{overhead[name]['median_overhead_ms']:+.1f}ms" if name in overhead else ""
            spread = f"{s['min_ms']:.0f}-{s['max_ms']:.0f}ms"
            print(
                f"{name:<30}{s['median_ms']:>7.1f}ms{s['iqr_ms']:>7.1f}ms{spread:>15}{extra:>11}"
            )
        print(
            f"{'PASS' if ok else 'FAIL'}: median overhead <= {args.budget_ms:g} ms over "
            f"`python -c pass` ({args.rounds} interleaved rounds, warm cache)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
