"""Hand-built profiles and hardware for the apply-side tests (renderers, apply, exec, verify).

Built directly from the models so that these tests do not depend on the planner's rules.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hwtune.models.hardware import Hardware, Limits
from hwtune.models.profile import (
    Bazel,
    InstanceSlice,
    Intent,
    Jit,
    Precision,
    Profile,
    Setting,
    TfData,
    Threads,
)

REPO = Path(__file__).resolve().parent.parent
# Subprocesses run the checkout's hwtune with the test's interpreter.
PYTHON = sys.executable

# Values a user override may carry: every character a shell, systemd or docker could misread.
HOSTILE = {
    "HW_SPACES": "two  words and a tab\tend ",
    "HW_QUOTES": "it's \"quoted\" ''",
    "HW_DOLLAR": "$HOME ${HOME} $(touch {canary}) $((1+1))",
    "HW_BACKTICK": "`touch {canary}` and \\`",
    "HW_BACKSLASH": "a\\b\\\\c\\ \\n\\",
    "HW_NEWLINE": "line one\nline two\n",
    "HW_EMPTY": "",
    "HW_GLOB": "* ? [a] ~ ; & | < > # !",
    "HW_UNICODE": "ünïcödé ✓ 東京",
    "HW_CR": "carriage\rreturn",
}


def hostile_values(canary: Path) -> dict[str, str]:
    return {k: v.replace("{canary}", str(canary)) for k, v in HOSTILE.items()}


def make_profile(
    env: dict[str, str] | None = None,
    *,
    intra: int = 2,
    inter: int = 1,
    jit: str = "off",
    precision: str | None = None,
    instances: tuple[tuple[int, ...], ...] = ((0, 1),),
    index: int = 0,
    gpus: tuple[tuple[int, ...], ...] | None = None,
    bazelrc: str | None = "build --copt=-march=native\n",
) -> Profile:
    settings = {k: Setting(v, "set by the user (test)", "user") for k, v in (env or {}).items()}
    gpu_sets = gpus if gpus is not None else tuple(() for _ in instances)
    slices = tuple(
        InstanceSlice(index=i, cpus=cpus, numa_nodes=(0,), gpus=gpu_sets[i])
        for i, cpus in enumerate(instances)
    )
    tf_data = TfData(
        private_threadpool_size=Setting(2, "slice CPUs"),
        autotune_cpu_budget=Setting(2, "slice CPUs"),
        autotune_ram_budget=Setting(1 << 30, "half of memory"),
        parallel_calls=Setting(-1, "AUTOTUNE"),
        interleave_cycle_length=Setting(2, "slice CPUs"),
        prefetch=Setting(-1, "AUTOTUNE"),
    )
    return Profile(
        intent=Intent(instances=len(instances), instance=index),
        env=settings,
        threads=Threads(
            Setting(intra, "physical cores of the slice"), Setting(inter, "one socket")
        ),
        jit=Jit(Setting(jit, "test")),
        precision=Precision(("mixed_bfloat16",), precision, "test"),
        data_format=Setting("channels_last", "CPU"),
        tf_data=tf_data,
        instance=slices[index],
        instances=slices,
        bazel=Bazel("2.21", ("--config=opt",), bazelrc) if bazelrc is not None else None,
        fingerprint="test",
    )


def make_hardware() -> Hardware:
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    return Hardware(limits=Limits(affinity_cpus=cpus, usable_cpus=cpus, effective_cpus=len(cpus)))
