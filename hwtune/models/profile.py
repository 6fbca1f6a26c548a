"""The profile model: what `plan()` returns and `hwtune plan --json` prints.

Every decision is a `Setting`: a value, the reason for it, and where it came from. Frozen
dataclasses for the same reason as `hardware.py` (start-up cost); pydantic exports the schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PROFILE_SCHEMA_VERSION = 1

Source = Literal["rule", "user", "measured", "default"]
Scalar = str | int | float | bool | None
# throughput: one job as fast as it goes; latency: one request at a time; batch: independent
# requests or batches, run as several copies whose throughputs add up (planner/copies.py).
Mode = Literal["throughput", "latency", "batch"]
MODES: tuple[Mode, ...] = ("throughput", "latency", "batch")
PrecisionIntent = Literal["off", "eligible", "auto"]
# What the user trains, as far as the rules care: XLA on CPU helps a dense model (matmuls and
# elementwise ops it can fuse) and hurts a convolutional one (planner/accel.py has the figures).
ModelKind = Literal["unknown", "dense", "conv"]
MODEL_KINDS: tuple[ModelKind, ...] = ("unknown", "dense", "conv")
# `--model`'s help, shared by every command that plans.
MODEL_HELP = (
    "what you train: dense (MLPs, embeddings, transformers), conv (CNNs) or unknown (default); "
    "on a CPU it decides XLA"
)


@dataclass(frozen=True, slots=True)
class Setting:
    value: Scalar
    reason: str
    source: Source = "rule"


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A setting hwtune deliberately does not emit, and why (`hwtune explain NAME`)."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Intent:
    mode: Mode = "throughput"
    instances: int = 1
    instance: int = 0
    precision: PrecisionIntent = "eligible"
    tf_version: str | None = None  # the TensorFlow version to plan a source build for
    model: ModelKind = "unknown"


@dataclass(frozen=True, slots=True)
class Threads:
    """TensorFlow's pool sizes, stored once: the env files' TF_NUM_INTRAOP_THREADS,
    TF_NUM_INTEROP_THREADS (and OMP_NUM_THREADS where OpenMP is linked) are derived from them
    when rendering (hwtune/apply/render.py `env_entries`)."""

    intra_op: Setting
    inter_op: Setting
    # The OpenMP build whose pool follows intra_op through OMP_NUM_THREADS ("intel-tensorflow
    # 2.14 links libiomp5.so"); None when TensorFlow links no OpenMP runtime.
    openmp: str | None = None


@dataclass(frozen=True, slots=True)
class Jit:
    level: Setting  # "off" | "autoclustering" (global_jit_level ON_2) | "on" (ON_1)


@dataclass(frozen=True, slots=True)
class Precision:
    eligible: tuple[str, ...]  # Keras policy names: mixed_float16, mixed_bfloat16
    enabled: str | None  # the one policy configure() sets, or None
    reason: str
    source: Source = "rule"


@dataclass(frozen=True, slots=True)
class Int8Route:
    """One way this machine runs int8 inference: a device, its feature, how TF users take it."""

    device: str  # "cpu", or "gpu 0,1" (the GPUs sharing the feature)
    feature: str  # "AVX512-VNNI", "INT8 Tensor Cores"
    route: str  # "oneDNN int8 kernels", "TFLite/LiteRT with XNNPACK", "TF-TRT INT8"
    how: str
    usable: bool  # False where this TensorFlow or this plan stands in the way (see `note`)
    note: str
    source: str


@dataclass(frozen=True, slots=True)
class Int8:
    """int8 inference eligibility: like mixed precision, eligible is reported, never switched on
    (quantizing is a model change hwtune cannot make)."""

    eligible: bool
    routes: tuple[Int8Route, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class TfData:
    private_threadpool_size: Setting
    autotune_cpu_budget: Setting
    autotune_ram_budget: Setting  # bytes
    parallel_calls: Setting
    interleave_cycle_length: Setting
    prefetch: Setting


@dataclass(frozen=True, slots=True)
class Distribution:
    strategy: Setting  # "OneDeviceStrategy", "MirroredStrategy"
    cross_device_ops: Setting  # "NcclAllReduce", "HierarchicalCopyAllReduce", "none"
    variable_placement: Setting  # "gpu" | "cpu"
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class InstanceSlice:
    """The share of the node one of `instances` processes gets: cores, NUMA nodes and GPUs."""

    index: int
    cpus: tuple[int, ...]
    numa_nodes: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()  # the physical GPUs (nvidia-smi indices) the slice runs on
    # What CUDA_VISIBLE_DEVICES names for the slice: GPU indices, or a MIG device's UUID.
    devices: tuple[str, ...] = ()
    gpu_memory_bytes: int | None = None  # of one device (a MIG slice's own memory), if known
    # No CPU list was detected: `cpus` numbers the CPUs counted (or assumed) from 0, so the plan
    # names them as assumed rather than as "CPUs 0" (planner/instances.py `cpus_named`).
    cpus_assumed: bool = False


@dataclass(frozen=True, slots=True)
class Bazel:
    tf_version: str
    options: tuple[str, ...]  # e.g. "--config=opt", "--copt=-march=znver4"
    bazelrc: str  # rendered from bazel_templates/
    configure_env: dict[str, str] = field(default_factory=dict)  # for `./configure`
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Measurement:
    """The `hwtune tune` result a profile took its "measured" settings from."""

    workload: str  # "builtin:cnn", a `tune --name`, or the "cmd:…" key tune printed
    created: str  # when it was measured (ISO 8601, UTC)
    # Its speed over the rule's choice; None when it was measured for another instance count
    # than planned (`instances`): that speed-up was measured only for that combination.
    ratio: float | None
    file: str  # where it is stored
    instances: int = 1  # the instance count it was measured for


@dataclass(frozen=True, slots=True)
class Profile:
    intent: Intent
    env: dict[str, Setting]  # variable name -> value, reason, source
    threads: Threads
    jit: Jit
    precision: Precision
    data_format: Setting  # "channels_last" | "channels_first"
    tf_data: TfData
    instance: InstanceSlice  # this process's slice (intent.instance)
    instances: tuple[InstanceSlice, ...]  # every slice, for `hwtune exec --instances`
    # Several instances: whether `hwtune exec` pins each to its slice (True/False), why, and
    # whether the rule or `hwtune tune` decided; None for one instance (it keeps its CPUs).
    pinning: Setting | None = None
    distribution: Distribution | None = None  # None without GPUs
    bazel: Bazel | None = None
    allow_soft_placement: Setting | None = None
    # MiB of each visible GPU this process may use (None: the whole device); None without GPUs.
    gpu_memory: Setting | None = None
    int8: Int8 | None = None  # None only in profiles written before hwtune planned it
    left_out: tuple[LeftOut, ...] = ()
    warnings: tuple[str, ...] = ()  # what will go wrong on this machine as planned, and why
    fingerprint: str = ""  # of the hardware facts the plan depends on
    measurement: Measurement | None = None  # the tuned result applied, if any
    # The copies `--mode batch` chose (planner/copies.py) and why; None where the count came
    # from the user, a launcher, a measurement or the default of one.
    copies: Setting | None = None
    schema_version: int = PROFILE_SCHEMA_VERSION
