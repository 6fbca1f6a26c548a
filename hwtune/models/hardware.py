"""The hardware model: what `detect()` returns and `hwtune detect --json` prints.

Frozen, slotted stdlib dataclasses rather than pydantic classes, because the detect budget is
150 ms per process and importing pydantic plus a dozen models costs ~220 ms on the 2-core VM
this was measured on (bench/bench_detect.py). pydantic still owns the schema: `hwtune schema`
exports it through `pydantic.TypeAdapter`, and `models.convert.load` validates input strictly
without importing pydantic. Sequences are tuples so that a model is immutable all the way down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

SCHEMA_VERSION = 1

# The last eight are told apart so that a report names them; hwtune plans nothing CPU-specific
# there.
Arch = Literal[
    "x86_64",
    "aarch64",
    "ppc64le",
    "ppc64",
    "s390x",
    "riscv64",
    "armv7l",
    "i686",
    "ppc",
    "riscv32",
    "loongarch64",
    "sparc64",
    "mips",
    "ia64",
    "unknown",
]
CoreKind = Literal["performance", "efficiency", "low-power-efficiency", "unknown"]


@dataclass(frozen=True, slots=True)
class ProbeIssue:
    """A probe that failed or saw only part of what it looks for."""

    probe: str  # e.g. "cpuinfo", "cgroup", "nvml", "tensorflow"
    reason: str
    path: str | None = None  # the file (relative to the root) or library involved
    line: int | None = None  # 1-based line in `path`, for malformed input


@dataclass(frozen=True, slots=True)
class LogicalCpu:
    """One logical CPU and where it sits: the join key for sockets, cores, NUMA and core types."""

    cpu: int
    socket: int | None = None
    core: int | None = None  # a machine-wide core index: SMT siblings share it
    node: int | None = None
    kind: CoreKind | None = None  # only on hybrid parts


@dataclass(frozen=True, slots=True)
class CoreType:
    """A class of cores on a hybrid part (Intel P/E, Arm big.LITTLE)."""

    kind: CoreKind
    cpus: tuple[int, ...]
    cores: int
    max_mhz: float | None = None


@dataclass(frozen=True, slots=True)
class Cache:
    level: int
    type: Literal["data", "instruction", "unified"]
    size_bytes: int | None = None
    instances: int | None = None  # how many copies the machine has (per core, per socket…)


@dataclass(frozen=True, slots=True)
class CpuInfo:
    arch: Arch = "unknown"
    vendor: str | None = None  # GenuineIntel, AuthenticAMD, ARM, Ampere, IBM…
    model_name: str | None = None
    family: int | None = None  # x86 cpu family
    model: int | None = None  # x86 model number
    stepping: int | None = None
    implementer: str | None = None  # Arm "CPU implementer", e.g. "0x41"
    part: str | None = None  # Arm "CPU part", e.g. "0xd0c"
    microarch: str | None = None  # the GCC -march/-mcpu name, e.g. "znver4", "neoverse-v1"
    microarch_basis: str | None = None  # how it was told, for `hwtune detect` and explain
    # What the model ids name ("znver5"); differs from `microarch` where hidden flags rule that
    # target out. The model decides -mtune, the visible flags -march.
    model_microarch: str | None = None
    x86_64_level: int | None = None  # 1-4; None off x86
    flags: tuple[str, ...] = ()  # sorted kernel names: avx2, avx512_bf16, amx_tile, asimd, sve
    sockets: int | None = None
    physical_cores: int | None = None
    logical_cpus: int | None = None
    threads_per_core: int | None = None  # None where not uniform (hybrid parts)
    smt_enabled: bool | None = None
    online_cpus: tuple[int, ...] = ()
    topology: tuple[LogicalCpu, ...] = ()
    # Which source decided sockets and cores, e.g. "sysfs: sockets from core_siblings".
    topology_basis: str | None = None
    core_types: tuple[CoreType, ...] = ()
    caches: tuple[Cache, ...] = ()
    hypervisor: str | None = None  # "KVM", "VMware"…; None on bare metal or unknown


@dataclass(frozen=True, slots=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...]
    memory_bytes: int | None = None
    distances: tuple[int, ...] = ()
    # False when no source lists this node's CPUs: `cpus` is then empty but not "none".
    cpus_known: bool = True


@dataclass(frozen=True, slots=True)
class Limits:
    """The CPU and memory budget this process really has."""

    affinity_cpus: tuple[int, ...] = ()  # sched_getaffinity / Cpus_allowed_list
    cpuset_cpus: tuple[int, ...] | None = None  # cgroup cpuset; None when no cpuset applies
    cpu_quota: float | None = None  # cgroup CFS quota in CPUs (v1 quota/period, v2 cpu.max)
    cgroup_version: Literal[1, 2] | None = None
    cgroup_path: str | None = None
    usable_cpus: tuple[int, ...] = ()  # online ∩ affinity ∩ cpuset
    effective_cpus: int = 1  # what a thread pool should be sized from
    effective_cpus_reason: str = ""
    memory_bytes: int | None = None  # min(MemTotal, cgroup limit)
    memory_limit_bytes: int | None = None  # the cgroup limit alone; None when unlimited

    @property
    def known(self) -> bool:
        """False for limits left at their defaults (a hardware file without "limits", or a
        limits probe that failed): their effective_cpus of 1 was never measured."""
        return self != Limits()


@dataclass(frozen=True, slots=True)
class Memory:
    total_bytes: int | None = None
    available_bytes: int | None = None
    hugepage_size_bytes: int | None = None
    transparent_hugepages: str | None = None  # "always", "madvise", "never"


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device (a GPU instance and its compute instance): what CUDA sees as a device."""

    index: int
    uuid: str | None = None  # "MIG-<uuid>" (R470+) or "MIG-GPU-<uuid>/<gi>/<ci>" (R450/R460)
    profile: str | None = None  # e.g. "1g.10gb"
    memory_bytes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class GpuLink:
    """How this GPU reaches a peer, in `nvidia-smi topo -m` terms (NV12, PIX, PXB, NODE, SYS)."""

    peer: int
    kind: str
    nvlinks: int = 0


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str
    uuid: str | None = None
    compute_capability: str | None = None  # "8.0"
    compute_capability_basis: str | None = None  # "nvml", "name table: A100", …
    architecture: str | None = None  # "Ampere", "Hopper"…
    memory_bytes: int | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    cpu_affinity: tuple[int, ...] = ()
    mig_enabled: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    nvlink_peers: tuple[int, ...] = ()
    links: tuple[GpuLink, ...] = ()


