"""`probe_cpu(root, issues)`: one `CpuInfo` from /proc/cpuinfo, sysfs and a saved `lscpu`.

Identity (vendor, model, flags) comes from /proc/cpuinfo, else from lscpu. Topology comes from the
best source present, in this order:
1. sysfs `cpuN/topology` (the kernel's own grouping of SMT siblings into cores and packages;
   the package masks where package ids are -1; Arm/RISC-V cluster ids joined into sockets,
   probes/clusters.py);
2. `lscpu -p`/`-e` rows (CPU, Core, Socket, Node), else lscpu's summary lines (summed over
   the "Model name" blocks of a part with several core types);
3. /proc/cpuinfo `physical id` / `core id`, trusted only when the file is self-consistent;
4. per-package figures (cpuinfo `siblings` / `cpu cores`, a single-threaded core design in the
   microarchitecture table) for threads per core alone.
Each time a source is missing or partial an issue says so; `topology_basis` names the source
that decided. Counts are never extrapolated from a fragment: a cpuinfo holding processor 143
alone gives null counts, not 1.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from hwtune.errors import KnowledgeError
from hwtune.models.hardware import Arch, Cache, CoreKind, CoreType, CpuInfo, LogicalCpu
from hwtune.probes.arm_parts import arm_part_name
from hwtune.probes.cpuinfo import (
    PROBE,
    CpuinfoFacts,
    Topology,
    cpuinfo_topology,
    parse_cpuinfo,
    read_text,
)
from hwtune.probes.darwin_sysctl import is_sysctl, parse_sysctl
from hwtune.probes.issues import IssueLog
from hwtune.probes.lscpu import LscpuFacts, lscpu_topology, parse_lscpu
from hwtune.probes.lscpu_identity import MACHINES, lscpu_arch, lscpu_identity
from hwtune.probes.microarch import (
    CpuIdentity,
    MicroarchEntry,
    arm_implementer_code,
    arm_vendor_name,
    hybrid_model,
    identify,
)
from hwtune.probes.root import MAX_LARGE, is_file
from hwtune.probes.sysfs_cpu import SysfsCpuFacts, read_sysfs_cpu, sysfs_topology
from hwtune.probes.sysfs_nodes import read_node_cpus

_MACHINES = MACHINES
# Intel Turbo Boost Max 3.0 "favoured" cores run a few bins (100-200 MHz, <10%) above the rest of
# a uniform part (e.g. i9-10980XE: 4.8 vs 4.6 GHz); hybrid P/E cores differ by 25% or more
# (i9-12900K: 5.1 vs 3.9 GHz). Only gaps above this ratio are taken as core types.
_CORE_TYPE_GAP = 1.10
# Clocksources a guest kernel registers: arch/x86/kernel/kvmclock.c, arch/x86/xen/time.c,
# drivers/clocksource/hyperv_timer.c.
_CLOCKSOURCES = {"kvm-clock": "KVM", "xen": "Xen", "hyperv_clocksource_tsc_page": "Microsoft"}
# DMI sys_vendor of common hypervisors, as lscpu's "Hypervisor vendor" names them.
_DMI_VENDORS = {
    "QEMU": "KVM",
    "VMware, Inc.": "VMware",
    "Xen": "Xen",
    "innotek GmbH": "Oracle",
    "Microsoft Corporation": "Microsoft",
    "Amazon EC2": "KVM",
    "Google": "KVM",
}


def probe_cpu(root: Path, issues: IssueLog) -> CpuInfo:
    """The CPU under `root`: identity, flags, topology, core types, caches, microarchitecture."""
    from hwtune.probes.root import is_live

    live = is_live(root)
    if live and not sys.platform.startswith("linux"):
        return _probe_with_py_cpuinfo(issues)
    cpuinfo = _read_cpuinfo(root, issues)
    lscpu = _read_lscpu(root, issues)
    arch = _MACHINES.get(os.uname().machine, "unknown") if live else "unknown"
    # lscpu's Architecture is uname's machine; cpuinfo's arch is inferred (ppc64 vs ppc64le).
    if arch == "unknown" and lscpu is not None and lscpu.fields.get("Architecture") in _MACHINES:
        arch = _MACHINES[lscpu.fields["Architecture"]]
    if arch == "unknown" and cpuinfo is not None:
        arch = cpuinfo.arch
    if arch == "unknown" and lscpu is not None:
        arch = _lscpu_arch(lscpu)
    sysfs = read_sysfs_cpu(root, arm=arch == "aarch64")
    for problem in sysfs.problems if sysfs else ():
        issues.add(PROBE, problem.reason, path=problem.path)
    if cpuinfo is None and lscpu is None and not (sysfs and sysfs.places):
        issues.add(PROBE, f"no CPU source: {_why_no_source(root, sysfs)}")
        return CpuInfo(arch=arch)
    info = _identity(arch, cpuinfo, lscpu, issues)
    topo = _topology(root, arch, cpuinfo, lscpu, sysfs, issues)
    info = _with_microarch(info, cpuinfo, lscpu, issues)
    if cpuinfo is None and lscpu is not None and "Flags" not in lscpu.fields:
        # Without flags nothing proves what the CPU can execute: the model may tune, not target.
        issues.add(
            PROBE, "no Flags line and no /proc/cpuinfo: the CPU's flags are unknown", "lscpu.txt"
        )
        basis = f"{info.microarch_basis}; " if info.microarch_basis else ""
        info = replace(info, microarch_basis=f"{basis}flags unknown (lscpu.txt has no Flags line)")
    kinds = _core_kinds(info, topo, sysfs, lscpu, issues)
    hybrid = len(set(kinds.values())) > 1
    numbered = _numbered(topo)
    threads = topo.threads_per_core
    if threads is None and not hybrid and topo.places == {} and info.threads_per_core == 1:
        # A single-threaded core design is a fact; SMT2/4 is not (ThunderX2's firmware may
        # switch it off), so a wider design is never taken without the topology saying so.
        threads = 1
    return replace(
        info,
        sockets=topo.sockets,
        physical_cores=topo.cores,
        logical_cpus=topo.logical,
        threads_per_core=threads,
        smt_enabled=topo.smt if topo.smt is not None else (threads > 1 if threads else None),
        online_cpus=topo.online,
        topology_basis=topo.basis or None,
        topology=tuple(
            LogicalCpu(
                cpu=cpu,
                socket=numbered.get(cpu, (None, None))[0],
                core=numbered.get(cpu, (None, None))[1],
                node=topo.nodes.get(cpu),
                kind=kinds.get(cpu),
            )
            for cpu in topo.online
        ),
        core_types=_core_type_list(kinds, topo, sysfs, lscpu) if hybrid else (),
        caches=_caches(sysfs, lscpu),
        hypervisor=_hypervisor(root, info, lscpu),
    )


def _why_no_source(root: Path, sysfs: SysfsCpuFacts | None) -> str:
    """What each CPU source was: absent, or there and unusable (its own issue said why: a file
    refused for its size must not be reported as missing)."""
    said = [
        f"{name} {'unreadable' if is_file(root, name) else 'absent'}"
        for name in ("proc/cpuinfo", "lscpu.txt")
    ]
    cpus = "sys/devices/system/cpu"
    said.insert(1, f"{cpus} {'without cpuN/topology' if sysfs is not None else 'absent'}")
    return ", ".join(said)


def _read_cpuinfo(root: Path, issues: IssueLog) -> CpuinfoFacts | None:
    text = read_text(root, "proc/cpuinfo", issues, limit=MAX_LARGE)
    if text is None:
        return None
    # archspec's macOS targets are `sysctl` dumps, laid out where /proc/cpuinfo goes.
    sysctl = is_sysctl(text)
    facts = parse_sysctl(text) if sysctl else parse_cpuinfo(text)
    for problem in facts.problems:
        issues.add(PROBE, problem.reason, path="proc/cpuinfo", line=problem.line)
    if not facts.processors and not sysctl:
        issues.add(PROBE, "no 'processor' records", path="proc/cpuinfo")
    return facts


def _read_lscpu(root: Path, issues: IssueLog) -> LscpuFacts | None:
    text = read_text(root, "lscpu.txt", issues, limit=MAX_LARGE)
    if text is None:
        return None
    facts = parse_lscpu(text)
    for problem in facts.problems:
        issues.add(PROBE, problem.reason, path="lscpu.txt", line=problem.line)
    return facts


def _lscpu_arch(lscpu: LscpuFacts) -> Arch:
    """lscpu's Architecture line, else what its fields imply (util-linux tests omit the line)."""
    return lscpu_arch(lscpu.fields, lscpu.flags)


