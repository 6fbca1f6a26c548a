"""cgroup v1 and v2: which cgroup this process is in, where it is mounted, and its limits
(the files' text is parsed in cgroup_text.py; this module finds and reads them).

Reading follows the kernel's own documentation: membership from `/proc/self/cgroup`
(`hierarchy-ID:controller-list:cgroup-path`, v2 as `0::/path`; cgroups(7)), mount points from
`/proc/self/mountinfo` (proc(5): the 4th field is the root of the mount inside the cgroup file
system, the 5th the mount point, and after the ` - ` separator the file-system type and the
super options, which name the v1 controllers). A cgroup path is translated to a directory the
way uber-go/automaxprocs does (internal/cgroups/mountpoint.go, `Translate`): relative to the
mount's root, joined to the mount point. Without mountinfo the conventional layout is tried:
`sys/fs/cgroup/<controller>/` (v1) and `sys/fs/cgroup/` (v2).

Records are NamedTuples rather than dataclasses: each dataclass costs ~0.8 ms to create at
import, and this module is on the `hwtune detect` start-up path (bench/bench_detect.py).

A limit set on an ancestor binds its descendants (a container's parent cgroup can hold the
quota), so quota and memory are the minimum over the cgroup and every ancestor up to the mount.
Everything is read under a root path, so a `hwtune snapshot` tree works like the live machine.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Literal, NamedTuple

from hwtune.models.cpulist import CpuListError, parse_cpulist
from hwtune.probes.cgroup_text import (
    PROBE,
    PROC_CGROUP,
    PROC_MOUNTINFO,
    Membership,
    Mount,
    PeriodError,
    parse_cfs_quota,
    parse_cpu_max,
    parse_memory_limit,
    parse_mountinfo,
    parse_proc_cgroup,
)
from hwtune.probes.issues import IssueLog, excerpt
from hwtune.probes.root import MAX_LARGE, MAX_SMALL, UnsafeRead, is_dir, is_file
from hwtune.probes.root import read_text as root_read_text

CONTROLLERS = ("cpu", "cpuset", "memory")

# Files read per controller, in both versions; `hwtune snapshot` copies exactly these.
V1_FILES = {
    "cpu": ("cpu.cfs_quota_us", "cpu.cfs_period_us"),
    "cpuset": ("cpuset.effective_cpus", "cpuset.cpus", "cpuset.mems"),
    "memory": ("memory.limit_in_bytes",),
}
V2_FILES = ("cpu.max", "cpuset.cpus.effective", "cpuset.cpus", "memory.max", "cgroup.controllers")


class ControllerDirs(NamedTuple):
    """Where one controller's files are for this process: its cgroup up to the mount point."""

    controller: str
    version: Literal[1, 2]
    cgroup_path: str  # as /proc/self/cgroup names it
    chain: tuple[Path, ...]  # the cgroup's directory first, then each ancestor to the mount


class CgroupLimits(NamedTuple):
    """The limits found, each with the file (relative to the root) that set it."""

    version: Literal[1, 2] | None = None
    path: str | None = None
    cpuset_cpus: tuple[int, ...] | None = None
    cpuset_source: str | None = None
    cpu_quota: float | None = None  # in CPUs, the lowest along the chain
    cpu_quota_source: str | None = None
    # No quota was read, and one may exist: the cpu cgroup was not found, or a quota file along
    # its chain could not be read or parsed (an issue says which). Never "no quota" then.
    cpu_quota_unknown: bool = False
    memory_limit_bytes: int | None = None  # the lowest along the chain
    memory_limit_source: str | None = None


def translate(mount: Mount, cgroup_path: str) -> str | None:
    """The cgroup's directory as a path under the mount point; None when the mount hides it.

    A path with `..` is a cgroup outside the reader's cgroup namespace (cgroup_namespaces(7):
    "the pathname will show ../ entries for each ancestor level"): no mount shows it, though
    `/..` is lexically under `/`."""
    inside, base = PurePosixPath(cgroup_path), PurePosixPath(mount.root)
    if ".." in inside.parts:
        return None
    if inside == base:
        return mount.mount_point
    if not inside.is_relative_to(base):
        return None
    return str(PurePosixPath(mount.mount_point) / inside.relative_to(base))


