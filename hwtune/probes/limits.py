"""The CPU and memory budget this process really has: affinity ∩ cpuset ∩ online, then the quota.

`nproc` and `os.sched_getaffinity` see the affinity mask and the cpuset, but not the CFS
bandwidth quota (cgroup v1 `cpu.cfs_quota_us`, v2 `cpu.max`), which is how `docker --cpus` and
Kubernetes CPU limits are enforced. Sizing a thread pool from the cores it can see while the
quota allows fewer makes CFS throttle it every period (ollama#17916 measured a ~45× throughput
collapse at 8 threads on a 4-CPU quota), so `effective_cpus` also honours the quota.

The quota is floored, with a minimum of 1, as uber-go/automaxprocs does
(internal/runtime/cpu_quota_linux.go@ca1c99f, `math.Floor` with `minValue` 1): a pool of
ceil(1.5) = 2 busy threads on a 1.5-CPU quota gets throttled every period, one of 1 does not.
(Java rounds up instead, JDK-8146115; hwtune prefers never exceeding the quota.)
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

from hwtune.models.cpulist import CpuListError, format_cpulist, parse_cpulist
from hwtune.models.hardware import CpuInfo, Limits, Memory
from hwtune.models.words import plural
from hwtune.probes.cgroup import CgroupLimits, read_cgroup_limits
from hwtune.probes.issues import IssueLog
from hwtune.probes.root import UnsafeRead
from hwtune.probes.root import read_text as root_read_text

STATUS = "proc/self/status"


def proc_status(pid: str = "self") -> str:
    """The status file of process `pid` ("self": this one), relative to the root."""
    return f"proc/{pid}/status"


def parse_affinity(text: str, issues: IssueLog, path: str = STATUS) -> tuple[int, ...] | None:
    """`Cpus_allowed_list` of /proc/PID/status (proc(5)); None when absent or malformed."""
    for number, line in enumerate(text.splitlines(), start=1):
        name, _, value = line.partition(":")
        if name == "Cpus_allowed_list":
            try:
                return parse_cpulist(value)
            except CpuListError as err:
                issues.add("limits", str(err), path=path, line=number)
                return None
    issues.add("limits", "no Cpus_allowed_list line; CPU affinity unknown", path=path)
    return None


def read_affinity(
    root: Path, issues: IssueLog, *, live: bool, pid: str = "self"
) -> tuple[int, ...] | None:
    """The affinity mask of process `pid` ("self": this one): the status file (so --root
    trees work), else sched_getaffinity."""
    status = proc_status(pid)
    try:
        text = root_read_text(root, status)
    except UnsafeRead as err:
        issues.add("limits", f"CPU affinity unknown: {err.strerror}", path=status)
        return None
    except OSError as err:
        if live and hasattr(os, "sched_getaffinity"):
            with contextlib.suppress(OSError):
                return tuple(sorted(os.sched_getaffinity(0 if pid == "self" else int(pid))))
        missing = isinstance(err, (FileNotFoundError, NotADirectoryError))
        why = "file missing" if missing else f"cannot read: {err.strerror or err}"
        issues.add("limits", f"CPU affinity unknown: {why}", path=status)
        return None
    return parse_affinity(text, issues, status)


def _online(cpu: CpuInfo) -> tuple[int, ...] | None:
    if cpu.online_cpus:
        return cpu.online_cpus
    if cpu.logical_cpus:
        return tuple(range(cpu.logical_cpus))
    return None


def _narrowing(label: str, cpus: tuple[int, ...] | None, source: str, online: set[int]) -> str:
    if cpus is None or (online and online <= set(cpus)):
        return ""
    return f"{label} {format_cpulist(cpus)} ({source})"


def effective_cpus(
    online: tuple[int, ...] | None,
    affinity: tuple[int, ...] | None,
    cgroup: CgroupLimits,
    issues: IssueLog,
) -> tuple[tuple[int, ...], int, str]:
    """Pure: (usable CPUs, effective CPU count, why) from what each source allows."""
    known = [set(s) for s in (online, affinity, cgroup.cpuset_cpus) if s]  # empty = unknown
    if not known:
        issues.add("limits", "no online, affinity or cpuset CPU list known; assuming 1 CPU")
        return (), 1, "no CPU list known (assumed 1)"
    usable_set = set.intersection(*known)
    disjoint = not usable_set
    if disjoint:
        issues.add("limits", "online ∩ affinity ∩ cpuset is empty; using the first non-empty list")
        usable_set = next(s for s in known if s)
    usable = tuple(sorted(usable_set))
    all_online = set(online or ())
    narrowed = [
        n
        for n in (
            _narrowing("affinity", affinity, "Cpus_allowed_list", all_online),
            _narrowing("cpuset", cgroup.cpuset_cpus, cgroup.cpuset_source or "cpuset", all_online),
        )
        if n
    ]
    unknown = [name for name, cpus in (("online", online), ("affinity", affinity)) if not cpus]
    if cgroup.version is None:
        unknown.append("cgroup")
    if disjoint:
        # The lists narrowed nothing: they contradict each other, and the fallback says so
        # rather than "N of N online CPUs usable: cpuset 7".
        lists = [
            name
            for name, cpus in (
                ("online", online),
                ("affinity", affinity),
                ("cpuset", cgroup.cpuset_cpus),
            )
            if cpus
        ]
        which = f" ({' and '.join(narrowed)})" if narrowed else ""
        empty = f"{' ∩ '.join(lists)} is empty{which}"
        base = f"{plural(len(usable), 'CPU')}: {empty}; the {lists[0]} list used"
    elif narrowed:
        count = f"{len(usable)} of {len(all_online)} online CPUs" if all_online else None
        base = f"{count or plural(len(usable), 'CPU')} usable: {' and '.join(narrowed)}"
    elif unknown:
        base = plural(len(usable), "online CPU" if online else "CPU")
    else:
        base = f"{plural(len(usable), 'online CPU')}, not narrowed by affinity or cpuset"
    if unknown:
        base += f" ({' and '.join(unknown)} unknown)"
    quota = cgroup.cpu_quota
    if quota is None:
        quota_note = (
            ""  # "(cgroup unknown)" said it
            if cgroup.version is None
            else "; cgroup CPU quota unknown"
            if cgroup.cpu_quota_unknown
            else "; no cgroup CPU quota"
        )
        return usable, len(usable), base + quota_note
    quota_cpus = max(1, math.floor(quota))
    quota_text = f"cgroup quota {plural(quota, 'CPU')} ({cgroup.cpu_quota_source or 'cgroup'})"
    # Compared unfloored: 0.5 CPUs on 1 usable CPU still binds (the thread gets half of each
    # period), though the count stays 1.
    if quota < len(usable):
        return (
            usable,
            quota_cpus,
            (
                f"{quota_text} < {plural(len(usable), 'usable CPU')}; "
                f"floored to {quota_cpus} (at least 1)"
            ),
        )
    return usable, len(usable), f"{base}; {quota_text} does not bind"


def probe_limits(
    root: Path, issues: IssueLog, cpu: CpuInfo, memory: Memory, *, live: bool, pid: str = "self"
) -> Limits:
    """Affinity, cgroup cpuset/quota/memory and what they leave, under `root`, for process
    `pid` ("self": this one; `hwtune verify --pid` asks for the job's, whose taskset or CPU
    quota the verifier need not share)."""
    affinity = read_affinity(root, issues, live=live, pid=pid)
    cgroup = read_cgroup_limits(root, issues, pid)
    usable, effective, reason = effective_cpus(_online(cpu), affinity, cgroup, issues)
    limit = cgroup.memory_limit_bytes
    sizes = [b for b in (memory.total_bytes, limit) if b is not None]
    return Limits(
        affinity_cpus=affinity or (),
        cpuset_cpus=cgroup.cpuset_cpus,
        cpu_quota=cgroup.cpu_quota,
        cgroup_version=cgroup.version,
        cgroup_path=cgroup.path,
        usable_cpus=usable,
        effective_cpus=effective,
        effective_cpus_reason=reason,
        memory_bytes=min(sizes) if sizes else None,
        memory_limit_bytes=limit,
    )
