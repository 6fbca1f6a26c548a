"""The settings one trial runs with, and how they reach the trial's process(es).

TensorFlow reads its thread counts and oneDNN switch from the environment when it starts
(process_util.cc: TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS; port.cc:
TF_ENABLE_ONEDNN_OPTS), and XLA auto-clustering from TF_XLA_FLAGS. A build that links an
OpenMP runtime (libiomp5, libgomp) runs oneDNN on the OpenMP pool instead, sized by
OMP_NUM_THREADS: there each trial's OMP_NUM_THREADS is its own intra-op count, as the plan
renders it (Intel, "Maximize TensorFlow Performance on CPU": OMP_NUM_THREADS = the physical
cores used = intra-op; intel.com/content/www/us/en/developer/articles/technical/
maximize-tensorflow-performance-on-cpu-considerations-and-recommendations-for-inference.html).
Keras's `jit_compile` and mixed-precision policy have no variable of their own, so a trial
also exports

    HWTUNE_TRIAL=1                        this process is a tuner trial
    HWTUNE_TRIAL_JIT=on|off               XLA: Keras `jit_compile` / tf.config.optimizer.set_jit
    HWTUNE_TRIAL_PRECISION=<policy>       a Keras policy name, "float32" for none
    HWTUNE_TRIAL_INSTANCE, HWTUNE_TRIAL_INSTANCES   which of how many concurrent copies

which the built-in workloads read directly. Under HWTUNE_TRIAL=1, `hwtune.configure()` applies
no profile: only HWTUNE_TRIAL_JIT and HWTUNE_TRIAL_PRECISION where set (TensorFlow reads the
rest itself). A user program that calls neither gets threads, oneDNN and XLA (through the
variables TensorFlow reads) but not the precision policy. A knob left at None is not exported:
TensorFlow (or Keras) then picks, which is how "TF defaults" is measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hwtune.models.cpulist import format_cpulist

INTRA_ENV = "TF_NUM_INTRAOP_THREADS"
INTER_ENV = "TF_NUM_INTEROP_THREADS"
OPENMP_ENV = "OMP_NUM_THREADS"
ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
XLA_ENV = "TF_XLA_FLAGS"
# Auto-clustering for every tf.function (level 2), CPU included: TF's XLA guide
# (tensorflow.org/xla#auto-clustering) and tensorflow/compiler/jit/flags.cc.
XLA_ON_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"

TRIAL_ENV = "HWTUNE_TRIAL"
TRIAL_JIT_ENV = "HWTUNE_TRIAL_JIT"
TRIAL_PRECISION_ENV = "HWTUNE_TRIAL_PRECISION"
TRIAL_INSTANCE_ENV = "HWTUNE_TRIAL_INSTANCE"
TRIAL_INSTANCES_ENV = "HWTUNE_TRIAL_INSTANCES"
TRIAL_BARRIER_ENV = "HWTUNE_TRIAL_BARRIER"

# Removed from the caller's environment before a trial, so that an applied hwtune profile
# (eval "$(hwtune env)") cannot leak into the measurement of another configuration.
CONTROLLED_PREFIXES = (
    INTRA_ENV,
    INTER_ENV,
    ONEDNN_ENV,
    XLA_ENV,
    "OMP_",
    "KMP_",
    "HWTUNE_TRIAL",
)


@dataclass(frozen=True, slots=True)
class TrialConfig:
    """One point of the search space. Hashable: the search keys its measurements by it."""

    intra: int | None = None  # None: TensorFlow's default
    inter: int | None = None
    onednn: bool | None = None  # None: TensorFlow's default for this CPU
    jit: bool | None = None  # None: Keras's "auto" (off on CPU)
    precision: str | None = None  # a Keras mixed-precision policy; None: float32
    instances: int = 1  # concurrent copies of the workload; their throughputs add up
    cpus: tuple[tuple[int, ...], ...] = ()  # each copy's CPU affinity; () = not pinned
    extra_env: tuple[tuple[str, str], ...] = ()  # the plan's other variables, kept as planned
    openmp: bool = False  # TF links OpenMP: OMP_NUM_THREADS follows intra (not a searched knob)

    @property
    def pinned(self) -> bool:
        """Whether the copies are pinned to CPUs (the tuner's `pinned` dimension)."""
        return bool(self.cpus)

    def replace(self, **changes: Any) -> TrialConfig:
        return dataclasses.replace(self, **changes)

    def knobs(self) -> dict[str, Any]:
        """The searched values, JSON-ready (what the result file and --json show)."""
        return {
            "intra_op": self.intra,
            "inter_op": self.inter,
            "onednn": self.onednn,
            "jit": self.jit,
            "precision": self.precision,
            "instances": self.instances,
        }

    def label(self) -> str:
        """A short human name: `intra=2 inter=1 onednn=on jit=off bf16 ×1`."""

        def show(value: int | None) -> str:
            return "dflt" if value is None else str(value)

        def switch(value: bool | None) -> str:
            return "dflt" if value is None else ("on" if value else "off")

        precision = {None: "fp32", "mixed_bfloat16": "bf16", "mixed_float16": "fp16"}.get(
            self.precision, str(self.precision)
        )
        parts = [
            f"intra={show(self.intra)}",
            f"inter={show(self.inter)}",
            f"onednn={switch(self.onednn)}",
            f"jit={switch(self.jit)}",
            precision,
            f"×{self.instances}",
        ]
        if self.cpus:
            parts.append("pinned")
        return " ".join(parts)


def to_json(config: TrialConfig) -> dict[str, Any]:
    data = config.knobs()
    data["cpus"] = [format_cpulist(cpus) for cpus in config.cpus]
    data["extra_env"] = dict(config.extra_env)
    if config.openmp:  # only on OpenMP builds: the output elsewhere stays as it was
        data["openmp"] = True
    return data


def from_json(data: Mapping[str, Any]) -> TrialConfig:
    """The inverse of `to_json` (the benchmark reads `hwtune tune --json` back with it)."""
    from hwtune.models.cpulist import parse_cpulist

    def number(key: str) -> int | None:
        value = data.get(key)
        return None if value is None else int(value)

    extra = data.get("extra_env") or {}
    return TrialConfig(
        intra=number("intra_op"),
        inter=number("inter_op"),
        onednn=data.get("onednn"),
        jit=data.get("jit"),
        precision=data.get("precision"),
        instances=int(data.get("instances") or 1),
        cpus=tuple(tuple(parse_cpulist(text)) for text in data.get("cpus") or ()),
        extra_env=tuple(sorted((str(k), str(v)) for k, v in extra.items())),
        openmp=bool(data.get("openmp", False)),
    )


def _is_controlled(name: str, extra: Mapping[str, str]) -> bool:
    return name in extra or any(name.startswith(prefix) for prefix in CONTROLLED_PREFIXES)


def trial_env(
    config: TrialConfig,
    index: int,
    base: Mapping[str, str],
    *,
    barrier: str | None = None,
) -> dict[str, str]:
    """The environment of copy `index` of a trial: `base` minus every variable hwtune
    controls, plus this configuration's."""
    extra = dict(config.extra_env)
    env = {name: value for name, value in base.items() if not _is_controlled(name, extra)}
    env.update(extra)
    if config.intra is not None:
        env[INTRA_ENV] = str(config.intra)
        if config.openmp and OPENMP_ENV not in extra:  # a value the user set is kept as set
            env[OPENMP_ENV] = str(config.intra)
    if config.inter is not None:
        env[INTER_ENV] = str(config.inter)
    if config.onednn is not None:
        env[ONEDNN_ENV] = "1" if config.onednn else "0"
    if config.jit:
        env[XLA_ENV] = XLA_ON_FLAGS
    env[TRIAL_ENV] = "1"
    if config.jit is not None:
        env[TRIAL_JIT_ENV] = "on" if config.jit else "off"
    if config.precision is not None:
        env[TRIAL_PRECISION_ENV] = config.precision
    env[TRIAL_INSTANCE_ENV] = str(index)
    env[TRIAL_INSTANCES_ENV] = str(config.instances)
    if barrier is not None:
        env[TRIAL_BARRIER_ENV] = barrier
    return env