def _under(root: Path, absolute: str) -> Path:
    return root / absolute.lstrip("/")


def _chain(root: Path, mount_point: str, directory: str) -> tuple[Path, ...]:
    """`directory` and each ancestor up to and including `mount_point`, under `root`."""
    top = PurePosixPath(mount_point)
    here = PurePosixPath(directory)
    chain = [here]
    while here != top and here.is_relative_to(top) and here.parent != here:
        here = here.parent
        chain.append(here)
    return tuple(_under(root, str(p)) for p in chain)


def _fallback_mounts(root: Path, memberships: list[Membership]) -> list[Mount]:
    """The conventional mount points, for trees without proc/self/mountinfo."""
    mounts: list[Mount] = []
    for m in memberships:
        if m.controllers:
            for name in (",".join(m.controllers), *m.controllers):
                point = f"/sys/fs/cgroup/{name}"
                if is_dir(root, point.lstrip("/")):
                    mounts.append(Mount("/", point, 1, m.controllers))
                    break
        elif is_file(root, "sys/fs/cgroup/cgroup.controllers"):
            mounts.append(Mount("/", "/sys/fs/cgroup", 2, ()))
        elif is_file(root, "sys/fs/cgroup/unified/cgroup.controllers"):
            mounts.append(Mount("/", "/sys/fs/cgroup/unified", 2, ()))
    return mounts


# Mounts tried per hierarchy. A hierarchy is mounted once, plus a bind mount or two where a
# container runtime shares it; each try walks the path with openat. A mount table of 200,000
# cgroup2 lines, none showing the cgroup, took over a minute and logged an issue per mount.
MAX_MOUNT_TRIES = 16


# Levels of a cgroup read, itself and its ancestors up to the mount. Real ones are a few deep:
# a Kubernetes container is 4 below the root (kubepods.slice/kubepods-burstable.slice/
# kubepods-burstable-pod<UID>.slice/cri-containerd-<ID>.scope), a systemd user service 5.
# Each file is reached by openat from the root, one call per component, so a cgroup 2,000
# levels deep under a mount point 2,000 deep (each path within PATH_MAX) took 2 minutes.
MAX_CGROUP_LEVELS = 64


def _may_show(mount: Mount, cgroup_path: str) -> bool:
    """`translate` would find `cgroup_path` under `mount` (a cheap string test, for ordering)."""
    base = mount.root.rstrip("/")
    return cgroup_path == mount.root or cgroup_path.startswith(base + "/")


def locate(
    root: Path,
    memberships: list[Membership],
    mounts: list[Mount],
    issues: IssueLog,
    unknown: set[str] | None = None,
    source: str = PROC_CGROUP,
) -> dict[str, ControllerDirs]:
    """Find each controller of CONTROLLERS: v1 where a v1 hierarchy has it, else the v2 group.

    `source`: the membership file the memberships came from, for the issues.
    A controller the membership lists whose directory cannot be found is added to `unknown`
    (its limits are then unknown, not absent) with an issue; controllers that share a line
    (the v2 group, co-mounted v1 controllers) are looked up, and reported, once."""
    groups: dict[int, tuple[Membership, Literal[1, 2], list[Mount], list[str]]] = {}
    v2_line = next((m for m in memberships if m.hierarchy == 0 and not m.controllers), None)
    for controller in CONTROLLERS:
        member = next((m for m in memberships if controller in m.controllers), None)
        if member is not None:
            candidates = [mt for mt in mounts if mt.version == 1 and controller in mt.controllers]
            version: Literal[1, 2] = 1
        elif v2_line is not None:
            member = v2_line
            # In hybrid mode several cgroup2 mounts can exist; /sys/fs/cgroup is the real one.
            candidates = [mt for mt in mounts if mt.version == 2]
            version = 2
        else:
            continue
        groups.setdefault(member.line, (member, version, candidates, []))[3].append(controller)
    found: dict[str, ControllerDirs] = {}
    for member, version, candidates, names in groups.values():
        label = ", ".join(names)
        chain = _locate_one(root, member, version, candidates, label, issues, source)
        if chain is None:
            if unknown is not None:
                unknown.update(names)
            continue
        for name in names:
            found[name] = ControllerDirs(name, version, member.path, chain)
    return found


