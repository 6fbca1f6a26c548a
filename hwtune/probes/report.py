"""The human summary of `hwtune detect`: a pure function of `Hardware`, one fact per line.

What a person wants at a glance: which CPU (and the ISA that matters to TensorFlow), how many
CPUs a thread pool should really use and why, memory, GPUs with their compute capability and
how they are linked, what the installed TensorFlow leaves on the table, and what went wrong.
`hwtune detect --json` is the machine-readable form; this text is not a stable interface.
"""

from __future__ import annotations

from collections.abc import Iterable

from hwtune.models.cpulist import format_cpulist
from hwtune.models.hardware import (
    CpuInfo,
    Gpu,
    Hardware,
    Limits,
    Memory,
    TensorFlowInfo,
    gpu_links_known,
)
from hwtune.models.words import plural
from hwtune.probes.issues import printable

LABEL_WIDTH = 12

# Kernel flag -> how people write it, in the order that reads as a progression. These are the
# extensions TensorFlow's kernels and oneDNN dispatch on (TF's .bazelrc: -mavx baseline,
# AVX2/FMA for x86-64-v3, AVX-512 + VNNI/BF16 and AMX for the oneDNN BF16/INT8 paths).
X86_ISA = (
    ("sse4_2", "SSE4.2"),
    ("avx", "AVX"),
    ("avx2", "AVX2"),
    ("fma", "FMA"),
    ("avx_vnni", "AVX-VNNI"),
)
X86_AVX512 = (
    ("avx512f", "F"),
    ("avx512bw", "BW"),
    ("avx512_vnni", "VNNI"),
    ("avx512_bf16", "BF16"),
    ("avx512_fp16", "FP16"),
)
X86_AMX = (("amx_tile", "TILE"), ("amx_bf16", "BF16"), ("amx_int8", "INT8"), ("amx_fp16", "FP16"))
ARM_ISA = (
    ("asimd", "NEON"),
    ("asimddp", "DOTPROD"),
    ("sve", "SVE"),
    ("sve2", "SVE2"),
    ("bf16", "BF16"),
    ("i8mm", "I8MM"),
)
# Absent extensions worth saying out loud, because they decide TF's fast paths.
X86_NOTABLE_ABSENT = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("amx_tile", "AMX"))
ARM_NOTABLE_ABSENT = (("sve", "SVE"), ("bf16", "BF16"))
# 32-bit Arm hwcaps (arch/arm/kernel/setup.c, hwcap_str): TensorFlow publishes no build for it,
# so no absence is worth saying, and x86 names would be meaningless there.
ARM32_ISA = (("neon", "NEON"), ("vfpv4", "VFPv4"))


def _line(label: str, text: str) -> str:
    return f"{label:<{LABEL_WIDTH}}{text}".rstrip()


def _more(text: str) -> str:
    return " " * LABEL_WIDTH + text


def _bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _plural(n: int | None, word: str) -> str:
    return f"? {word}s" if n is None else plural(n, word)


def isa_summary(cpu: CpuInfo) -> str:
    """The ISA extensions that matter to TensorFlow, present first, notable absences after."""
    flags = set(cpu.flags)
    if not flags:
        return "unknown (no flags)"
    if cpu.arch == "aarch64":
        present = [name for flag, name in ARM_ISA if flag in flags]
        absent = [name for flag, name in ARM_NOTABLE_ABSENT if flag not in flags]
    elif cpu.arch == "armv7l":
        present = [name for flag, name in ARM32_ISA if flag in flags]
        absent = []
    elif cpu.arch not in ("x86_64", "i686", "unknown"):
        # hwtune tracks no extensions for POWER, s390x or RISC-V; x86 names would be wrong.
        return f"{len(flags)} flags; none tracked for {cpu.arch}"
    else:
        present = [name for flag, name in X86_ISA if flag in flags]
        for group, table in (("AVX-512", X86_AVX512), ("AMX", X86_AMX)):
            parts = [name for flag, name in table if flag in flags]
            if parts:
                present.append(f"{group} ({' '.join(parts)})")
        absent = [name for flag, name in X86_NOTABLE_ABSENT if flag not in flags]
    text = " ".join(present) or "none of the tracked extensions"
    return f"{text} · no {', '.join(absent)}" if absent else text