def _identity(
    arch: Arch, cpuinfo: CpuinfoFacts | None, lscpu: LscpuFacts | None, issues: IssueLog
) -> CpuInfo:
    info = CpuInfo(arch=arch)
    if cpuinfo is not None:
        vendor = cpuinfo.vendor
        if cpuinfo.implementer is not None:
            vendor = arm_vendor_name(int(cpuinfo.implementer, 16)) or cpuinfo.implementer
        info = replace(
            info,
            vendor=vendor,
            model_name=cpuinfo.model_name,
            family=cpuinfo.family,
            model=cpuinfo.model,
            stepping=cpuinfo.stepping,
            implementer=cpuinfo.implementer,
            part=cpuinfo.part,
            flags=cpuinfo.flags,
        )
        if cpuinfo.implementer and cpuinfo.part:
            # Arm cpuinfo names no model (old kernels: "AArch64 Processor rev 4"); lscpu names
            # the core from implementer and part, and so does the table (util-linux lscpu-arm.c).
            try:
                name = arm_part_name(int(cpuinfo.implementer, 16), int(cpuinfo.part, 16))
            except KnowledgeError as err:  # a bad user table costs the name, not the CPU
                issues.add(PROBE, f"Arm core name unknown: {err.message}")
                name = None
            info = replace(info, model_name=name or info.model_name)
    if lscpu is None:
        return info
    x86 = arch in ("x86_64", "i686")
    said = lscpu_identity(lscpu.fields, lscpu.flags, arch)
    return replace(
        info,
        vendor=info.vendor or said.vendor,
        model_name=info.model_name or lscpu.fields.get("Model name") or None,
        family=info.family if info.family is not None or not x86 else lscpu.number("CPU family"),
        model=info.model if info.model is not None or not x86 else lscpu.number("Model"),
        stepping=(
            info.stepping if info.stepping is not None or not x86 else lscpu.number("Stepping")
        ),
        flags=info.flags or said.flags,
    )


