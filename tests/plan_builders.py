"""Hand-built `Hardware` for planner tests and bench/bench_plan.py: any socket/core/SMT/NUMA
layout, quotas, cpusets, GPUs with a link matrix, and a TensorFlow install."""

from __future__ import annotations

from collections.abc import Sequence

from hwtune.models.hardware import (
    CoreKind,
    CpuInfo,
    Gpu,
    GpuLink,
    Hardware,
    Limits,
    LogicalCpu,
    Memory,
    NumaNode,
    TensorFlowInfo,
)

GIB = 2**30
ZEN4_FLAGS = (
    "adx",
    "avx",
    "avx2",
    "avx512_bf16",
    "avx512_bitalg",
    "avx512_vbmi2",
    "avx512_vnni",
    "avx512_vpopcntdq",
    "avx512bw",
    "avx512cd",
    "avx512dq",
    "avx512f",
    "avx512ifma",
    "avx512vbmi",
    "avx512vl",
    "bmi1",
    "bmi2",
    "clwb",
    "clzero",
    "cx16",
    "f16c",
    "fma",
    "gfni",
    "movbe",
    "popcnt",
    "sse4_1",
    "sse4_2",
    "ssse3",
    "vaes",
    "vpclmulqdq",
)
CASCADELAKE_FLAGS = (
    "adx",
    "avx",
    "avx2",
    "avx512_vnni",
    "avx512bw",
    "avx512cd",
    "avx512dq",
    "avx512f",
    "avx512vl",
    "bmi1",
    "bmi2",
    "clflushopt",
    "clwb",
    "cx16",
    "f16c",
    "fma",
    "movbe",
    "popcnt",
    "sse4_1",
    "sse4_2",
    "ssse3",
    "xsavec",
)


def tf_info(
    version: str = "2.21.0",
    runtime: str = "eigen",
    cuda: bool = False,
    distribution: str | None = None,
    openmp_library: str | None = None,
) -> TensorFlowInfo:
    return TensorFlowInfo(
        version=version,
        distribution=distribution or ("tensorflow" if cuda else "tensorflow-cpu"),
        cuda_build=cuda,
        threading_runtime="openmp" if runtime == "openmp" else "eigen",
        threading_runtime_basis="test fixture",
        openmp_library=openmp_library if runtime == "openmp" else None,
    )


def make_hardware(
    sockets: int = 1,
    cores_per_socket: int = 2,
    smt: int = 1,
    nodes_per_socket: int = 1,
    usable: Sequence[int] | None = None,
    quota: float | None = None,
    memory: int = 24 * GIB,
    memory_limit: int | None = None,
    flags: Sequence[str] = ZEN4_FLAGS,
    microarch: str | None = "znver4",
    arch: str = "x86_64",
    gpus: Sequence[Gpu] = (),
    tensorflow: TensorFlowInfo | None = None,
    hybrid_efficiency_cores: int = 0,
) -> Hardware:
    """CPU numbering as Linux does on Intel/AMD: all first threads, then all SMT siblings."""
    cores = sockets * cores_per_socket
    topology: list[LogicalCpu] = []
    per_node = max(1, cores_per_socket // nodes_per_socket)
    for thread in range(smt):
        for core in range(cores):
            socket = core // cores_per_socket
            node = socket * nodes_per_socket + min(
                (core % cores_per_socket) // per_node, nodes_per_socket - 1
            )
            kind: CoreKind | None = None
            if hybrid_efficiency_cores:
                kind = "efficiency" if core >= cores - hybrid_efficiency_cores else "performance"
            topology.append(
                LogicalCpu(
                    cpu=thread * cores + core, socket=socket, core=core, node=node, kind=kind
                )
            )
    online = tuple(range(cores * smt))
    usable_cpus = tuple(sorted(usable)) if usable is not None else online
    numa = tuple(
        NumaNode(
            id=n,
            cpus=tuple(lc.cpu for lc in topology if lc.node == n),
            memory_bytes=memory // (sockets * nodes_per_socket),
        )
        for n in range(sockets * nodes_per_socket)
    )
    effective = len(usable_cpus)
    reason = f"{effective} usable CPUs"
    if quota is not None and quota < effective:
        effective = max(1, int(quota))
        reason = f"cgroup CPU quota {quota:g} CPUs"
    mem_total = min(memory, memory_limit) if memory_limit else memory
    return Hardware(
        cpu=CpuInfo(
            arch=arch,  # type: ignore[arg-type]
            vendor="AuthenticAMD" if arch == "x86_64" else "ARM",
            microarch=microarch,
            flags=tuple(sorted(flags)),
            sockets=sockets,
            physical_cores=cores,
            logical_cpus=cores * smt,
            threads_per_core=smt,
            smt_enabled=smt > 1,
            online_cpus=online,
            topology=tuple(topology),
        ),
        numa=numa,
        limits=Limits(
            affinity_cpus=usable_cpus,
            cpuset_cpus=usable_cpus if usable is not None else None,
            cpu_quota=quota,
            usable_cpus=usable_cpus,
            effective_cpus=effective,
            effective_cpus_reason=reason,
            memory_bytes=mem_total,
            memory_limit_bytes=memory_limit,
        ),
        memory=Memory(total_bytes=memory),
        gpus=tuple(gpus),
        gpu_source="nvidia-smi" if gpus else "none",
        tensorflow=tensorflow,
    )


def make_gpus(
    count: int,
    cc: str = "8.0",
    name: str = "NVIDIA A100-SXM4-40GB",
    links: Sequence[Sequence[str]] | None = None,
    numa_nodes: Sequence[int | None] | None = None,
    affinity: Sequence[Sequence[int]] | None = None,
) -> tuple[Gpu, ...]:
    """`links[i][j]` is nvidia-smi topo's word for i→j ("NV12", "SYS", "PIX"…); default NV12."""
    gpus = []
    for i in range(count):
        gpu_links = tuple(
            GpuLink(
                peer=j,
                kind=links[i][j] if links else "NV12",
                nvlinks=int(links[i][j][2:])
                if links and links[i][j].startswith("NV") and links[i][j][2:].isdigit()
                else (0 if links else 12),
            )
            for j in range(count)
            if j != i
        )
        gpus.append(
            Gpu(
                index=i,
                name=name,
                compute_capability=cc,
                numa_node=numa_nodes[i] if numa_nodes else None,
                cpu_affinity=tuple(affinity[i]) if affinity else (),
                links=gpu_links,
                nvlink_peers=tuple(link.peer for link in gpu_links if link.kind.startswith("NV")),
            )
        )
    return tuple(gpus)


def p4d_hardware() -> Hardware:
    """p4d.24xlarge as its `nvidia-smi topo -m` shows it: 2 × 24-core Cascade Lake (SMT, 96 CPUs,
    nodes 0/1), 8 × A100 all NV12, GPUs 0-3 on node 0 (CPUs 0-23,48-71), 4-7 on node 1."""
    node0 = list(range(0, 24)) + list(range(48, 72))
    node1 = list(range(24, 48)) + list(range(72, 96))
    gpus = make_gpus(
        8,
        numa_nodes=[0, 0, 0, 0, 1, 1, 1, 1],
        affinity=[node0] * 4 + [node1] * 4,
    )
    return make_hardware(
        sockets=2,
        cores_per_socket=24,
        smt=2,
        memory=1152 * GIB,
        flags=CASCADELAKE_FLAGS,
        microarch="cascadelake",
        gpus=gpus,
        tensorflow=tf_info("2.21.0", cuda=True),
    )