def _locate_one(
    root: Path,
    member: Membership,
    version: Literal[1, 2],
    candidates: list[Mount],
    label: str,
    issues: IssueLog,
    source: str = PROC_CGROUP,
) -> tuple[Path, ...] | None:
    """The directory chain of `member`'s cgroup under the first mount that has it; None, with
    one issue, when none does."""
    if ".." in PurePosixPath(member.path).parts:
        issues.add(
            PROBE,
            f"{label}: cgroup {member.path} lies outside hwtune's own cgroup namespace "
            "(cgroup_namespaces(7)), so its limits cannot be read: none applied",
            path=source,
        )
        return None
    kind = "cgroup v1" if version == 1 else "cgroup2"
    if not candidates:
        issues.add(
            PROBE,
            f"{label}: {source} line {member.line} lists it, but no {kind} mount holds "
            "it: its limits are unknown",
            path=PROC_MOUNTINFO,
        )
        return None
    # Mounts whose root shows the cgroup first; among cgroup2 ones, /sys/fs/cgroup first.
    ordered = sorted(
        candidates,
        key=lambda mt: (not _may_show(mt, member.path), mt.mount_point != "/sys/fs/cgroup"),
    )
    first_missing: tuple[str, str] | None = None  # (directory, its path under the root)
    hidden: Mount | None = None
    for mount in ordered[:MAX_MOUNT_TRIES]:
        directory = translate(mount, member.path)
        if directory is None and ".." in PurePosixPath(mount.root).parts:
            # Mounted before a cgroup namespace was entered (`unshare -C` with no remount):
            # the root shows as "/../.." (cgroup_namespaces(7)), an ancestor whose path to this
            # process's cgroup is not printed anywhere, so its mount point is someone else's.
            hidden = hidden or mount
            continue
        outside = directory is None
        directory = directory or mount.mount_point
        chain = _chain(root, mount.mount_point, directory)
        if not is_dir(root, _where(root, chain[0])):
            first_missing = first_missing or (directory, _where(root, chain[0]))
            continue
        if len(chain) - 1 > MAX_CGROUP_LEVELS:
            issues.add(
                PROBE,
                f"{label}: cgroup {excerpt(member.path)} is {len(chain) - 1} levels below the "
                f"mount at {excerpt(mount.mount_point)}, more than the {MAX_CGROUP_LEVELS} read: "
                "its limits are unknown",
                path=source,
            )
            return None
        if outside:
            issues.add(
                PROBE,
                f"{label}: cgroup {member.path} is outside the mount at "
                f"{mount.mount_point} (root {mount.root}); using the mount point",
                path=PROC_MOUNTINFO,
            )
        return chain
    tried = min(len(ordered), MAX_MOUNT_TRIES)
    more = f" ({tried} of {len(ordered)} {kind} mounts tried)" if len(ordered) > 1 else ""
    if first_missing is not None:
        directory, where = first_missing
        issues.add(
            PROBE,
            f"{label}: cgroup directory {directory} is missing{more}: its limits are unknown",
            path=where,
        )
    elif hidden is not None:
        issues.add(
            PROBE,
            f"{label}: the {kind} mount at {hidden.mount_point} has root {hidden.root}: it was "
            "mounted outside this process's cgroup namespace (cgroup_namespaces(7)), so cgroup "
            f"{member.path} cannot be found under it{more}: its limits are unknown",
            path=PROC_MOUNTINFO,
        )
    return None


def read_text(
    root: Path, path: Path, issues: IssueLog | None = None, limit: int = MAX_SMALL
) -> str | None:
    """A kernel file's text under `root` (inside it, regular, capped: `probes.root`), or None
    when absent or unreadable; an unreadable one (EACCES, EIO) or a refused one (a link out of
    the root, a FIFO, too large) is named in `issues`."""
    return _read(root, path, issues, limit)[0]


def _read(
    root: Path, path: Path, issues: IssueLog | None = None, limit: int = MAX_SMALL
) -> tuple[str | None, bool]:
    """`read_text`, and whether the file was there but could not be read (an issue said so)."""
    try:
        return root_read_text(root, _where(root, path), limit), False
    except UnsafeRead as err:
        if issues is not None:
            issues.add(PROBE, f"not read: {err.strerror}", path=_where(root, path))
        return None, True
    except (FileNotFoundError, NotADirectoryError):
        return None, False
    except (OSError, ValueError) as err:  # EACCES, EIO, ENAMETOOLONG: not "no limit" silently
        if issues is not None:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            issues.add(PROBE, f"cannot read: {why}", path=_where(root, path))
        return None, True


