"""The text of cgroup files, parsed: pure functions, no file system (cgroup.py reads).

- `/proc/self/cgroup`: `hierarchy-ID:controller-list:cgroup-path`, v2 as `0::/path`
  (cgroups(7)).
- `/proc/self/mountinfo`: the cgroup and cgroup2 mounts (proc(5): the 4th field is the root of
  the mount inside the cgroup file system, the 5th the mount point, and after the ` - `
  separator the file-system type and the super options, which name the v1 controllers).
- v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, v2 `cpu.max`, and either version's memory limit.

Records are NamedTuples rather than dataclasses: each dataclass costs ~0.8 ms to create at
import, and this module is on the `hwtune detect` start-up path (bench/bench_detect.py).

Bad text raises ValueError or becomes an issue naming the file and line; the callers in
cgroup.py say which file it came from.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from hwtune.models.digits import is_ascii_digits, parse_u64
from hwtune.probes.issues import IssueLog, excerpt

PROBE = "cgroup"
PROC_CGROUP = "proc/self/cgroup"
PROC_MOUNTINFO = "proc/self/mountinfo"

# cgroup v1 reports "no memory limit" as PAGE_COUNTER_MAX pages in bytes: LONG_MAX rounded down to
# the page size (mm/memcontrol.c; 9223372036854771712 with 4 KiB pages, less with 64 KiB pages).
# No real limit comes near 2^62 bytes (4 EiB), so anything at or above it means "unlimited".
V1_UNLIMITED_MEMORY = 1 << 62

# v1 mount options that are not controllers (kernel/cgroup/cgroup-v1.c, cgroup1_parse_param).
V1_NON_CONTROLLER_OPTIONS = frozenset(
    {"rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode", "none", "all"}
)

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")

# The kernel prints a cgroup path in /proc/PID/cgroup only when it fits a PATH_MAX buffer
# (4096 bytes with its NUL), failing the read with ENAMETOOLONG otherwise, and then appends at
# most " (deleted)" (proc_cgroup_show, kernel/cgroup/cgroup.c). A longer path is no kernel's:
# a 1 MiB file of "a/a/a/..." made the ancestor chain (cgroup.py) quadratic in its depth, and
# detect ran out of memory.
PATH_MAX = 4096  # include/uapi/linux/limits.h, with the NUL
MAX_CGROUP_PATH_BYTES = PATH_MAX - 1 + len(" (deleted)")


class Membership(NamedTuple):
    """One line of /proc/self/cgroup."""

    hierarchy: int
    controllers: tuple[str, ...]  # () for the v2 line "0::/path"
    path: str
    line: int


class Mount(NamedTuple):
    """A cgroup or cgroup2 line of /proc/self/mountinfo."""

    root: str  # the directory of the cgroup file system that is mounted
    mount_point: str
    version: Literal[1, 2]
    controllers: tuple[str, ...]  # v1 super options that are controllers


def parse_proc_cgroup(text: str, issues: IssueLog, path: str = PROC_CGROUP) -> list[Membership]:
    """Parse /proc/self/cgroup; malformed lines become issues naming the line."""
    found: list[Membership] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        parts = raw.split(":", 2)
        # A hierarchy ID is a small int (cgroups(7)); the length bound also keeps int() from a
        # bare ValueError on strings over 4300 digits.
        if (
            len(parts) != 3
            or not is_ascii_digits(parts[0])
            or len(parts[0]) > 9
            or not parts[2].startswith("/")
        ):
            issues.add(PROBE, f"not a cgroup line: {excerpt(raw)}", path=path, line=number)
            continue
        # Only the cgroup2 line has hierarchy 0, and only it has no controller list: a v1
        # hierarchy always names its controllers or its name= (cgroups(7); kernel/cgroup/
        # cgroup.c, proc_cgroup_show). A line like "1::/" is neither; taken as v1 it matched no
        # controller, and the issue then blamed sys/fs/cgroup instead of this line.
        if len(parts[2].encode()) > MAX_CGROUP_PATH_BYTES:
            issues.add(
                PROBE,
                f"not a cgroup line: its path is {len(parts[2])} characters long, more than "
                f"the kernel prints ({MAX_CGROUP_PATH_BYTES} bytes): {excerpt(raw)}",
                path=path,
                line=number,
            )
            continue
        hierarchy = int(parts[0])
        if (hierarchy == 0) != (parts[1] == ""):
            why = (
                f"hierarchy {hierarchy} with no controllers; cgroup2 is 0::PATH"
                if hierarchy
                else "hierarchy 0 is cgroup2, which lists no controllers"
            )
            issues.add(PROBE, f"not a cgroup line: {excerpt(raw)} ({why})", path=path, line=number)
            continue
        names = tuple(n for n in parts[1].split(",") if n and not n.startswith("name="))
        if parts[1] and not names:
            continue  # a named hierarchy without controllers (name=systemd)
        found.append(Membership(hierarchy, names, parts[2], number))
    return found


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo (fs/proc_namespace.c).
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str, issues: IssueLog, path: str = PROC_MOUNTINFO) -> list[Mount]:
    """The cgroup and cgroup2 mounts of /proc/self/mountinfo; other lines are skipped."""
    mounts: list[Mount] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields:
            continue
        try:
            sep = fields.index("-", 6)
            fstype, options = fields[sep + 1], fields[sep + 3]
        except (ValueError, IndexError):
            issues.add("cgroup", f"not a mountinfo line: {excerpt(raw)}", path=path, line=number)
            continue
        if fstype not in ("cgroup", "cgroup2"):
            continue
        version: Literal[1, 2] = 2 if fstype == "cgroup2" else 1
        controllers = (
            ()
            if version == 2
            else tuple(
                o
                for o in options.split(",")
                if o not in V1_NON_CONTROLLER_OPTIONS and "=" not in o
            )
        )
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if max(len(root.encode()), len(point.encode())) >= PATH_MAX:
            issues.add(
                PROBE,
                f"a {fstype} mount whose root or mount point is {PATH_MAX} bytes or longer, "
                f"which no path to open can be: skipped: {excerpt(raw)}",
                path=path,
                line=number,
            )
            continue
        mounts.append(Mount(root, point, version, controllers))
    return mounts


# The kernel refuses a quota or a period under 1 ms (kernel/sched/core.c, tg_set_cfs_bandwidth:
# quota or period < min_cfs_quota_period is -EINVAL; Documentation/scheduler/sched-bwc.rst: "The
# minimum quota allowed for the quota or period is 1ms"), so such a value is none it wrote: a
# quota of 0 was read as 0 CPUs (which `plan --hardware` refuses), one of 1 us as 0.00001 CPUs.
MIN_QUOTA_US = 1000


def _check_minimum(what: str, value: int, error: type[ValueError] = ValueError) -> None:
    if value < MIN_QUOTA_US:
        raise error(f"{what} {value} us, below the kernel's minimum of 1 ms")


class PeriodError(ValueError):
    """cpu.cfs_period_us, not the quota next to it, is what is wrong."""


def parse_cfs_quota(quota: str, period: str) -> float | None:
    """v1 cpu.cfs_quota_us / cpu.cfs_period_us in CPUs; -1 (or any negative) is no quota.
    A bad period raises `PeriodError`, so the caller can name that file."""
    q = parse_u64(quota, signed=True)
    if q < 0:
        return None
    try:
        p = parse_u64(period, signed=True)
    except ValueError as err:
        raise PeriodError(str(err)) from None
    if p <= 0:
        raise PeriodError(f"period {p} is not positive")
    _check_minimum("period", p, PeriodError)
    _check_minimum("quota", q)
    return _ratio(q, p)


def _ratio(quota: int, period: int) -> float:
    # True division of ints too large for a float raises OverflowError; such a quota is junk.
    try:
        return quota / period
    except OverflowError:
        raise ValueError(f"quota {str(quota)[:20]}… is beyond any CPU count") from None


def parse_cpu_max(text: str) -> float | None:
    """v2 cpu.max ("$MAX $PERIOD", "max 100000" = no quota) in CPUs.

    A lone "$MAX" uses the default period of 100000 us (Documentation/admin-guide/cgroup-v2.rst).
    """
    fields = text.split()
    if not 1 <= len(fields) <= 2:
        raise ValueError(f"expected '$MAX $PERIOD', got {excerpt(text.strip())}")
    # Both numbers share one file, so the message says which one is bad: automaxprocs'
    # invalid-period ("500000 njn") read as an unreadable quota.
    period = _field("period", fields[1]) if len(fields) == 2 else 100_000
    if period <= 0:
        raise ValueError(f"period {period} is not positive")
    _check_minimum("period", period)  # "max 0" too: the kernel wrote neither
    if fields[0] == "max":
        return None
    quota = _field("quota", fields[0])
    if quota < 0:  # the kernel writes only "max" or a positive quota (kernel/sched/core.c)
        raise ValueError(f"quota {quota} is negative")
    _check_minimum("quota", quota)
    return _ratio(quota, period)


def _field(name: str, text: str) -> int:
    try:
        return parse_u64(text, signed=True)
    except ValueError as err:
        raise ValueError(f"{name} {err}") from None


def parse_memory_limit(text: str, version: Literal[1, 2]) -> int | None:
    """memory.max ("max" = none) or memory.limit_in_bytes (the huge sentinel = none)."""
    value = text.strip()
    if version == 2 and value == "max":
        return None
    limit = parse_u64(value, signed=True)
    if limit < 0:
        raise ValueError(f"negative limit {limit}")
    if limit == 0:  # the kernel takes 0 for an empty cgroup; hwtune's own holds hwtune
        raise ValueError("a limit of 0 bytes, which no running process has")
    return None if version == 1 and limit >= V1_UNLIMITED_MEMORY else limit
