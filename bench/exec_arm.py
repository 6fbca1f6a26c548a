"""The "hwtune exec" arm: N copies of a workload started by `hwtune exec --instances N`, as
a user starts them, their throughputs added.

    python bench/exec_arm.py N MODEL METRIC -- python -m hwtune.tune.builtin.mlp --seconds 2

The benchmark runs this script as one trial process. It removes the tuner-trial variables the
trial runner set (HWTUNE_TRIAL=1 would make `hwtune.configure()` apply nothing), keeps the
trial's start barrier so the copies measure together, names the model kind (HWTUNE_MODEL, as
`--model` would), points HWTUNE_TUNED_DIR at an empty directory (a stored tune result must
not leak into a benchmark: issue 17 saw a leftover one cost 0.68×), then runs `hwtune exec`:
its plan, its environment and its pinning rule, and `configure()` in each copy. Each copy's
last `[i] hwtune-metric: METRIC=value` line counts; the sum is printed as one metric line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

# Removed: they would make the copies behave as tuner trials instead of user programs.
TRIAL_ONLY = (
    "HWTUNE_TRIAL",
    "HWTUNE_TRIAL_JIT",
    "HWTUNE_TRIAL_PRECISION",
    "HWTUNE_TRIAL_INSTANCE",
)


def summed(output: str, metric: str, count: int) -> float | None:
    """The copies' last values of `metric`, added; None unless all `count` copies reported."""
    pattern = re.compile(rf"^\[(\d+)\] hwtune-metric:\s*{re.escape(metric)}\s*=\s*(\S+)\s*$")
    last: dict[int, float] = {}
    for line in output.splitlines():
        found = pattern.match(line)
        if found:
            last[int(found.group(1))] = float(found.group(2))
    return sum(last.values()) if len(last) == count else None


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    count, model, metric, command = int(argv[0]), argv[1], argv[2], argv[4:]
    env = {k: v for k, v in os.environ.items() if k not in TRIAL_ONLY}
    env["HWTUNE_TRIAL_INSTANCES"] = str(count)  # the start barrier's count (the harness)
    env["HWTUNE_MODEL"] = model
    with tempfile.TemporaryDirectory(prefix="hwtune-bench-exec-") as empty:
        env["HWTUNE_TUNED_DIR"] = empty
        proc = subprocess.run(
            [sys.executable, "-m", "hwtune", "exec", "--instances", str(count), "--", *command],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
    if proc.returncode != 0:
        return proc.returncode
    total = summed(proc.stdout, metric, count)
    if total is None:
        print(
            f"exec_arm: not every copy printed {metric}:\n{proc.stdout[-2000:]}", file=sys.stderr
        )
        return 1
    print(f"hwtune-metric: {metric}={total:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