def _where(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _min_quota(
    root: Path, dirs: ControllerDirs, issues: IssueLog
) -> tuple[float | None, str | None, bool]:
    """The lowest quota along the chain, its file, and whether some quota file along the chain
    was there but unusable (so "no quota" is not known)."""
    best: tuple[float | None, str | None] = (None, None)
    failed = False
    for directory in dirs.chain:
        if dirs.version == 1:
            value, source, bad = _v1_quota(root, directory, issues)
        else:
            value, source, bad = _v2_quota(root, directory, issues)
        failed = failed or bad
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, source)
    return (*best, failed)


def _v1_quota(
    root: Path, directory: Path, issues: IssueLog
) -> tuple[float | None, str | None, bool]:
    """One directory's cpu.cfs_quota_us over its cpu.cfs_period_us: (CPUs, source, failed)."""
    quota_path, period_path = directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us"
    quota, failed = _read(root, quota_path, issues)
    if quota is None:
        return None, None, failed
    period, failed = _read(root, period_path, issues)
    source = _where(root, quota_path)
    try:
        if period is None:
            if parse_cfs_quota(quota, "100000") is None:  # any period the kernel takes
                return None, None, False  # -1: no quota, whatever the period
            if not failed:
                # The kernel creates both files together (kernel/sched/core.c, cpu_legacy_files).
                issues.add(
                    PROBE,
                    f"missing next to {source}, which sets a quota: the quota is unknown",
                    path=_where(root, period_path),
                )
            return None, None, True
        return parse_cfs_quota(quota, period), source, False
    except PeriodError as err:
        issues.add(PROBE, f"unreadable CPU period: {err}", path=_where(root, period_path))
    except ValueError as err:
        issues.add(PROBE, f"unreadable CPU quota: {err}", path=source)
    return None, None, True


def _v2_quota(
    root: Path, directory: Path, issues: IssueLog
) -> tuple[float | None, str | None, bool]:
    """One directory's cpu.max: (CPUs, source, failed)."""
    path = directory / "cpu.max"
    text, failed = _read(root, path, issues)
    if text is None:
        return None, None, failed
    try:
        return parse_cpu_max(text), _where(root, path), False
    except ValueError as err:
        issues.add(PROBE, f"unreadable CPU quota: {err}", path=_where(root, path))
        return None, None, True


def _min_memory(
    root: Path, dirs: ControllerDirs, issues: IssueLog
) -> tuple[int | None, str | None]:
    name = "memory.limit_in_bytes" if dirs.version == 1 else "memory.max"
    best: tuple[int | None, str | None] = (None, None)
    for directory in dirs.chain:
        text = read_text(root, directory / name, issues)
        if text is None:
            continue
        try:
            value = parse_memory_limit(text, dirs.version)
        except ValueError as err:
            where = _where(root, directory / name)
            issues.add(PROBE, f"unreadable memory limit: {err}", path=where)
            continue
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, _where(root, directory / name))
    return best


def _cpuset(
    root: Path, dirs: ControllerDirs, issues: IssueLog
) -> tuple[tuple[int, ...] | None, str | None]:
    """The nearest effective cpuset: the kernel already folds the ancestors into it."""
    names = (
        ("cpuset.effective_cpus", "cpuset.cpus")
        if dirs.version == 1
        else ("cpuset.cpus.effective", "cpuset.cpus")
    )
    for directory in dirs.chain:
        for name in names:
            text = read_text(root, directory / name, issues)
            # An empty cpuset.cpus means "not set here, inherit" (v2) or "not configured" (v1).
            if text is None or not text.strip():
                continue
            try:
                return parse_cpulist(text), _where(root, directory / name)
            except CpuListError as err:
                issues.add(PROBE, str(err), path=_where(root, directory / name), line=1)
    return None, None


def find_controllers(root: Path, issues: IssueLog) -> dict[str, ControllerDirs] | None:
    """Where this process's cpu, cpuset and memory cgroups are; None when membership is unknown."""
    found = _find(root, issues)
    return None if found is None else found[0]


