"""CPU topology from sysfs (`root/sys/devices/system/cpu`), the best source there is.

Read (kernel Documentation/ABI/stable/sysfs-devices-system-cpu and
Documentation/admin-guide/cputopology.rst):
- `online`, `present`, `smt/control`, the `cpuN` directories (what `nproc --all` counts);
  without `online` (a partial copy), `offline` and the CPUs that have a topology directory;
- `cpuN/topology/`: the SMT siblings (`core_cpus_list`, else `thread_siblings_list`, else their
  hex masks `core_cpus`/`thread_siblings`) and the package: `physical_package_id`, or, where
  that is -1 or absent (sparc64, POWER LPARs, some s390 and embedded kernels), the package mask
  (`package_cpus_list`, `core_siblings_list`, `package_cpus`, `core_siblings`), counted as lscpu
  does (one socket per distinct mask, lscpu-topology.c). Read once per core or package, not
  once per CPU, so a 400-CPU machine costs a few hundred small reads;
- `cpuN/cache/indexM/{shared_cpu_list | shared_cpu_map, level, type, size}`: once per instance;
- `cpufreq/policyN/{related_cpus, cpuinfo_max_freq}` (older kernels: `cpuN/cpufreq/`) and
  `cpuN/cpu_capacity` (Arm) for core types;
- `/sys/devices/cpu_core/cpus` and `/sys/devices/cpu_atom/cpus`: the hybrid PMUs Intel's perf
  driver registers on Alder Lake and later (arch/x86/events/intel/core.c), naming P and E cores.
Offline CPUs have no topology directory (the kernel removes it), so they are listed as such.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import NamedTuple

from hwtune.models.cpulist import name_cpus
from hwtune.models.digits import is_ascii_digits, within_u64
from hwtune.models.hardware import Cache
from hwtune.probes.clusters import merge_clusters
from hwtune.probes.cpuinfo import PROBE, Topology
from hwtune.probes.issues import IssueLog
from hwtune.probes.sysfs_nodes import CPU_DIR, CPU_NAME
from hwtune.probes.sysfs_read import SysfsProblem, SysfsReader

_CACHE_TYPES = {"Data": "data", "Instruction": "instruction", "Unified": "unified"}
_SIBLINGS = ("core_cpus_list", "thread_siblings_list", "core_cpus", "thread_siblings")
_PACKAGE_MASKS = ("package_cpus_list", "core_siblings_list", "package_cpus", "core_siblings")

__all__ = ["SysfsCpuFacts", "SysfsProblem", "read_sysfs_cpu", "sysfs_topology"]


class SysfsCpuFacts(NamedTuple):
    cpu_dirs: tuple[int, ...]
    present: tuple[int, ...] | None
    online: tuple[int, ...] | None
    offline: tuple[int, ...] | None  # read only where `online` is missing
    smt_control: str | None  # on, off, forceoff, notsupported, notimplemented
    # cpu -> (package, core group): SMT siblings share the group (its lowest CPU number)
    places: dict[int, tuple[int | None, int]]
    package_source: str  # "physical_package_id", or the package mask file that decided
    caches: tuple[Cache, ...]
    cache_spans: tuple[tuple[int, ...], ...]  # CPUs sharing each level-2+ cache instance
    pmu_kinds: dict[str, tuple[int, ...]]  # "performance"/"efficiency" -> CPUs
    max_khz: dict[int, int]
    capacity: dict[int, int]
    no_l3: frozenset[int]  # CPUs without the L3 the others share
    problems: tuple[SysfsProblem, ...]


def read_sysfs_cpu(root: Path, *, arm: bool = False) -> SysfsCpuFacts | None:
    """What `root/sys/devices/system/cpu` says; None when that directory is absent."""
    if not (root / CPU_DIR).is_dir():
        return None
    read = SysfsReader(root)
    cpu_dirs = tuple(read.cpu_names(CPU_DIR, CPU_NAME))
    online = read.cpus(f"{CPU_DIR}/online")
    present = read.cpus(f"{CPU_DIR}/present")
    offline = read.cpus(f"{CPU_DIR}/offline") if online is None else None
    # Only CPUs with a cpuN directory have files to read: the one listing above decides, so an
    # `online` of "0-65535" over two directories costs two CPUs' reads, not 65,536 times ten
    # failed opens (37 s). The kernel lists no online CPU without its directory.
    dirs = set(cpu_dirs)
    if online is not None:
        live = tuple(c for c in online if c in dirs)
    else:
        gone = set(offline or ())
        live = tuple(c for c in cpu_dirs if c not in gone)
    places, package_source = _places(read, live)
    caches, spans, no_l3 = _caches(read, [c for c in live if c in places] or list(live))
    pmu = {}
    for kind, pmu_dir in (("performance", "cpu_core"), ("efficiency", "cpu_atom")):
        cpus = read.cpus(f"sys/devices/{pmu_dir}/cpus")
        if cpus:
            pmu[kind] = cpus
    capacity: dict[int, int] = {}
    if arm and live and read.text(f"{CPU_DIR}/cpu{live[0]}/cpu_capacity") is not None:
        for cpu in live:
            value = read.number(f"{CPU_DIR}/cpu{cpu}/cpu_capacity")
            if value is not None:
                capacity[cpu] = value
    return SysfsCpuFacts(
        cpu_dirs=cpu_dirs,
        present=present,
        online=online,
        offline=offline,
        smt_control=read.text(f"{CPU_DIR}/smt/control"),
        places=places,
        package_source=package_source,
        caches=caches,
        cache_spans=spans,
        pmu_kinds=pmu,
        max_khz=_max_khz(read, live),
        capacity=capacity,
        no_l3=no_l3,
        problems=tuple(read.problems),
    )


def _places(
    read: SysfsReader, cpus: tuple[int, ...]
) -> tuple[dict[int, tuple[int | None, int]], str]:
    places: dict[int, tuple[int | None, int]] = {}
    by_ids: dict[tuple[int | None, int | None, int], int] = {}
    masked: dict[int, int] = {}  # cpu -> package ordinal, from the package masks
    sources: set[str] = set()
    for cpu in cpus:
        if cpu in places:
            continue
        base = f"{CPU_DIR}/cpu{cpu}/topology"
        package = read.number(f"{base}/physical_package_id")
        if package is not None and package >= 0:
            sources.add("physical_package_id")
        elif cpu in masked:
            package = masked[cpu]
        else:
            # -1 is include/linux/topology.h's "the architecture does not say".
            found = read.cpu_set(base, _PACKAGE_MASKS)
            package = None
            if found is not None and cpu in found[0]:
                package = len(set(masked.values()))
                masked.update(dict.fromkeys(found[0], package))
                sources.add(found[1])
        found = read.cpu_set(base, _SIBLINGS)
        siblings = found[0] if found else ()
        if cpu in siblings:
            for sibling in siblings:
                places[sibling] = (masked.get(sibling, package), min(siblings))
            continue
        core_id = read.number(f"{base}/core_id")
        if package is None and core_id is None:
            continue  # no topology directory: an offline CPU, or a kernel without it
        # Old kernels: only ids. core_id is unique within a die of a package, not machine-wide.
        die = read.number(f"{base}/die_id")
        key = (package, die, core_id if core_id is not None else -cpu - 1)
        group = by_ids.setdefault(key, cpu)
        places[cpu] = (package, group)
    return places, "+".join(sorted(sources))


def _caches(
    read: SysfsReader, cpus: list[int]
) -> tuple[tuple[Cache, ...], tuple[tuple[int, ...], ...], frozenset[int]]:
    if not cpus:
        return (), (), frozenset()
    indexes = read.names(f"{CPU_DIR}/cpu{cpus[0]}/cache", re.compile(r"^index(\d+)$", re.ASCII))
    found: dict[tuple[int, str, int | None], int] = {}
    spans: list[tuple[int, ...]] = []
    has_l3: set[int] = set()
    l3_seen = False
    for index in indexes:
        first = f"{CPU_DIR}/cpu{cpus[0]}/cache/index{index}"
        level = read.number(f"{first}/level")
        kind = _CACHE_TYPES.get(read.text(f"{first}/type") or "")
        if level is None or kind is None:
            continue
        covered: set[int] = set()
        for cpu in cpus:
            if cpu in covered:
                continue
            base = f"{CPU_DIR}/cpu{cpu}/cache/index{index}"
            shared_set = read.cpu_set(base, ("shared_cpu_list", "shared_cpu_map"))
            if shared_set is None:
                continue
            shared = shared_set[0]
            covered.update(shared)
            covered.add(cpu)
            if level >= 2 and len(shared) > 1:
                spans.append(shared)
            if level == 3:
                l3_seen = True
                has_l3.update(shared)
            size = _size(read.text(f"{base}/size"))
            found[(level, kind, size)] = found.get((level, kind, size), 0) + 1
    ordered = sorted(found.items(), key=lambda item: (*item[0][:2], item[0][2] or 0))
    caches = tuple(
        Cache(level=level, type=kind, size_bytes=size, instances=count)  # type: ignore[arg-type]
        for (level, kind, size), count in ordered
    )
    no_l3 = frozenset(c for c in cpus if c not in has_l3) if l3_seen else frozenset()
    return caches, tuple(spans), no_l3


def _size(text: str | None) -> int | None:
    """sysfs cache sizes are "32K", "1024K", "32768K" (KiB), occasionally "2M"."""
    if not text:
        return None
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    number, unit = (text[:-1], text[-1]) if text[-1] in units else (text, "")
    # 18 digits bound it: int() refuses over 4300 with a bare ValueError.
    if not is_ascii_digits(number) or len(number) > 18:
        return None
    size = int(number) * units.get(unit, 1)
    return size if within_u64(size) else None


def _max_khz(read: SysfsReader, live: tuple[int, ...]) -> dict[int, int]:
    result: dict[int, int] = {}
    policies = read.names(f"{CPU_DIR}/cpufreq", re.compile(r"^policy(\d+)$", re.ASCII))
    for policy in policies:
        base = f"{CPU_DIR}/cpufreq/policy{policy}"
        khz = read.number(f"{base}/cpuinfo_max_freq")
        cpus = read.cpu_words(f"{base}/related_cpus") or read.cpu_words(f"{base}/affected_cpus")
        if khz is not None and cpus:
            result.update(dict.fromkeys(cpus, khz))
    # Kernels older than the cpufreq/policyN directories keep each policy in cpuN/cpufreq (a
    # directory, or a link to the owner's; Documentation/cpu-freq/user-guide.txt of those
    # kernels), as prometheus/procfs's devices.ttar still has for cpu1. Each CPU's own file is
    # read for itself alone: its related_cpus is not trusted (node_exporter's sys.ttar says
    # "0" on every CPU). Where no policy exists and the first CPU has no such file either (a VM
    # without cpufreq) nothing more is opened.
    for index, cpu in enumerate(c for c in live if c not in result):
        khz = read.number(f"{CPU_DIR}/cpu{cpu}/cpufreq/cpuinfo_max_freq")
        if khz is not None:
            result[cpu] = khz
        elif index == 0 and not policies:
            break
    return result


def _online_without_file(sysfs: SysfsCpuFacts, issues: IssueLog) -> tuple[int, ...]:
    """The online CPUs of a tree without `online`: each cpuN directory with a topology (the
    kernel removes an offline CPU's), less those `offline` lists.

    Never the sibling lists: they name CPUs whose directories a partial copy may lack
    (prometheus/procfs's devices.ttar lists siblings 0,4 and 1,5 beside cpu0-cpu2 only), and
    taking those made CPUs 4 and 5 online while the CPU count said 3."""
    dirs = set(sysfs.cpu_dirs)
    offline = set(sysfs.offline or ())
    online = tuple(c for c in sysfs.cpu_dirs if c in sysfs.places and c not in offline)
    said = "less those `offline` lists" if sysfs.offline is not None else "(no `offline` either)"
    issues.add(
        PROBE,
        f"missing: online CPUs taken as the cpuN directories with a topology, {said}: "
        f"{name_cpus(online) if online else 'none'}",
        path="sys/devices/system/cpu/online",
    )
    ghosts = sorted(c for c in sysfs.places if c not in dirs)
    if ghosts:
        issues.add(
            PROBE,
            f"topology sibling lists name {name_cpus(ghosts)}, which "
            f"{'has' if len(ghosts) == 1 else 'have'} no cpuN directory: counted without them",
            path="sys/devices/system/cpu",
        )
    return online


def sysfs_topology(
    sysfs: SysfsCpuFacts,
    issues: IssueLog,
    *,
    soc: bool = False,
    parts: Mapping[int, Hashable] | None = None,
) -> Topology | None:
    """Topology of the online CPUs; None when no CPU has a topology directory.

    `soc`: the kernel's topology comes from drivers/base/arch_topology.c (arm64, riscv), whose
    device-tree path gave each cluster its own package id until Linux 6.3; `parts` are the Arm
    CPU part numbers by CPU, from /proc/cpuinfo.
    """
    where = "sys/devices/system/cpu"
    if sysfs.online == ():
        # Never the kernel's: it refuses to offline the last online CPU (_cpu_down() in
        # kernel/cpu.c returns -EBUSY), so an empty file was cut short or made by hand.
        issues.add(
            PROBE,
            "empty: no online CPU listed; topology taken from other sources",
            path=f"{where}/online",
        )
        return None
    if not sysfs.places:
        issues.add(
            PROBE, "no cpuN/topology directories: topology taken from other sources", path=where
        )
        return None
    online = sysfs.online if sysfs.online is not None else _online_without_file(sysfs, issues)
    present = sysfs.present if sysfs.present is not None else sysfs.cpu_dirs
    missing = [cpu for cpu in online if cpu not in sysfs.places]
    if missing:
        issues.add(
            PROBE,
            f"no topology for online {name_cpus(missing)}: counted without them",
            path=where,
        )
    offline = sorted(set(present) - set(online))
    smt_off = sysfs.smt_control in ("off", "forceoff")
    if offline and not smt_off:
        # With SMT switched off every core keeps one thread online, so nothing is missed then.
        issues.add(
            PROBE,
            f"{name_cpus(offline)} {'is' if len(offline) == 1 else 'are'} offline: sockets and "
            "cores are counted over the online CPUs",
            path=f"{where}/{'online' if sysfs.online is not None else 'offline'}",
        )
    places = {cpu: sysfs.places[cpu] for cpu in online if cpu in sysfs.places}
    if not sysfs.package_source:
        issues.add(
            PROBE,
            "physical_package_id is -1 or absent and there is no package mask "
            "(package_cpus, core_siblings): sockets unknown",
            path=where,
        )
    basis = f"sysfs: sockets from {sysfs.package_source or 'nothing (no package ids or masks)'}"
    if soc:
        types: Mapping[int, Hashable] = sysfs.capacity or sysfs.max_khz or parts or {}
        places, merged = merge_clusters(places, sysfs.cache_spans, types)
        if merged:
            basis += f"; {merged}"
    topo = Topology(len(present) or len(online), online, basis)
    topo.count(places)
    if smt_off:
        topo.smt = False
    return topo
