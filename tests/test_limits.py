"""Limits from cgroup v1/v2 trees, affinity and online CPUs, built as real files under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.models.hardware import CpuInfo, Memory
from hwtune.probes import detect
from hwtune.probes.cgroup import MAX_MOUNT_TRIES, CgroupLimits, read_cgroup_limits, translate
from hwtune.probes.cgroup_text import (
    Membership,
    Mount,
    parse_cfs_quota,
    parse_cpu_max,
    parse_memory_limit,
    parse_mountinfo,
    parse_proc_cgroup,
)
from hwtune.probes.issues import IssueLog
from hwtune.probes.limits import effective_cpus, parse_affinity, probe_limits

GIB = 1 << 30
V1_UNLIMITED = "9223372036854771712\n"  # what an unlimited v1 memory cgroup reports (4 KiB pages)

# A docker container on a cgroup v1 host: the container's cgroup is mounted as the root.
V1_MOUNTINFO = """\
22 28 0:20 / /sys rw,nosuid - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
31 30 0:27 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct
32 30 0:28 /docker/abc /sys/fs/cgroup/cpuset ro - cgroup cgroup rw,cpuset
33 30 0:29 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory
34 30 0:30 /docker/abc /sys/fs/cgroup/systemd ro - cgroup cgroup rw,xattr,name=systemd
"""
V1_CGROUP = """\
12:memory:/docker/abc
4:cpu,cpuacct:/docker/abc
3:cpuset:/docker/abc
1:name=systemd:/docker/abc
"""
# A Kubernetes pod on a cgroup v2 host, seen from the host's mount namespace.
V2_MOUNTINFO = "35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V2_CGROUP = "0::/kubepods/pod1/ctr\n"


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def status(cpus: str) -> str:
    return f"Name:\tpython3\nCpus_allowed:\tff\nCpus_allowed_list:\t{cpus}\nVmRSS:\t1 kB\n"


def v1_tree(
    root: Path, *, quota: str = "-1", cpus: str = "0-3", memory: str = V1_UNLIMITED
) -> Path:
    return make_tree(
        root,
        {
            "proc/self/status": status("0-7"),
            "proc/self/cgroup": V1_CGROUP,
            "proc/self/mountinfo": V1_MOUNTINFO,
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": quota + "\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpuset/cpuset.cpus": cpus + "\n",
            "sys/fs/cgroup/cpuset/cpuset.effective_cpus": cpus + "\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": memory,
        },
    )


def v2_tree(root: Path) -> Path:
    return make_tree(
        root,
        {
            "proc/self/status": status("0-7"),
            "proc/self/cgroup": V2_CGROUP,
            "proc/self/mountinfo": V2_MOUNTINFO,
            "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
            "sys/fs/cgroup/kubepods/cpu.max": "max 100000\n",
            "sys/fs/cgroup/kubepods/pod1/cpu.max": "200000 100000\n",  # the pod holds the limit
            "sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "max 100000\n",
            "sys/fs/cgroup/kubepods/pod1/memory.max": f"{GIB}\n",
            "sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
            "sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus": "\n",  # empty: inherits
            "sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective": "0-7\n",
        },
    )


EIGHT = CpuInfo(online_cpus=tuple(range(8)), logical_cpus=8)
RAM = Memory(total_bytes=16 * GIB)


def limits(root: Path, cpu: CpuInfo = EIGHT, memory: Memory = RAM):  # type: ignore[no-untyped-def]
    issues = IssueLog()
    return probe_limits(root, issues, cpu, memory, live=False), list(issues)


# --- pure parsers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("max 100000", None), ("150000 100000", 1.5), ("50000", 0.5), ("max", None)],
)
def test_cpu_max(text: str, cpus: float | None) -> None:
    assert parse_cpu_max(text) == cpus


@pytest.mark.parametrize("text", ["", "1 2 3", "lots 100000", "100 0"])
def test_cpu_max_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_max(text)


@pytest.mark.parametrize("text", ["max 999", "0 100000", "999 100000", "1000 999"])
def test_cpu_max_below_the_kernels_1_ms_minimum_is_none_it_wrote(text: str) -> None:
    """The kernel refuses a quota or period under 1 ms (sched-bwc.rst): "999 100000" was read
    as 0.00999 CPUs and "max 0" as no quota, values no kernel shows."""
    with pytest.raises(ValueError, match="below the kernel's minimum of 1 ms"):
        parse_cpu_max(text)
    assert parse_cpu_max("1000 100000") == 0.01  # the smallest quota the kernel takes
    with pytest.raises(ValueError, match="period 0 is not positive"):
        parse_cpu_max("max 0")  # was "no quota"


@pytest.mark.parametrize(
    ("quota", "period"), [("1", "100000"), ("999", "100000"), ("5000", "999")]
)
def test_cfs_quota_below_the_kernels_1_ms_minimum_is_none_it_wrote(
    quota: str, period: str
) -> None:
    with pytest.raises(ValueError, match="below the kernel's minimum of 1 ms"):
        parse_cfs_quota(quota, period)


def test_cfs_quota() -> None:
    assert parse_cfs_quota("-1\n", "100000\n") is None
    assert parse_cfs_quota("50000\n", "100000\n") == 0.5
    assert parse_cfs_quota("250000", "100000") == 2.5
    with pytest.raises(ValueError):
        parse_cfs_quota("50000", "0")


def test_memory_limit_sentinels() -> None:
    assert parse_memory_limit(V1_UNLIMITED, 1) is None
    assert parse_memory_limit("9223372036854710272", 1) is None  # the 64 KiB-page sentinel
    assert parse_memory_limit("536870912\n", 1) == 512 << 20
    assert parse_memory_limit("max\n", 2) is None
    assert parse_memory_limit("1073741824\n", 2) == GIB
    with pytest.raises(ValueError):
        parse_memory_limit("max", 1)


def test_proc_cgroup_lines_and_errors() -> None:
    issues = IssueLog()
    found = parse_proc_cgroup(V1_CGROUP + "garbage\n0::/\n", issues)
    assert [(m.hierarchy, m.controllers, m.path) for m in found] == [
        (12, ("memory",), "/docker/abc"),
        (4, ("cpu", "cpuacct"), "/docker/abc"),
        (3, ("cpuset",), "/docker/abc"),
        (0, (), "/"),
    ]
    [issue] = list(issues)
    assert (issue.path, issue.line) == ("proc/self/cgroup", 5)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("1::/", "hierarchy 1 with no controllers; cgroup2 is 0::PATH"),
        ("0:cpu:/", "hierarchy 0 is cgroup2, which lists no controllers"),
    ],
)
def test_a_line_mixing_v1_and_v2_is_malformed(line: str, why: str) -> None:
    issues = IssueLog()
    assert parse_proc_cgroup(f"{line}\n0::/ok\n", issues) == [Membership(0, (), "/ok", 2)]
    [issue] = list(issues)
    assert (issue.path, issue.line) == ("proc/self/cgroup", 1) and why in issue.reason


def test_a_membership_without_cpu_cpuset_or_memory_is_named_as_the_reason(
    tmp_path: Path,
) -> None:
    # Go's runtime (internal/runtime/cgroup, parseCPURelativePath) finds no CPU cgroup in such a
    # file; the directories were never looked for, so the issue names the file, not sys/fs/cgroup.
    root = make_tree(
        tmp_path,
        {
            "proc/self/cgroup": "2:blkio:/a/b/blkio\n1:name=systemd:/a\n",
            "proc/self/mountinfo": "56 22 0:40 / /sys/fs/cgroup/blkio rw - cgroup cgroup blkio\n",
            "sys/fs/cgroup/blkio/a/b/blkio/blkio.weight": "100\n",
        },
    )
    issues = IssueLog()
    assert read_cgroup_limits(root, issues) == CgroupLimits()
    [issue] = list(issues)
    assert issue.path == "proc/self/cgroup"
    assert "lists no cpu, cpuset or memory controller and no cgroup2 line" in issue.reason


def test_mountinfo_cgroup_lines_only_and_escapes() -> None:
    spaced = "40 30 0:31 / /sys/fs/cgroup/with\\040space rw - cgroup2 cgroup2 rw\n"
    text = V1_MOUNTINFO + spaced + "bad\n"
    issues = IssueLog()
    mounts = parse_mountinfo(text, issues)
    assert [m.mount_point for m in mounts] == [
        "/sys/fs/cgroup/cpu,cpuacct",
        "/sys/fs/cgroup/cpuset",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/systemd",
        "/sys/fs/cgroup/with space",
    ]
    assert mounts[0].controllers == ("cpu", "cpuacct")
    assert mounts[3].controllers == ()  # name=systemd is not a controller
    assert mounts[4].version == 2
    assert [(i.path, i.line) for i in issues] == [("proc/self/mountinfo", 8)]


def test_translate() -> None:
    mount = Mount(root="/docker/abc", mount_point="/sys/fs/cgroup/cpu", version=1, controllers=())
    assert translate(mount, "/docker/abc") == "/sys/fs/cgroup/cpu"
    assert translate(mount, "/docker/abc/sub") == "/sys/fs/cgroup/cpu/sub"
    assert translate(mount, "/other") is None


def test_affinity_from_status() -> None:
    issues = IssueLog()
    assert parse_affinity(status("0-3,8-11"), issues) == (0, 1, 2, 3, 8, 9, 10, 11)
    assert parse_affinity("Cpus_allowed_list:\t3-1\n", issues) is None
    assert parse_affinity("Name:\tx\n", issues) is None
    where = [(i.path, i.line) for i in issues]
    assert where == [("proc/self/status", 1), ("proc/self/status", None)]


# --- trees ----------------------------------------------------------------------------------


def test_v1_container_quota_binds(tmp_path: Path) -> None:
    hw, issues = limits(v1_tree(tmp_path, quota="150000"))
    assert issues == []
    assert hw.cgroup_version == 1
    assert hw.cgroup_path == "/docker/abc"
    assert hw.cpuset_cpus == (0, 1, 2, 3)
    assert hw.usable_cpus == (0, 1, 2, 3)
    assert hw.cpu_quota == 1.5
    assert hw.effective_cpus == 1  # floor(1.5)
    assert "cgroup quota 1.5 CPUs" in hw.effective_cpus_reason
    assert "cpu.cfs_quota_us" in hw.effective_cpus_reason
    assert "< 4 usable CPUs" in hw.effective_cpus_reason
    assert hw.memory_limit_bytes is None
    assert hw.memory_bytes == 16 * GIB


def test_v1_cpuset_and_memory_limit(tmp_path: Path) -> None:
    hw, _ = limits(v1_tree(tmp_path, cpus="2-3", memory=f"{GIB}\n"))
    assert hw.usable_cpus == (2, 3)
    assert hw.effective_cpus == 2
    assert "cpuset 2-3" in hw.effective_cpus_reason
    assert hw.cpu_quota is None
    assert hw.memory_limit_bytes == GIB
    assert hw.memory_bytes == GIB  # min(MemTotal, limit)


def test_v2_quota_from_an_ancestor(tmp_path: Path) -> None:
    hw, issues = limits(v2_tree(tmp_path))
    assert issues == []
    assert hw.cgroup_version == 2
    assert hw.cgroup_path == "/kubepods/pod1/ctr"
    assert hw.cpu_quota == 2.0
    assert hw.effective_cpus == 2
    assert "sys/fs/cgroup/kubepods/pod1/cpu.max" in hw.effective_cpus_reason
    assert hw.cpuset_cpus == tuple(range(8))
    assert hw.memory_limit_bytes == GIB


def test_v2_most_restrictive_ancestor_wins(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    (tmp_path / "sys/fs/cgroup/kubepods/cpu.max").write_text("350000 100000\n")
    (tmp_path / "sys/fs/cgroup/kubepods/pod1/ctr/cpu.max").write_text("300000 100000\n")
    hw, _ = limits(tmp_path)
    assert hw.cpu_quota == 2.0


def test_quota_never_below_one_cpu(tmp_path: Path) -> None:
    hw, _ = limits(v1_tree(tmp_path, quota="30000"))
    assert hw.cpu_quota == pytest.approx(0.3)
    assert hw.effective_cpus == 1


def test_quota_that_does_not_bind(tmp_path: Path) -> None:
    hw, _ = limits(v1_tree(tmp_path, quota="800000"))
    assert hw.cpu_quota == 8.0
    assert hw.effective_cpus == 4
    assert "does not bind" in hw.effective_cpus_reason


def test_hybrid_host_uses_the_v1_controllers(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            "proc/self/status": status("0-1"),
            "proc/self/cgroup": "4:memory:/user\n2:cpu:/\n1:cpuset:/\n0::/user.slice\n",
            "proc/self/mountinfo": (
                "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
                "34 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
                "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
            ),
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpuset/cpuset.cpus": "0-1\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
            "sys/fs/cgroup/memory/user/memory.limit_in_bytes": "1073741824\n",
            "sys/fs/cgroup/unified/user.slice/cgroup.procs": "",
        },
    )
    hw, issues = limits(tmp_path, CpuInfo(online_cpus=(0, 1)))
    assert issues == []
    assert (hw.cgroup_version, hw.cgroup_path) == (1, "/")
    assert hw.effective_cpus == 2
    assert hw.memory_limit_bytes == GIB


def test_without_mountinfo_the_usual_layout_is_tried(tmp_path: Path) -> None:
    v1_tree(tmp_path, quota="50000")
    (tmp_path / "proc/self/mountinfo").unlink()
    # The usual host layout: the cgroup path appears below the controller's mount point.
    (tmp_path / "proc/self/cgroup").write_text("4:cpu,cpuacct:/\n3:cpuset:/\n")
    hw, issues = limits(tmp_path)
    assert hw.cpu_quota == 0.5
    assert hw.effective_cpus == 1
    assert [i.path for i in issues] == ["proc/self/mountinfo"]


def test_only_cpuinfo_still_works(tmp_path: Path) -> None:
    make_tree(tmp_path, {"proc/cpuinfo": "processor\t: 0\n\nprocessor\t: 1\n"})
    hw, issues = limits(tmp_path, CpuInfo(logical_cpus=2))
    assert hw.usable_cpus == (0, 1)
    assert hw.effective_cpus == 2
    assert hw.cgroup_version is None
    assert hw.effective_cpus_reason == "2 online CPUs (affinity and cgroup unknown)"
    assert {i.path for i in issues} == {"proc/self/status", "proc/self/cgroup"}


def test_malformed_cgroup_files_are_issues(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    (tmp_path / "sys/fs/cgroup/kubepods/pod1/cpu.max").write_text("lots of cpu\n")
    (tmp_path / "sys/fs/cgroup/kubepods/pod1/memory.max").write_text("huge\n")
    (tmp_path / "sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective").write_text("0-x\n")
    hw, issues = limits(tmp_path)
    assert hw.cpu_quota is None and hw.memory_limit_bytes is None and hw.cpuset_cpus is None
    assert {i.path for i in issues} == {
        "sys/fs/cgroup/kubepods/pod1/cpu.max",
        "sys/fs/cgroup/kubepods/pod1/memory.max",
        "sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective",
    }


def test_missing_cgroup_directory_is_an_issue(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    (tmp_path / "proc/self/cgroup").write_text("0::/gone\n")
    hw, issues = limits(tmp_path)
    assert hw.cgroup_version is None
    assert any("missing" in i.reason and i.path == "sys/fs/cgroup/gone" for i in issues)


def test_affinity_narrows_and_says_so(tmp_path: Path) -> None:
    v1_tree(tmp_path, cpus="0-7")
    (tmp_path / "proc/self/status").write_text(status("4-5"))
    hw, _ = limits(tmp_path)
    assert hw.affinity_cpus == (4, 5)
    assert hw.usable_cpus == (4, 5)
    assert hw.effective_cpus_reason.startswith("2 of 8 online CPUs usable: affinity 4-5")


def test_disjoint_lists_fall_back_with_an_issue() -> None:
    issues = IssueLog()
    usable, count, _ = effective_cpus((0, 1), (2, 3), CgroupLimits(), issues)
    assert usable == (0, 1) and count == 2
    assert "empty" in next(iter(issues)).reason


def test_no_cpu_list_at_all() -> None:
    issues = IssueLog()
    assert effective_cpus(None, None, CgroupLimits(), issues)[1] == 1
    assert len(issues) == 1


def test_reads_files_under_root_only(tmp_path: Path) -> None:
    # An empty root must not fall through to this machine's /proc.
    assert read_cgroup_limits(tmp_path, IssueLog()) == CgroupLimits()


cpu_sets = st.sets(st.integers(0, 63), max_size=64).map(lambda s: tuple(sorted(s)))


@given(
    online=cpu_sets,
    affinity=st.none() | cpu_sets,
    cpuset=st.none() | cpu_sets,
    quota=st.none() | st.floats(0.01, 128, allow_nan=False),
)
def test_effective_cpus_properties(
    online: tuple[int, ...],
    affinity: tuple[int, ...] | None,
    cpuset: tuple[int, ...] | None,
    quota: float | None,
) -> None:
    group = CgroupLimits(cpuset_cpus=cpuset, cpu_quota=quota, cpu_quota_source="cpu.max")
    usable, count, reason = effective_cpus(online or None, affinity, group, IssueLog())
    assert count >= 1 and reason
    assert count <= max(1, len(usable))
    if quota is not None:
        assert count <= max(1, int(quota))
    expected = set(online or range(64))
    for limit in (affinity, cpuset):
        if limit is not None:
            expected &= set(limit)
    if expected and online:
        assert set(usable) == expected


# --- hostile and unusual trees (found by reading the probe end to end) -----------------------


def test_a_relative_root_reads_the_cgroup_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v2_tree(tmp_path / "snap")
    monkeypatch.chdir(tmp_path)
    issues = IssueLog()
    got = read_cgroup_limits(Path("snap"), issues)
    assert (got.version, got.cpu_quota, got.memory_limit_bytes) == (2, 2.0, GIB), list(issues)
    hw, _ = limits(Path("snap"))
    assert hw.effective_cpus == 2
    assert detect("snap", gpus=False, tensorflow=False).limits.effective_cpus == 2


@pytest.mark.parametrize("path", ["/" + "a" * 300, "/" + "a/" * 2000])
def test_an_overlong_cgroup_path_is_an_issue_not_a_lost_probe(tmp_path: Path, path: str) -> None:
    v2_tree(tmp_path)
    (tmp_path / "proc/self/cgroup").write_text(f"0::{path}\n")
    hw, issues = limits(tmp_path)
    assert hw.affinity_cpus == tuple(range(8))  # the rest of the probe survives
    assert hw.effective_cpus == 8
    assert any(i.probe == "cgroup" and "cgroup directory" in i.reason for i in issues), issues
    assert not any("unexpectedly" in i.reason for i in issues)


def test_a_cgroup_deeper_than_any_real_one_is_unknown_not_walked(tmp_path: Path) -> None:
    """Before: every level of the chain was read, each file reached by openat from the root
    one component at a time: a cgroup 2,000 levels deep under a mount point 2,000 deep, each
    within PATH_MAX, took detect 2 minutes; 1,000 and 1,000, 30 s. Past MAX_CGROUP_LEVELS
    its limits are unknown, with an issue naming the membership file."""
    from hwtune.probes.cgroup import MAX_CGROUP_LEVELS

    point = "/".join(["m"] * 200)
    deep = "/".join(["l"] * (MAX_CGROUP_LEVELS + 1))
    make_tree(
        tmp_path,
        {
            "proc/self/status": status("0-7"),
            "proc/self/cgroup": f"0::/{deep}\n",
            "proc/self/mountinfo": f"35 24 0:30 / /{point} rw - cgroup2 cgroup2 rw\n",
            f"{point}/cpu.max": "200000 100000\n",
            f"{point}/{deep}/cpu.max": "max 100000\n",
        },
    )
    hw, issues = limits(tmp_path)
    assert hw.cpu_quota is None and hw.effective_cpus == 8
    said = [(i.path, i.reason) for i in issues]
    assert any(
        p == "proc/self/cgroup" and f"is {MAX_CGROUP_LEVELS + 1} levels below the mount" in r
        for p, r in said
    ), said
    levels = "/".join(["l"] * MAX_CGROUP_LEVELS)
    (tmp_path / "proc/self/cgroup").write_text(f"0::/{levels}\n")
    assert limits(tmp_path)[0].cpu_quota == 2.0  # one level less is read, to the mount


def _deny_reads(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """The cgroup probe's reads of a path ending in `suffix` fail with EACCES."""
    import hwtune.probes.cgroup as cgroup

    real = cgroup.root_read_text

    def deny(root: Path, path: str | Path, limit: int = cgroup.MAX_SMALL) -> str:
        if str(path).endswith(suffix):
            raise PermissionError(13, "Permission denied", str(path))
        return real(root, path, limit)

    monkeypatch.setattr(cgroup, "root_read_text", deny)