def _target(cpu: CpuInfo) -> str:
    """ "znver4", or "Zen 5, rdseed movdiri movdir64b masked -> x86-64-v4" (flags beat ids)."""
    if not cpu.microarch:
        return "microarch unknown"
    if not cpu.model_microarch or cpu.model_microarch == cpu.microarch:
        return cpu.microarch
    from hwtune.probes.microarch import load_microarchitectures, masked_flags

    names = {entry.key: entry.name for entry in load_microarchitectures()}
    masked = " ".join(masked_flags(cpu.model_microarch, frozenset(cpu.flags)))
    model = names.get(cpu.model_microarch, cpu.model_microarch)
    return f"{model}, {masked} masked -> {cpu.microarch}" if masked else cpu.microarch


def _cpu_lines(cpu: CpuInfo, numa_nodes: int) -> list[str]:
    level = f"x86-64-v{cpu.x86_64_level}" if cpu.x86_64_level else None
    details = [
        d
        for d in (
            cpu.vendor,
            cpu.arch if cpu.arch != "unknown" else None,
            _target(cpu),
            level if level != cpu.microarch else None,
            _guest(cpu.hypervisor),
        )
        if d
    ]
    name = cpu.model_name or cpu.part or "unknown model"
    smt = {True: "SMT on", False: "SMT off", None: "SMT unknown"}[cpu.smt_enabled]
    per_core = f"{_plural(cpu.threads_per_core, 'thread')}/core, " if cpu.threads_per_core else ""
    topology = (
        f"{_plural(cpu.sockets, 'socket')} · {_plural(cpu.physical_cores, 'core')} · "
        f"{_plural(cpu.logical_cpus, 'logical CPU')} ({per_core}{smt}) · "
        f"{_plural(numa_nodes or None, 'NUMA node')}"
    )
    lines = [
        _line("CPU", f"{name} ({', '.join(details)})"),
        _line("ISA", isa_summary(cpu)),
        _line("Topology", topology),
    ]
    for kind in cpu.core_types:
        lines.append(_more(f"{kind.kind} cores: {kind.cores} ({format_cpulist(kind.cpus)})"))
    return lines


def _guest(hypervisor: str | None) -> str | None:
    """The CPU line's "on KVM". A guest that does not say whose (only the CPUID hypervisor
    bit) read "on unknown", as if a hypervisor were called that."""
    if hypervisor is None:
        return None
    return "on an unknown hypervisor" if hypervisor == "unknown" else f"on {hypervisor}"


def _limits_lines(limits: Limits) -> list[str]:
    effective = plural(limits.effective_cpus, "CPU")
    lines = [_line("Effective", f"{effective} — {limits.effective_cpus_reason}")]
    parts = [f"usable {format_cpulist(limits.usable_cpus) or 'unknown'}"]
    if limits.cgroup_version is not None:
        parts.append(f"cgroup v{limits.cgroup_version} {limits.cgroup_path or '?'}")
    if limits.cpu_quota is not None:
        parts.append(f"quota {plural(limits.cpu_quota, 'CPU')}")
    lines.append(_more(" · ".join(parts)))
    return lines


def _memory_line(memory: Memory, limits: Limits) -> str:
    text = f"{_bytes(memory.total_bytes)} total, {_bytes(memory.available_bytes)} available"
    if limits.memory_limit_bytes is not None:
        text += f", cgroup limit {_bytes(limits.memory_limit_bytes)}"
    if memory.transparent_hugepages:
        text += f", THP {memory.transparent_hugepages}"
    return _line("Memory", text)


# Enough for any real NVLink fabric (a 16-GPU DGX-2 is one clique, found in a few steps); a
# hostile matrix can have exponentially many maximal cliques (Moon-Moser graphs: 3^(n/3)).
MAX_CLIQUE_STEPS = 10_000


def nvlink_cliques(gpus: Iterable[Gpu]) -> list[tuple[int, ...]]:
    """Maximal groups of GPUs that all reach each other over NVLink (Bron–Kerbosch with
    Tomita's pivot, linear on a fully linked fabric). Stops after MAX_CLIQUE_STEPS steps, with
    the cliques found so far, rather than hang `detect` on an adversarial topology file."""
    gpus = tuple(gpus)
    peers: dict[int, set[int]] = {g.index: set() for g in gpus}
    for gpu in gpus:  # a link is a link both ways, even where one side's report omits it
        for peer in gpu.nvlink_peers:
            if peer in peers and peer != gpu.index:
                peers[gpu.index].add(peer)
                peers[peer].add(gpu.index)
    cliques: list[tuple[int, ...]] = []
    steps = 0

    def grow(chosen: set[int], candidates: set[int], excluded: set[int]) -> None:
        nonlocal steps
        steps += 1
        if steps > MAX_CLIQUE_STEPS:
            return
        if not candidates and not excluded:
            if len(chosen) > 1:
                cliques.append(tuple(sorted(chosen)))
            return
        pivot = max(candidates | excluded, key=lambda u: (len(candidates & peers[u]), -u))
        for v in sorted(candidates - peers[pivot]):
            grow(chosen | {v}, candidates & peers[v], excluded & peers[v])
            candidates = candidates - {v}
            excluded = excluded | {v}

    grow(set(), set(peers), set())
    return sorted(cliques)