def _topology(
    root: Path,
    arch: Arch,
    cpuinfo: CpuinfoFacts | None,
    lscpu: LscpuFacts | None,
    sysfs: SysfsCpuFacts | None,
    issues: IssueLog,
) -> Topology:
    topo = None
    if sysfs:
        records = cpuinfo.processors if cpuinfo else ()
        parts = {
            r.processor: r.arm_part for r in records if r.processor is not None and r.arm_part
        }
        topo = sysfs_topology(sysfs, issues, soc=arch in ("aarch64", "riscv64"), parts=parts)
    if topo is None and lscpu is not None:
        topo = lscpu_topology(lscpu, issues, soc=arch in ("aarch64", "riscv64"))
    if topo is None and cpuinfo is not None:
        topo = cpuinfo_topology(cpuinfo, issues)
    topo = topo or Topology()
    nodes = read_node_cpus(root)
    if nodes is not None:
        topo.nodes = nodes.by_cpu()  # numa.probe_numa reports the problems
    elif lscpu is not None:
        topo.nodes = {cpu: node for node, cpus in lscpu.numa.items() for cpu in cpus}
        topo.nodes.update({r.cpu: r.node for r in lscpu.rows if r.node is not None})
    return topo


def _numbered(topo: Topology) -> dict[int, tuple[int | None, int]]:
    """cpu -> (socket, machine-wide core index); cores are numbered by their lowest CPU."""
    first: dict[object, int] = {}
    for cpu in sorted(topo.places):
        first.setdefault(topo.places[cpu][1], cpu)
    order = {group: index for index, group in enumerate(sorted(first, key=first.__getitem__))}
    return {cpu: (socket, order[group]) for cpu, (socket, group) in topo.places.items()}


def _with_microarch(
    info: CpuInfo,
    cpuinfo: CpuinfoFacts | None,
    lscpu: LscpuFacts | None,
    issues: IssueLog,
) -> CpuInfo:
    parts: tuple[tuple[int, int], ...] = ()
    vendor, cpu_name = info.vendor, None
    if info.arch == "aarch64":
        # Every core kind, the most common first (big.LITTLE parts list two).
        seen = Counter(r.arm_part for r in (cpuinfo.processors if cpuinfo else ()) if r.arm_part)
        parts = tuple(part for part, _ in seen.most_common())
        code = (
            int(info.implementer, 16)
            if info.implementer
            else arm_implementer_code(info.vendor or "")
        )
        vendor = f"{code:#04x}" if code is not None else None
        cpu_name = (lscpu.fields.get("Model name") if lscpu else None) or info.model_name
    elif info.arch in ("ppc64le", "ppc64"):
        vendor, cpu_name = "IBM", info.model_name
    elif info.arch in ("riscv64", "s390x"):
        cpu_name = cpuinfo.machine if cpuinfo else None
        if cpu_name is None and lscpu is not None:
            cpu_name = lscpu_identity(lscpu.fields, lscpu.flags, info.arch).machine
    identity = CpuIdentity(
        arch=info.arch,
        vendor=vendor,
        family=info.family,
        model=info.model,
        stepping=info.stepping,
        arm_parts=parts,
        pvr=cpuinfo.pvr if cpuinfo else _lscpu_pvr(lscpu, info.arch),
        cpu_name=cpu_name,
        riscv_id=cpuinfo.riscv_id if cpuinfo else None,
        flags=frozenset(info.flags),
    )
    try:
        found = identify(identity)
    except KnowledgeError as err:
        # A user's microarchitectures.json that does not validate costs the name alone: the
        # issue names the file, and detect still reports what the table is not needed for.
        issues.add(PROBE, f"microarchitecture unknown: {err.message}")
        return info
    if found.problem:
        issues.add(PROBE, f"microarchitecture unknown: {found.problem}")
    return replace(
        info,
        microarch=found.microarch,
        microarch_basis=found.basis,
        model_microarch=found.model,
        x86_64_level=found.x86_64_level,
        threads_per_core=found.threads_per_core,
    )