def test_an_unreadable_quota_file_is_an_issue_not_no_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Denied as an LSM or a dying disk would deny it (EACCES, EIO): root reads any mode."""
    v2_tree(tmp_path)
    _deny_reads(monkeypatch, "kubepods/pod1/cpu.max")
    _, issues = limits(tmp_path)
    assert any(
        i.path == "sys/fs/cgroup/kubepods/pod1/cpu.max" and "Permission denied" in i.reason
        for i in issues
    ), issues


def test_a_cgroup_outside_the_namespace_is_not_read_as_inside(tmp_path: Path) -> None:
    """`0::/..`: the process sits above its cgroup namespace's root (cgroup_namespaces(7)); the
    quota visible at the mount point belongs to a child, not to this process."""
    make_tree(
        tmp_path,
        {
            "proc/self/status": status("0-7"),
            "proc/self/cgroup": "0::/..\n",
            "proc/self/mountinfo": V2_MOUNTINFO,
            "sys/fs/cgroup/cgroup.controllers": "cpu\n",
            "sys/fs/cgroup/cpu.max": "100000 100000\n",
        },
    )
    issues = IssueLog()
    got = read_cgroup_limits(tmp_path, issues)
    assert got.cpu_quota is None
    assert any("outside hwtune's own cgroup namespace" in i.reason for i in issues)
    assert translate(Mount("/", "/sys/fs/cgroup", 2, ()), "/../x") is None
    assert translate(Mount("/", "/sys/fs/cgroup", 2, ()), "/..") is None


def test_many_malformed_lines_give_a_bounded_number_of_issues(tmp_path: Path) -> None:
    junk = "x\n" * 200_000
    issues = IssueLog()
    parse_mountinfo(junk, issues)
    kept = list(issues)
    assert len(kept) <= 101
    assert kept[-1].reason.startswith(f"{200_000 - 100} more issues")
    make_tree(tmp_path, {"proc/cpuinfo": junk})
    hw = detect(tmp_path, gpus=False, tensorflow=False)
    cpuinfo = [i for i in hw.issues if i.path == "proc/cpuinfo"]
    assert 1 < len(cpuinfo) <= 101
    assert any("more problems up to line" in i.reason for i in cpuinfo)


def test_one_issue_or_problem_over_the_limit_reads_singular() -> None:
    from hwtune.probes.cpuinfo import MAX_PROBLEMS, ParseProblem, ProblemList
    from hwtune.probes.issues import MAX_PER_FILE

    issues = IssueLog()
    for line in range(MAX_PER_FILE + 1):
        issues.add("cgroup", "bad line", "proc/self/mountinfo", line)
    assert list(issues)[-1].reason == "1 more issue in this file, not listed"
    problems = ProblemList()
    for line in range(MAX_PROBLEMS + 1):
        problems.append(ParseProblem(line, "bad line"))
    assert problems[-1].reason == f"1 more problem up to line {MAX_PROBLEMS}, not listed"


def test_a_flood_of_cgroup2_mounts_is_one_issue(tmp_path: Path) -> None:
    """Every mount was tried, with an issue per controller and mount: 20,000 mounts gave 60,001
    issues in 6 s, 200,000 ran over a minute. Now a bounded number are tried, one issue."""
    mounts = "".join(
        f"{i + 100} 23 0:26 / /sys/fs/cgroup/x{i} rw,relatime shared:4 - cgroup2 cgroup2 rw\n"
        for i in range(5000)
    )
    make_tree(
        tmp_path,
        {"proc/self/status": status("0-7"), "proc/self/cgroup": "0::/a\n"},
    )
    (tmp_path / "proc/self/mountinfo").write_text(mounts)
    (tmp_path / "sys/fs/cgroup/x0").mkdir(parents=True)
    hw, issues = limits(tmp_path)
    assert [(i.path, i.reason) for i in issues] == [
        (
            "sys/fs/cgroup/x0/a",
            "cpu, cpuset, memory: cgroup directory /sys/fs/cgroup/x0/a is missing "
            f"({MAX_MOUNT_TRIES} of 5000 cgroup2 mounts tried): its limits are unknown",
        )
    ]
    assert hw.effective_cpus == 8 and hw.cgroup_version is None


def test_a_v1_controller_listed_but_not_mounted_leaves_its_quota_unknown(tmp_path: Path) -> None:
    v1_tree(tmp_path, quota="150000")
    mountinfo = tmp_path / "proc/self/mountinfo"
    mountinfo.write_text(
        "".join(line + "\n" for line in V1_MOUNTINFO.splitlines() if "cpu,cpuacct" not in line)
    )
    hw, issues = limits(tmp_path)
    assert [(i.path, i.reason) for i in issues] == [
        (
            "proc/self/mountinfo",
            "cpu: proc/self/cgroup line 2 lists it, but no cgroup v1 mount holds it: "
            "its limits are unknown",
        )
    ]
    assert hw.cpu_quota is None
    assert hw.effective_cpus_reason.endswith("; cgroup CPU quota unknown")
    assert detect(tmp_path, gpus=False, tensorflow=False).issues  # so --strict exits 3


def test_an_empty_proc_cgroup_is_an_issue(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    (tmp_path / "proc/self/cgroup").write_text("")
    hw, issues = limits(tmp_path)
    assert [(i.path, i.reason) for i in issues] == [
        ("proc/self/cgroup", "empty: cgroup membership unknown; no cgroup limits applied")
    ]
    assert hw.cgroup_version is None and "(cgroup unknown)" in hw.effective_cpus_reason


def test_a_v1_quota_without_its_period_is_unknown_not_none(tmp_path: Path) -> None:
    v1_tree(tmp_path, quota="150000")
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us").unlink()
    hw, issues = limits(tmp_path)
    assert [(i.path, i.reason) for i in issues] == [
        (
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us",
            "missing next to sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us, which sets a quota: "
            "the quota is unknown",
        )
    ]
    assert hw.cpu_quota is None and hw.effective_cpus == 4
    assert hw.effective_cpus_reason.endswith("; cgroup CPU quota unknown")


def test_no_quota_needs_no_period(tmp_path: Path) -> None:
    v1_tree(tmp_path, quota="-1")
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us").unlink()
    hw, issues = limits(tmp_path)
    assert issues == [] and hw.effective_cpus_reason.endswith("; no cgroup CPU quota")


@pytest.mark.parametrize(("period", "why"), [("0", "period 0 is not positive"), ("x", "'x'")])
def test_a_bad_period_is_reported_against_the_period_file(
    tmp_path: Path, period: str, why: str
) -> None:
    v1_tree(tmp_path, quota="150000")
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us").write_text(period + "\n")
    hw, issues = limits(tmp_path)
    [issue] = issues
    assert issue.path == "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"
    assert issue.reason.startswith("unreadable CPU period: ") and why in issue.reason
    assert hw.effective_cpus_reason.endswith("; cgroup CPU quota unknown")


def test_a_mount_from_outside_the_cgroup_namespace_is_not_taken_for_the_cgroup(
    tmp_path: Path,
) -> None:
    """`unshare -C` without a remount: the process's cgroup reads "/" and the mount's root
    "/../.." (cgroup_namespaces(7)). The mount point is an ancestor two levels up, whose "no
    quota" was reported while the process ran under a 1.5-CPU quota."""
    make_tree(
        tmp_path,
        {
            "proc/self/status": status("0-7"),
            "proc/self/cgroup": "1:cpu:/\n",
            "proc/self/mountinfo": (
                "32 31 0:29 /../.. /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
            ),
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",  # the host's root cgroup
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        },
    )
    hw, issues = limits(tmp_path)
    assert hw.cpu_quota is None
    assert "no cgroup CPU quota" not in hw.effective_cpus_reason
    [issue] = issues
    assert issue.path == "proc/self/mountinfo"
    assert "has root /../..: it was mounted outside this process's cgroup namespace" in (
        issue.reason
    )