def gpu_links_known(gpus: Sequence[Gpu]) -> bool:
    """Whether the link of every pair of GPUs is known. Links come from `nvidia-smi topo -m`
    (a GPU's row names its link to every other GPU) or NVML (the same, per GPU); a root with
    only `-q -x` or `-L` has none, and then NVLink is unknown, not absent. A pair is known
    when either GPU told its links, so one GPU without them is covered by the others' rows;
    two without them leave their own pair unknown."""
    silent = [g for g in gpus if not (g.links or g.nvlink_peers)]
    return len(silent) <= 1


@dataclass(frozen=True, slots=True)
class GpuVisibility:
    """What CUDA_VISIBLE_DEVICES leaves a CUDA process of the detected GPUs: a limit on the
    GPUs as the affinity mask and cpuset are on the CPUs (hwtune.probes.cuda_visible)."""

    value: str  # CUDA_VISIBLE_DEVICES as set ("" hides every GPU)
    device_order: str | None = None  # CUDA_DEVICE_ORDER as set; None: unset (FASTEST_FIRST)
    devices: int = 0  # how many devices CUDA enumerates
    # The visible GPUs' indices (nvidia-smi's), in CUDA's order; None when which ones the
    # variable names cannot be known (indices under FASTEST_FIRST on GPUs of several models, or
    # a UUID the capture does not list), only how many.
    gpus: tuple[int, ...] | None = ()
    mig_devices: tuple[str, ...] = ()  # the MIG UUIDs named; their GPUs are in `gpus`
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TensorFlowInfo:
    version: str
    distribution: str  # tensorflow, tensorflow-cpu, intel-tensorflow, tf-nightly…
    location: str | None = None  # the package directory, relative to the root
    cuda_build: bool = False
    cuda_version: str | None = None
    cudnn_version: str | None = None
    threading_runtime: Literal["eigen", "openmp"] = "eigen"
    threading_runtime_basis: str = ""
    openmp_library: str | None = None  # libiomp5.so, libgomp.so.1…
    compiled_isa: tuple[str, ...] = ()  # kernel flag names the binary was built for
    missing_isa: tuple[str, ...] = ()  # what the CPU has that the build does not use
    onednn_default: bool | None = None  # oneDNN on by default for this CPU and version
    compiled_isa_basis: str = ""  # where compiled_isa comes from; says so when it is unknown


@dataclass(frozen=True, slots=True)
class Hardware:
    schema_version: int = SCHEMA_VERSION
    root: str = "/"
    cpu: CpuInfo = field(default_factory=CpuInfo)
    numa: tuple[NumaNode, ...] = ()
    limits: Limits = field(default_factory=Limits)
    memory: Memory = field(default_factory=Memory)
    gpus: tuple[Gpu, ...] = ()
    gpu_driver: str | None = None
    cuda_driver_version: str | None = None
    gpu_source: Literal["nvml", "nvidia-smi", "none"] = "none"
    # None: CUDA_VISIBLE_DEVICES unset (every GPU visible), not read (a --root snapshot), or
    # no GPU detected. `gpus` always lists every GPU of the node.
    gpu_visibility: GpuVisibility | None = None
    tensorflow: TensorFlowInfo | None = None
    issues: tuple[ProbeIssue, ...] = ()
