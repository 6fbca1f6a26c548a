"""Reading a running job: its threads, its cgroup's CPU counters, its CPU budget.

Per thread (proc(5)): /proc/PID/task/TID/stat gives the name, the state and utime+stime;
/proc/PID/task/TID/schedstat gives the nanoseconds on a CPU and the nanoseconds runnable but
waiting for one (Documentation/scheduler/sched-stats.rst), which is what tells a thread that
wants a CPU from one that sleeps, however loaded the machine is; /proc/PID/task/TID/wchan
names where a sleeping thread waits. The cgroup's cpu.stat (v1 and v2) counts the CFS periods
the group was throttled in. The budget is hwtune's own: `effective_cpus` of the limits probe
over the job's affinity and its cgroup quota.
"""

from __future__ import annotations

import os
from pathlib import Path

from hwtune.doctor.samples import Budget, CpuStat, ThreadSample
from hwtune.models.cpulist import CpuListError, parse_cpulist
from hwtune.probes.cgroup import CgroupLimits, locate
from hwtune.probes.cgroup_text import (
    parse_cfs_quota,
    parse_cpu_max,
    parse_mountinfo,
    parse_proc_cgroup,
)
from hwtune.probes.issues import IssueLog
from hwtune.probes.limits import effective_cpus, parse_affinity


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def parse_thread_stat(tid: int, text: str) -> ThreadSample | None:
    """One /proc/PID/task/TID/stat line: comm is parenthesised and may hold spaces or ')'."""
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        return None
    fields = text[end + 2 :].split()
    if len(fields) < 13:
        return None
    # fields[0] is stat field 3 (state); utime and stime are fields 14 and 15.
    return ThreadSample(tid, text[start + 1 : end], fields[0], int(fields[11]) + int(fields[12]))


def read_threads(pid: int) -> tuple[ThreadSample, ...] | None:
    """Every thread of `pid` now; None when the process is gone (or a zombie)."""
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return None
    found = []
    for name in tids:
        stat = _read(f"{base}/{name}/stat")
        if stat is None:
            continue  # the thread ended between listdir and open
        thread = parse_thread_stat(int(name), stat)
        if thread is None:
            continue
        run = wait = None
        schedstat = _read(f"{base}/{name}/schedstat")
        if schedstat:
            parts = schedstat.split()
            if len(parts) >= 2:
                run, wait = int(parts[0]), int(parts[1])
        wchan = ""
        if thread.state in ("S", "D"):
            wchan = (_read(f"{base}/{name}/wchan") or "").strip()
        found.append(
            ThreadSample(thread.tid, thread.comm, thread.state, thread.cpu_ticks, run, wait, wchan)
        )
    if found and all(thread.state in ("Z", "X") for thread in found):
        return None  # a zombie: ended, not yet reaped by its parent (every thread, not just
        # the leader: one that called pthread_exit shows Z while the others run)
    return tuple(found)


def parse_cpu_stat(text: str) -> CpuStat | None:
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[name] = int(value)
    if "nr_periods" not in values or "nr_throttled" not in values:
        return None
    if "throttled_usec" in values:  # v2
        throttled = values["throttled_usec"] * 1000
    else:  # v1: throttled_time in ns
        throttled = values.get("throttled_time", 0)
    return CpuStat(values["nr_periods"], values["nr_throttled"], throttled)


def cpu_cgroup(pid: int) -> tuple[Path, ...]:
    """The job's cpu cgroup directory and its ancestors to the mount ((): unknown)."""
    membership, mountinfo = _read(f"/proc/{pid}/cgroup"), _read(f"/proc/{pid}/mountinfo")
    if membership is None or mountinfo is None:
        return ()
    issues = IssueLog()
    dirs = locate(
        Path("/"),
        parse_proc_cgroup(membership, issues),
        parse_mountinfo(mountinfo, issues),
        issues,
    )
    cpu = dirs.get("cpu")
    return cpu.chain if cpu else ()


def read_cpu_stat(chain: tuple[Path, ...]) -> CpuStat | None:
    if not chain:
        return None
    text = _read(str(chain[0] / "cpu.stat"))
    return parse_cpu_stat(text) if text else None


def _quota(chain: tuple[Path, ...]) -> float | None:
    """The lowest CPU quota along the chain (a parent's quota binds its children)."""
    found: list[float] = []
    for directory in chain:
        try:
            v2 = _read(str(directory / "cpu.max"))
            if v2 is not None:
                quota = parse_cpu_max(v2)
            else:
                q = _read(str(directory / "cpu.cfs_quota_us"))
                p = _read(str(directory / "cpu.cfs_period_us"))
                quota = parse_cfs_quota(q, p) if q and p else None
        except ValueError:
            quota = None
        if quota is not None:
            found.append(quota)
    return min(found) if found else None


def read_budget(pid: int, chain: tuple[Path, ...]) -> Budget:
    """The job's effective CPUs: its affinity, its cgroup quota (floored, at least 1)."""
    issues = IssueLog()
    status = _read(f"/proc/{pid}/status") or ""
    affinity = parse_affinity(status, issues, path=f"/proc/{pid}/status")
    try:
        online: tuple[int, ...] | None = parse_cpulist(
            _read("/sys/devices/system/cpu/online") or ""
        )
    except CpuListError:
        online = None
    quota = _quota(chain)
    limits = CgroupLimits(
        version=1 if chain and (chain[0] / "cpu.cfs_quota_us").exists() else 2,
        cpu_quota=quota,
        cpu_quota_source=str(chain[0]) if chain and quota is not None else None,
    )
    _, cpus, reason = effective_cpus(online or None, affinity, limits, issues)
    return Budget(
        cpus=max(1, cpus),
        reason=reason,
        quota=None if quota is None else round(quota, 3),
        cgroup=str(chain[0]) if chain else None,
    )


def clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100  # USER_HZ on every Linux architecture (time(7))