def test_an_unreadable_quota_makes_the_quota_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1_tree(tmp_path, quota="150000")
    _deny_reads(monkeypatch, "cpu.cfs_quota_us")
    hw, _ = limits(tmp_path)
    assert hw.effective_cpus_reason.endswith("; cgroup CPU quota unknown")


def test_a_cpuset_disjoint_from_the_online_cpus_is_not_called_a_narrowing() -> None:
    cgroup = CgroupLimits(version=1, cpuset_cpus=(7,), cpuset_source="cpuset.cpus")
    usable, count, reason = effective_cpus((0, 1), (0, 1), cgroup, IssueLog())
    assert (usable, count) == ((0, 1), 2)
    assert reason.startswith(
        "2 CPUs: online ∩ affinity ∩ cpuset is empty (cpuset 7 (cpuset.cpus)); "
        "the online list used"
    )
    assert "of 2 online CPUs usable" not in reason


def test_a_quota_below_one_cpu_binds_one_cpu() -> None:
    cgroup = CgroupLimits(version=2, cpu_quota=0.5, cpu_quota_source="cpu.max")
    _, count, reason = effective_cpus((0,), (0,), cgroup, IssueLog())
    assert count == 1
    assert reason == "cgroup quota 0.5 CPUs (cpu.max) < 1 usable CPU; floored to 1 (at least 1)"