def _gpu_lines(hw: Hardware) -> list[str]:
    if not hw.gpus:
        return [_line("GPUs", "none")]
    driver = [
        f"driver {hw.gpu_driver}" if hw.gpu_driver else None,
        f"CUDA {hw.cuda_driver_version}" if hw.cuda_driver_version else None,
        f"via {hw.gpu_source}",
    ]
    lines = [_line("GPUs", f"{len(hw.gpus)} · " + ", ".join(d for d in driver if d))]
    for gpu in hw.gpus:
        cc = f"CC {gpu.compute_capability}" if gpu.compute_capability else "CC unknown"
        if gpu.architecture:
            cc += f" ({gpu.architecture})"
        facts = [gpu.name, cc, _bytes(gpu.memory_bytes)]
        if gpu.numa_node is not None:
            facts.append(f"NUMA {gpu.numa_node}")
        if gpu.mig_enabled:
            facts.append(f"MIG on ({plural(len(gpu.mig_devices), 'instance')})")
        lines.append(_line(f"  GPU {gpu.index}", " · ".join(facts)))
        kinds: dict[str, list[int]] = {}
        for link in gpu.links:
            kinds.setdefault(link.kind, []).append(link.peer)
        if kinds:
            links = "; ".join(f"{k} to GPU {format_cpulist(v)}" for k, v in sorted(kinds.items()))
            lines.append(_more(f"links: {links}"))
    cliques = nvlink_cliques(hw.gpus)
    if cliques:
        groups = " ".join("{" + ",".join(map(str, c)) + "}" for c in cliques)
        lines.append(_line("NVLink", f"cliques {groups}"))
    elif len(hw.gpus) > 1 and gpu_links_known(hw.gpus):
        lines.append(_line("NVLink", "none between these GPUs (peer traffic goes over PCIe)"))
    elif len(hw.gpus) > 1:
        lines.append(
            _line("NVLink", "unknown: the GPUs' links were not read (nvidia-smi topo -m)")
        )
    seen = hw.gpu_visibility
    if seen is not None:
        # A limit on the GPUs, as "Effective" is on the CPUs: nvidia-smi lists them all.
        lines.append(_line("Visible", seen.reason))
    return lines


def _tensorflow_lines(tf: TensorFlowInfo | None) -> list[str]:
    if tf is None:
        return [_line("TensorFlow", "not found")]
    build = f"CUDA {tf.cuda_version or '?'}" if tf.cuda_build else "CPU-only build"
    runtime = f"{tf.threading_runtime} threads"
    if tf.openmp_library:
        runtime += f" ({tf.openmp_library})"
    onednn = {True: "oneDNN on by default", False: "oneDNN off by default", None: None}
    facts = [f"{tf.distribution} {tf.version}", build, runtime, onednn[tf.onednn_default]]
    lines = [_line("TensorFlow", " · ".join(f for f in facts if f))]
    if tf.missing_isa:
        lines.append(_more(f"not built for this CPU's: {' '.join(tf.missing_isa)}"))
    elif tf.compiled_isa:
        lines.append(_more("built for every ISA extension this CPU has that TF uses"))
    return lines


def render_summary(hw: Hardware) -> str:
    """The `hwtune detect` text: CPU, topology, effective CPUs, memory, GPUs, TF, issues."""
    lines = [
        *_cpu_lines(hw.cpu, len(hw.numa)),
        *_limits_lines(hw.limits),
        _memory_line(hw.memory, hw.limits),
        *_gpu_lines(hw),
        *_tensorflow_lines(hw.tensorflow),
    ]
    if hw.root != "/":
        lines.append(_line("Root", hw.root))
    if not hw.issues:
        lines.append(_line("Issues", "none"))
    else:
        lines.append(_line("Issues", str(len(hw.issues))))
        for issue in hw.issues:
            where = ""
            if issue.path:
                where = f" [{issue.path}{f':{issue.line}' if issue.line else ''}]"
            lines.append(_more(f"{issue.probe}: {issue.reason}{where}"))
    # Model names, GPU names, cgroup paths and hypervisor names are the machine's (or a
    # capture's) words: escaped here, one place for every line, as issue reasons already are.
    return "\n".join(printable(line) for line in lines) + "\n"
