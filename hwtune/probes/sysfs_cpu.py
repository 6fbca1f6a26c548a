"""CPU topology from sysfs (`root/sys/devices/system/cpu`), the best source there is.

Read (kernel Documentation/ABI/stable/sysfs-devices-system-cpu and
Documentation/admin-guide/cputopology.rst):
- `online`, `present`, `smt/control`, the `cpuN` directories (what `nproc --all` counts);
- `cpuN/topology/{core_cpus_list | thread_siblings_list, physical_package_id, core_id}`: read once
  per core, not once per CPU, so a 400-CPU machine costs a few hundred small reads;
- `cpuN/cache/indexM/{shared_cpu_list, level, type, size}`: once per cache instance;
- `cpufreq/policyN/{related_cpus, cpuinfo_max_freq}` and `cpuN/cpu_capacity` (Arm) for core types;
- `/sys/devices/cpu_core/cpus` and `/sys/devices/cpu_atom/cpus`: the hybrid PMUs Intel's perf
  driver registers on Alder Lake and later (arch/x86/events/intel/core.c), naming P and E cores;
- `/sys/devices/system/node/nodeN/cpulist` to place CPUs on NUMA nodes.
Offline CPUs have no topology directory (the kernel removes it), so they are listed as such.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from hwtune.models.cpulist import CpuListError, format_cpulist, parse_cpulist
from hwtune.models.digits import is_ascii_digits
from hwtune.models.hardware import Cache
from hwtune.probes.cpuinfo import PROBE, Topology
from hwtune.probes.issues import IssueLog
from hwtune.probes.root import list_dir, read_text

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"
# re.ASCII: a str pattern's \d also matches other Unicode digits, which no sysfs name holds.
_CPU_NAME = re.compile(r"^cpu(\d+)$", re.ASCII)
_NODE_NAME = re.compile(r"^node(\d+)$", re.ASCII)
_CACHE_TYPES = {"Data": "data", "Instruction": "instruction", "Unified": "unified"}


class SysfsProblem(NamedTuple):
    path: str  # relative to the root
    reason: str


class SysfsCpuFacts(NamedTuple):
    cpu_dirs: tuple[int, ...]
    present: tuple[int, ...] | None
    online: tuple[int, ...] | None
    smt_control: str | None  # on, off, forceoff, notsupported, notimplemented
    # cpu -> (package id, core group): SMT siblings share the group (its lowest CPU number)
    places: dict[int, tuple[int | None, int]]
    caches: tuple[Cache, ...]
    pmu_kinds: dict[str, tuple[int, ...]]  # "performance"/"efficiency" -> CPUs
    max_khz: dict[int, int]
    capacity: dict[int, int]
    no_l3: frozenset[int]  # CPUs without the L3 the others share
    problems: tuple[SysfsProblem, ...]


class _Reader:
    """Small-file reads under a root, collecting problems instead of raising."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.problems: list[SysfsProblem] = []

    def text(self, relative: str) -> str | None:
        try:
            # inside the root, regular files only, capped (probes.root)
            return read_text(Path(self.root), relative).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            self.problems.append(SysfsProblem(relative, f"cannot read: {err.strerror or err}"))
            return None

    def cpus(self, relative: str) -> tuple[int, ...] | None:
        value = self.text(relative)
        if value is None:
            return None
        try:
            return parse_cpulist(value)
        except CpuListError as err:
            self.problems.append(SysfsProblem(relative, str(err)))
            return None

    def number(self, relative: str) -> int | None:
        value = self.text(relative)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            self.problems.append(SysfsProblem(relative, f"not a number: {value[:40]!r}"))
            return None

    def names(self, relative: str, pattern: re.Pattern[str]) -> list[int]:
        try:
            entries = list_dir(Path(self.root), relative)  # inside the root (probes.root)
        except OSError:
            return []
        return sorted(int(m.group(1)) for name in entries if (m := pattern.match(name)))


def read_sysfs_cpu(root: Path, *, arm: bool = False) -> SysfsCpuFacts | None:
    """What `root/sys/devices/system/cpu` says; None when that directory is absent."""
    if not (root / CPU_DIR).is_dir():
        return None
    read = _Reader(root)
    cpu_dirs = tuple(read.names(CPU_DIR, _CPU_NAME))
    online = read.cpus(f"{CPU_DIR}/online")
    present = read.cpus(f"{CPU_DIR}/present")
    live = online if online is not None else cpu_dirs
    places = _places(read, live)
    caches, no_l3 = _caches(read, [c for c in live if c in places] or list(live))
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
        smt_control=read.text(f"{CPU_DIR}/smt/control"),
        places=places,
        caches=caches,
        pmu_kinds=pmu,
        max_khz=_max_khz(read),
        capacity=capacity,
        no_l3=no_l3,
        problems=tuple(read.problems),
    )