def proc_cgroup(pid: str = "self") -> str:
    """The membership file of process `pid` ("self": this one), relative to the root."""
    return f"proc/{pid}/cgroup"


def _find(
    root: Path, issues: IssueLog, pid: str = "self"
) -> tuple[dict[str, ControllerDirs], set[str]] | None:
    """`find_controllers`, and the controllers listed whose directory was not found.

    `pid`: whose membership is read (`hwtune verify --pid` asks for the job's own). The mount
    table stays this process's: /proc/PID/cgroup names paths relative to the reader's cgroup
    namespace (cgroups(7)), and they are looked up where the reader's mounts are.
    """
    membership = proc_cgroup(pid)
    text = read_text(root, root / membership, issues)
    if text is None:
        issues.add(
            PROBE,
            "cgroup membership unknown: file missing; no cgroup limits applied",
            path=membership,
        )
        return None
    if not text.strip():
        # The kernel prints a line per mounted v1 hierarchy and, since Linux 4.5, always the
        # "0::" line (cgroups(7)): an empty file is a capture cut short, not "no cgroups".
        issues.add(
            PROBE, "empty: cgroup membership unknown; no cgroup limits applied", path=membership
        )
        return None
    memberships = parse_proc_cgroup(text, issues, membership)
    mountinfo = read_text(root, root / PROC_MOUNTINFO, issues, MAX_LARGE)
    if mountinfo is None:
        mounts = _fallback_mounts(root, memberships)
        issues.add(
            PROBE,
            "mount table missing; assumed the usual layout under sys/fs/cgroup",
            path=PROC_MOUNTINFO,
        )
    else:
        mounts = parse_mountinfo(mountinfo, issues)
    unknown: set[str] = set()
    dirs = locate(root, memberships, mounts, issues, unknown, membership)
    if not dirs and memberships and not unknown:
        # locate() looked nothing up: no line lists cpu, cpuset or memory, and there is no
        # cgroup2 line. Such a controller is on no mounted hierarchy (the kernel lists every one,
        # cgroups(7)), so it limits nothing; what says so is the membership file, not a
        # directory (Go's runtime calls this ErrNoCgroup, automaxprocs ErrNotV2).
        issues.add(
            PROBE,
            "lists no cpu, cpuset or memory controller and no cgroup2 line (0::PATH); "
            "no cgroup limits applied",
            path=membership,
        )
    return dirs, unknown


def read_cgroup_limits(root: Path, issues: IssueLog, pid: str = "self") -> CgroupLimits:
    """The cgroup limits of process `pid` ("self": this one) under `root`; what is missing
    becomes an issue."""
    found = _find(root, issues, pid)
    if found is None:
        return CgroupLimits()
    dirs, unknown = found
    quota_unknown = "cpu" in unknown
    if not dirs:
        return CgroupLimits(cpu_quota_unknown=quota_unknown)
    main = dirs.get("cpu") or dirs.get("cpuset") or next(iter(dirs.values()))
    none: tuple[None, None] = (None, None)
    cpuset, cpuset_source = _cpuset(root, dirs["cpuset"], issues) if "cpuset" in dirs else none
    quota, quota_source = none
    if "cpu" in dirs:
        quota, quota_source, failed = _min_quota(root, dirs["cpu"], issues)
        quota_unknown = failed and quota is None
    memory, memory_source = _min_memory(root, dirs["memory"], issues) if "memory" in dirs else none
    return CgroupLimits(
        version=main.version,
        path=main.cgroup_path,
        cpuset_cpus=cpuset,
        cpuset_source=cpuset_source,
        cpu_quota=quota,
        cpu_quota_source=quota_source,
        cpu_quota_unknown=quota_unknown,
        memory_limit_bytes=memory,
        memory_limit_source=memory_source,
    )


def cgroup_files(root: Path, issues: IssueLog) -> list[Path]:
    """Every cgroup file `read_cgroup_limits` may read, for `hwtune snapshot` to copy."""
    files: list[Path] = []
    for dirs in (find_controllers(root, issues) or {}).values():
        names = V1_FILES[dirs.controller] if dirs.version == 1 else V2_FILES
        files.extend(
            d / n for d in dirs.chain for n in names if is_file(root, _where(root, d / n))
        )
    return files