def _lscpu_pvr(lscpu: LscpuFacts | None, arch: Arch) -> int | None:
    return lscpu_identity(lscpu.fields, lscpu.flags, arch).pvr if lscpu else None


def _by_gaps(values: dict[int, float]) -> list[list[int]]:
    """CPUs grouped by a per-CPU figure, highest first, split only at gaps over 10%."""
    groups: list[tuple[float, list[int]]] = []
    for cpu, value in sorted(values.items(), key=lambda item: -item[1]):
        if groups and groups[-1][0] <= value * _CORE_TYPE_GAP:
            groups[-1][1].append(cpu)
        else:
            groups.append((value, [cpu]))
    return [cpus for _, cpus in groups]


def _core_kinds(
    info: CpuInfo,
    topo: Topology,
    sysfs: SysfsCpuFacts | None,
    lscpu: LscpuFacts | None,
    issues: IssueLog,
) -> dict[int, CoreKind]:
    """cpu -> core kind on hybrid parts; {} on uniform ones."""
    kinds: dict[int, CoreKind] = {}
    if sysfs and len(sysfs.pmu_kinds) > 1:
        # Meteor Lake's low-power E-cores sit on the SoC tile, outside the compute tile's L3.
        for cpu in sysfs.pmu_kinds.get("performance", ()):
            kinds[cpu] = "performance"
        for cpu in sysfs.pmu_kinds.get("efficiency", ()):
            kinds[cpu] = "low-power-efficiency" if cpu in sysfs.no_l3 else "efficiency"
        return kinds
    ranking: dict[int, float] = {}
    if sysfs:
        ranking = {c: float(v) for c, v in (sysfs.capacity or sysfs.max_khz).items()}
    if not ranking and lscpu:
        ranking = dict(lscpu.max_mhz)
    online = set(topo.online)  # not the tuple: `in` on it made 40,000 lscpu rows quadratic
    groups = _by_gaps({c: v for c, v in ranking.items() if c in online})
    if len(groups) > 1 and _uniform_intel(info):
        # Intel's hybrids are the models intel-family.h lists as such; another Intel part
        # whose files give its CPUs different top frequencies (a VM's made-up cpufreq, a
        # BIOS capping some cores) has one core type (prometheus/procfs's test tree: 2.4 and
        # 3.3 GHz on an i7-8650U).
        issues.add(
            PROBE,
            f"the CPUs' top frequencies differ ({len(groups)} groups), but model "
            f"{info.family}:{info.model:#x} is no Intel hybrid part: one core type",
        )
        groups = []
    if len(groups) > 1:
        for index, cpus in enumerate(groups):
            kind: CoreKind = "performance" if index < len(groups) - 1 else "efficiency"
            kinds.update(dict.fromkeys(cpus, kind))
        return kinds
    per_core = Counter(group for _, group in topo.places.values())
    if info.vendor == "GenuineIntel" and len(set(per_core.values())) > 1:
        # Intel hybrids: P-cores have Hyper-Threading, E-cores never do (Alder Lake onwards).
        for cpu, (_, group) in topo.places.items():
            kinds[cpu] = "performance" if per_core[group] > 1 else "efficiency"
        issues.add(
            PROBE,
            "hybrid part: P/E cores told by SMT (only P-cores have 2 threads); "
            "low-power E-cores cannot be told apart without sysfs",
        )
    elif set(per_core.values()) <= {1} and (entry := _hybrid_model(info)) is not None:
        # Every core has one thread (Hyper-Threading off, or Arrow/Lunar Lake, which have none),
        # and nothing above ranked them: uniform is a guess. Cores with two threads each are
        # all P-cores (E-cores never have SMT), so that case stays uniform.
        threads = "one thread on every core" if per_core else "no per-core topology"
        issues.add(
            PROBE,
            f"model {info.family}:{info.model:#x} ({entry.name}) is listed among Intel's hybrid "
            "parts (Linux intel-family.h), but nothing here tells P-cores from E-cores (no "
            f"sysfs PMU types, capacities or frequencies, and {threads}): core types "
            "unknown, so latency mode cannot keep work on the P-cores",
        )
    return kinds