def _places(read: _Reader, cpus: tuple[int, ...]) -> dict[int, tuple[int | None, int]]:
    places: dict[int, tuple[int | None, int]] = {}
    by_ids: dict[tuple[int | None, int | None, int], int] = {}
    for cpu in cpus:
        if cpu in places:
            continue
        base = f"{CPU_DIR}/cpu{cpu}/topology"
        package = read.number(f"{base}/physical_package_id")
        siblings = read.cpus(f"{base}/core_cpus_list") or read.cpus(f"{base}/thread_siblings_list")
        if siblings and cpu in siblings:
            for sibling in siblings:
                places[sibling] = (package, min(siblings))
            continue
        core_id = read.number(f"{base}/core_id")
        if package is None and core_id is None:
            continue  # no topology directory: an offline CPU, or a kernel without it
        # Old kernels: only ids. core_id is unique within a die of a package, not machine-wide.
        die = read.number(f"{base}/die_id")
        key = (package, die, core_id if core_id is not None else -cpu - 1)
        group = by_ids.setdefault(key, cpu)
        places[cpu] = (package, group)
    return places


def _caches(read: _Reader, cpus: list[int]) -> tuple[tuple[Cache, ...], frozenset[int]]:
    if not cpus:
        return (), frozenset()
    indexes = read.names(f"{CPU_DIR}/cpu{cpus[0]}/cache", re.compile(r"^index(\d+)$", re.ASCII))
    found: dict[tuple[int, str, int | None], int] = {}
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
            shared = read.cpus(f"{base}/shared_cpu_list")
            if shared is None:
                continue
            covered.update(shared)
            covered.add(cpu)
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
    return caches, no_l3


def _size(text: str | None) -> int | None:
    """sysfs cache sizes are "32K", "1024K", "32768K" (KiB), occasionally "2M"."""
    if not text:
        return None
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    number, unit = (text[:-1], text[-1]) if text[-1] in units else (text, "")
    # 18 digits bound it: int() refuses over 4300 with a bare ValueError.
    if not is_ascii_digits(number) or len(number) > 18:
        return None
    return int(number) * units.get(unit, 1)


def _max_khz(read: _Reader) -> dict[int, int]:
    result: dict[int, int] = {}
    for policy in read.names(f"{CPU_DIR}/cpufreq", re.compile(r"^policy(\d+)$", re.ASCII)):
        base = f"{CPU_DIR}/cpufreq/policy{policy}"
        khz = read.number(f"{base}/cpuinfo_max_freq")
        cpus = read.cpus(f"{base}/related_cpus") or read.cpus(f"{base}/affected_cpus")
        if khz is not None and cpus:
            result.update(dict.fromkeys(cpus, khz))
    return result


def read_node_cpulists(
    root: Path,
) -> tuple[dict[int, tuple[int, ...]], tuple[SysfsProblem, ...]] | None:
    """NUMA node -> CPUs from `root/sys/devices/system/node/node*/cpulist`; None when absent."""
    read = _Reader(root)
    nodes = read.names(NODE_DIR, _NODE_NAME)
    if not nodes:
        return None
    result = {}
    for node in nodes:
        cpus = read.cpus(f"{NODE_DIR}/node{node}/cpulist")
        result[node] = cpus if cpus is not None else ()
    return result, tuple(read.problems)


def sysfs_topology(sysfs: SysfsCpuFacts, issues: IssueLog) -> Topology | None:
    """Topology of the online CPUs; None when no CPU has a topology directory."""
    where = "sys/devices/system/cpu"
    if not sysfs.places:
        issues.add(
            PROBE, "no cpuN/topology directories: topology taken from other sources", path=where
        )
        return None
    online = sysfs.online if sysfs.online is not None else tuple(sorted(sysfs.places))
    present = sysfs.present if sysfs.present is not None else sysfs.cpu_dirs
    missing = [cpu for cpu in online if cpu not in sysfs.places]
    if missing:
        issues.add(
            PROBE,
            f"no topology for online CPUs {format_cpulist(missing)}: counted without them",
            path=where,
        )
    offline = sorted(set(present) - set(online))
    smt_off = sysfs.smt_control in ("off", "forceoff")
    if offline and not smt_off:
        # With SMT switched off every core keeps one thread online, so nothing is missed then.
        issues.add(
            PROBE,
            f"CPUs {format_cpulist(offline)} are offline: sockets and cores are "
            "counted over the online CPUs",
            path=f"{where}/online",
        )
    topo = Topology(len(present) or len(online), online, "sysfs")
    topo.count({cpu: sysfs.places[cpu] for cpu in online if cpu in sysfs.places})
    if smt_off:
        topo.smt = False
    return topo
