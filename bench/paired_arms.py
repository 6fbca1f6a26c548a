"""Paired, interleaved comparison of a few configurations of one built-in workload.

    python bench/paired_arms.py WORKLOAD ROUNDS NAME=JSON [NAME=JSON ...]

Each NAME=JSON is a tuner configuration (hwtune.tune.config.TrialConfig's fields: intra,
inter, onednn, jit, precision, instances, cpus, extra_env); the first is the base. Every round
runs each configuration once, in a shuffled order, and each is compared with the base of the
same round: the geometric mean of the per-round ratios and its 95% t-interval (bench/paired.py,
as in the benchmark's report).
The one-thread oneDNN and XLA rules cite runs of it, for example:

    python bench/paired_arms.py cnn 6 \
      'off={"intra":1,"inter":1,"onednn":false,"jit":false,"cpus":[[0]],
            "extra_env":[["ONEDNN_MAX_CPU_ISA","AVX2"]]}' \
      'on={"intra":1,"inter":1,"onednn":true,"jit":false,"cpus":[[0]],
           "extra_env":[["ONEDNN_MAX_CPU_ISA","AVX2"]]}'

ONEDNN_MAX_CPU_ISA (oneDNN's dispatcher limit, "Dispatcher control" in the oneDNN docs) makes
oneDNN pick the kernels a CPU with only that ISA would run. Run it on a quiet machine, as
bench/run: a round's arms are minutes apart at most, so a ratio cancels the machine's drift.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

from paired import paired

from hwtune.tune.config import TrialConfig
from hwtune.tune.trial import TrialRunner
from hwtune.tune.workloads import builtin


def parse_arm(spec: str) -> tuple[str, TrialConfig]:
    name, sep, text = spec.partition("=")
    if not sep or not name:
        sys.exit(f"bench/paired_arms.py: {spec!r} is not NAME=JSON")
    try:
        fields: dict[str, Any] = json.loads(text)
        fields["cpus"] = tuple(tuple(c) for c in fields.get("cpus", ()))
        fields["extra_env"] = tuple(tuple(e) for e in fields.get("extra_env", ()))
        return name, TrialConfig(**fields)
    except (ValueError, TypeError) as err:
        sys.exit(f"bench/paired_arms.py: arm {name!r}: {err}")


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        sys.exit(__doc__)
    workload, rounds_wanted = argv[0], int(argv[1])
    arms = dict(parse_arm(spec) for spec in argv[2:])
    runner = TrialRunner(
        builtin(workload, seconds=2.0),
        environ={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout_s=600,
    )
    rng = random.Random(1)
    rounds: dict[int, dict[str, float]] = {}
    for round_ in range(rounds_wanted):
        order = list(arms)
        rng.shuffle(order)
        values = {name: runner.run(arms[name]).value for name in order}
        rounds[round_] = {name: value for name, value in values.items() if value}
        print(round_, {name: round(value or 0) for name, value in values.items()}, flush=True)
    base = next(iter(arms))
    for name in list(arms)[1:]:
        print(f"{workload}: {name} / {base}: {paired(rounds, name, base).show()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