def _uniform_intel(info: CpuInfo) -> bool:
    """An Intel x86 model that is none of its hybrids (`hybrid_x86_ids`)."""
    known = info.arch == "x86_64" and info.vendor == "GenuineIntel" and info.model is not None
    return known and info.family is not None and _hybrid_model(info) is None


def _hybrid_model(info: CpuInfo) -> MicroarchEntry | None:
    if info.arch != "x86_64" or info.model is None:
        return None
    try:
        return hybrid_model(info.vendor, info.family, info.model)
    except KnowledgeError:  # a broken table is reported where the microarchitecture is told
        return None


def _core_type_list(
    kinds: dict[int, CoreKind],
    topo: Topology,
    sysfs: SysfsCpuFacts | None,
    lscpu: LscpuFacts | None,
) -> tuple[CoreType, ...]:
    mhz = {c: k / 1000 for c, k in sysfs.max_khz.items()} if sysfs else {}
    if not mhz and lscpu:
        mhz = lscpu.max_mhz
    result = []
    order: tuple[CoreKind, ...] = ("performance", "efficiency", "low-power-efficiency")
    for kind in order:
        cpus = tuple(sorted(c for c, k in kinds.items() if k == kind))
        if cpus:
            cores = {topo.places[c][1] for c in cpus if c in topo.places}
            top = max((mhz[c] for c in cpus if c in mhz), default=None)
            count = len(cores) or len(cpus)
            result.append(CoreType(kind=kind, cpus=cpus, cores=count, max_mhz=top))
    return tuple(result)


def _caches(sysfs: SysfsCpuFacts | None, lscpu: LscpuFacts | None) -> tuple[Cache, ...]:
    if sysfs and sysfs.caches:
        return sysfs.caches
    result = []
    for cache in lscpu.caches if lscpu else ():
        kind = {"d": "data", "i": "instruction"}.get(cache.name[2:], "unified")
        result.append(
            Cache(
                level=int(cache.name[1]),
                type=kind,  # type: ignore[arg-type]
                size_bytes=cache.size_bytes,
                instances=cache.instances,
            )
        )
    return tuple(result)


def _hypervisor(root: Path, info: CpuInfo, lscpu: LscpuFacts | None) -> str | None:
    """The hypervisor's name, "unknown" for a guest that does not say whose, None otherwise."""
    if lscpu and lscpu.fields.get("Hypervisor vendor"):
        return lscpu.fields["Hypervisor vendor"]
    flagged = "hypervisor" in info.flags  # CPUID.1:ECX[31], the architectural "guest" bit
    if info.arch == "x86_64" and not flagged:
        return None
    quiet = IssueLog()  # these files are hints; their absence is normal
    xen = (read_text(root, "sys/hypervisor/type", quiet) or "").strip()
    if xen:
        return xen.capitalize()
    clocksource = "sys/devices/system/clocksource/clocksource0/available_clocksource"
    clocks = (read_text(root, clocksource, quiet) or "").split()
    found = next((name for clock, name in _CLOCKSOURCES.items() if clock in clocks), None)
    if found:
        return found
    # Bare-metal cloud and laptop vendors share these names: DMI counts only on a flagged guest.
    dmi = (read_text(root, "sys/class/dmi/id/sys_vendor", quiet) or "").strip()
    if flagged and dmi in _DMI_VENDORS:
        return _DMI_VENDORS[dmi]
    return "unknown" if flagged else None


def _probe_with_py_cpuinfo(issues: IssueLog) -> CpuInfo:
    """Off Linux there is no /proc or sysfs: ask py-cpuinfo (slow: it sleeps ~1 s), lazily."""
    try:
        import cpuinfo as py_cpuinfo
    except ImportError as err:
        issues.add(PROBE, f"not Linux and py-cpuinfo is not installed: {err}")
        return CpuInfo()
    data = py_cpuinfo.get_cpu_info()
    count = data.get("count")
    return CpuInfo(
        arch=_MACHINES.get(str(data.get("arch_string_raw", "")).lower(), "unknown"),
        vendor=data.get("vendor_id_raw") or None,
        model_name=data.get("brand_raw") or None,
        family=data.get("family"),
        model=data.get("model"),
        stepping=data.get("stepping"),
        flags=tuple(sorted(data.get("flags", ()))),
        logical_cpus=count if isinstance(count, int) else None,
    )
