"""What a trial runs: a built-in workload or the user's own command.

A workload reports its throughput by printing `hwtune-metric: <name>=<value>` (higher is
better); the last value of the chosen name counts. With `time_whole`, hwtune times the whole
process instead (runs per second), warm-up and TensorFlow's import included.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from hwtune.errors import ConfigError

# name -> what it measures (`hwtune tune --help` lists these).
BUILTINS: dict[str, str] = {
    "cnn": "Keras training of a small CNN on 32×32 images (convolutions: oneDNN, bf16)",
    "mlp": "Keras training of a 3×512 MLP on tabular data (matmuls: threads, instances)",
    "matmul": "a chain of 512×512 matrix multiplies in a tf.function (intra-op threads)",
    "pipeline": "a tf.data pipeline decoding and augmenting images (tf.data parallelism)",
    "transformer": "Keras training of one transformer encoder block (attention, layer norm, GELU)",
    "inference": (
        "batch inference with the CNN as a SavedModel (instances are the lever: tune it with "
        "--mode batch --model conv)"
    ),
    "mixed": "a CNN and an MLP trained at once, one per instance (use 2 instances)",
}
# The metric each built-in reports, where it is not samples per second.
BUILTIN_METRICS: dict[str, str] = {"mixed": "work_per_sec"}
BUILTIN_PREFIX = "builtin:"
# The measurement window of a built-in trial: long enough for a median over 5 sub-windows of
# several steps each, short next to TensorFlow's ~4 s import on the 2-core VM it was tuned on.
BUILTIN_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class Workload:
    key: str  # what the result is stored under: "builtin:cnn", a --name, or "cmd:<hash>"
    argv: tuple[str, ...]
    display: str  # for people: "builtin:cnn" or the quoted command
    metric: str | None = None  # the metric to read; None: the first one the workload prints
    time_whole: bool = False
    cwd: str | None = None


def builtin(
    name: str, *, seconds: float = BUILTIN_SECONDS, python: str = sys.executable
) -> Workload:
    if name not in BUILTINS:
        raise ConfigError(
            f"no built-in workload {name!r}",
            hint=f"built-in workloads: {', '.join(BUILTIN_PREFIX + n for n in BUILTINS)}",
        )
    argv = (python, "-m", f"hwtune.tune.builtin.{name}", "--seconds", f"{seconds:g}")
    key = BUILTIN_PREFIX + name
    metric = BUILTIN_METRICS.get(name, "samples_per_sec")
    return Workload(key=key, argv=argv, display=key, metric=metric)


def command_key(argv: Sequence[str], cwd: str) -> str:
    """A stable key for a user command: the same words run from the same directory."""
    digest = hashlib.sha256(json.dumps([list(argv), cwd]).encode()).hexdigest()
    return f"cmd:{digest[:12]}"


def user_command(
    argv: Sequence[str],
    *,
    name: str | None = None,
    metric: str | None = None,
    time_whole: bool = False,
    cwd: str | None = None,
) -> Workload:
    if not argv:
        raise ConfigError("no command to tune", hint="hwtune tune -- python train.py ARGS")
    cwd = cwd or os.getcwd()
    return Workload(
        key=name or command_key(argv, cwd),
        argv=tuple(argv),
        display=shlex.join(argv),
        metric=metric,
        time_whole=time_whole,
        cwd=cwd,
    )


def resolve(
    spec: str | None,
    command: Sequence[str],
    *,
    name: str | None = None,
    metric: str | None = None,
    time_whole: bool = False,
    seconds: float = BUILTIN_SECONDS,
) -> Workload:
    """`--workload builtin:NAME` or `-- CMD ARGS…` (the CNN when neither); with a command,
    `--workload NAME` names it as `--name` does."""
    if spec and command:
        if spec.startswith(BUILTIN_PREFIX) or (name and name != spec):
            raise ConfigError(
                "give either --workload builtin:NAME or a command after --, not both",
                hint="to name your command's result: --workload NAME -- CMD",
            )
        name = spec
    if command:
        return user_command(command, name=name, metric=metric, time_whole=time_whole)
    spec = spec or BUILTIN_PREFIX + "cnn"
    if name:  # storing builtin:cnn's result as "train" would apply it to the job named so
        raise ConfigError(
            f"--name {name!r} names a command's result; {spec}'s is stored as {spec}",
            hint=f"drop --name, or tune your program: hwtune tune --name {name} -- CMD ARGS",
        )
    if not spec.startswith(BUILTIN_PREFIX):
        raise ConfigError(
            f"--workload {spec!r}: expected builtin:NAME",
            hint="to tune your own program: hwtune tune -- python train.py ARGS",
        )
    return builtin(spec[len(BUILTIN_PREFIX) :], seconds=seconds)
