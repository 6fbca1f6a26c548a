"""The CPU budget probe on other projects' cgroup test data (tests/data/cgroup, SOURCES.md there).

Each case is a root tree holding files copied verbatim from another project's tests, plus the
files their test did not need. The expected answer is that project's, cited per case; where
hwtune answers differently on purpose, the case says why.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from hwtune.probes.cgroup import find_controllers, read_cgroup_limits, translate
from hwtune.probes.cgroup_text import (
    Membership,
    Mount,
    parse_cpu_max,
    parse_mountinfo,
    parse_proc_cgroup,
)
from hwtune.probes.issues import IssueLog
from hwtune.probes.limits import effective_cpus
from tests.conftest import DATA

CGROUP_DATA = DATA / "cgroup"
ONLINE = tuple(range(8))


class Case(NamedTuple):
    name: str  # the directory under tests/data/cgroup
    effective: int  # CPUs left on 8 online CPUs
    quota: float | None = None
    quota_source: str | None = None
    quota_unknown: bool = False
    issue: tuple[str, str] | None = None  # (file named, words in the reason): the only issue
    dirs: dict[str, str] | None = None  # controller -> its cgroup directory, as expected
    extra: dict[str, str] | None = None  # files the test adds to a copy of the tree


V2_MAX = "sys/fs/cgroup/cpu.max"
SSHD = "system.slice/system-sshd.slice/sshd@126-10.240.0.15:22-xxx.yyy.zzz.aaa:33678.service"

CASES = [
    # automaxprocs cgroups_test.go TestNewCGroups: cpu at the mount point whose root is the
    # cgroup, cpuset at a root mount, memory one level below its mount; the second memory mount
    # (a bind of the file memory.vmstat) is not taken. The cpu quota is automaxprocs' "cpu" 6.0.
    Case(
        "automaxprocs-v1-docker",
        effective=4,  # cpuset 0-3 binds before the 6-CPU quota
        quota=6.0,
        quota_source="sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
        dirs={
            "cpu": "sys/fs/cgroup/cpu,cpuacct",
            "cpuset": "sys/fs/cgroup/cpuset",
            "memory": "sys/fs/cgroup/memory/large",
        },
    ),
    # automaxprocs cgroups2_test.go TestCGroupsCPUQuotaV2: "set" is 2.5 CPUs (no trailing
    # newline, accepted); each malformed file is an error there, an issue naming the file in
    # hwtune.
    Case("automaxprocs-v2-set", effective=2, quota=2.5, quota_source=V2_MAX),
    Case(
        "automaxprocs-v2-invalid-max",
        effective=8,
        quota_unknown=True,
        issue=(V2_MAX, "unreadable CPU quota: quota 'asdf' is not a whole number"),
    ),
    Case(
        "automaxprocs-v2-invalid-period",
        effective=8,
        quota_unknown=True,
        issue=(V2_MAX, "unreadable CPU quota: period 'njn' is not a whole number"),
    ),
    Case(
        "automaxprocs-v2-too-many-fields",
        effective=8,
        quota_unknown=True,
        issue=(V2_MAX, "expected '$MAX $PERIOD', got '250000 100000 100'"),
    ),
    Case(
        "automaxprocs-v2-zero-period",
        effective=8,
        quota_unknown=True,
        issue=(V2_MAX, "period 0 is not positive"),
    ),
    # TestCGroup2GroupPathDiscovery: "0::/Example" is the group /Example under /sys/fs/cgroup;
    # the "foo" file system at /sys/fs/foo in the same mountinfo is not a cgroup2 mount.
    Case(
        "automaxprocs-v2-cgroup-subdir",
        effective=1,
        quota=1.5,
        quota_source="sys/fs/cgroup/Example/cpu.max",
        dirs={c: "sys/fs/cgroup/Example" for c in ("cpu", "cpuset", "memory")},
    ),
    # TestCGroup2GroupPathDiscovery_Errors "no matching subsystem": "1::/" is no cgroup2 line
    # (ErrNotV2), and, lacking a controller list, no v1 line either (cgroups(7)).
    Case(
        "automaxprocs-v2-cgroup-no-match",
        effective=8,
        issue=("proc/self/cgroup", "(hierarchy 1 with no controllers; cgroup2 is 0::PATH)"),
    ),
    # TestCGroup2GroupPathDiscovery_Errors "invalid subsystems": an error naming the format.
    Case(
        "automaxprocs-v2-cgroup-invalid",
        effective=8,
        issue=("proc/self/cgroup", "not a cgroup line: '0\\\\using\\\\colons\\\\/'"),
    ),
    # golang/go cgroup_test.go TestParseCPUMount and TestParseCPURelativePath: v1 is the cpu
    # mount plus the cpu line's path; v2 the cgroup2 mount plus the 0:: path; "mixed" (a v1 cpu
    # line and a 0:: line) is v1. go-mixed's v2 directory holds 7 CPUs, so taking it would show.
    Case(
        "go-v1",
        effective=5,
        quota=5.0,
        quota_source="sys/fs/cgroup/cpu/a/b/cpu/cpu.cfs_quota_us",
        dirs={"cpu": "sys/fs/cgroup/cpu/a/b/cpu"},
    ),
    Case(
        "go-v2",
        effective=2,
        quota=2.5,
        quota_source="sys/fs/cgroup/a/b/c/cpu.max",
        dirs={c: "sys/fs/cgroup/a/b/c" for c in ("cpu", "cpuset", "memory")},
    ),
    Case(
        "go-mixed",
        effective=1,
        quota=0.5,
        quota_source="sys/fs/cgroup/cpu/a/b/cpu/cpu.cfs_quota_us",
        dirs={
            "cpu": "sys/fs/cgroup/cpu/a/b/cpu",
            "cpuset": "sys/fs/cgroup/a/b/v2",  # no v1 cpuset line: the v2 group
            "memory": "sys/fs/cgroup/a/b/v2",
        },
    ),
    # "v2-escaped": the mount point /sys/fs/cgroup/tab\011tab is unescaped to a tab.
    Case(
        "go-v2-escaped",
        effective=3,
        quota=3.0,
        quota_source="sys/fs/cgroup/tab\ttab/cpu.max",
        extra={"sys/fs/cgroup/tab\ttab/cpu.max": "300000 100000\n"},
    ),
    # TestParseV2Limit "MaxInt64": MaxInt64 over MaxInt64 is 1 CPU.
    Case(
        "go-v2-maxint64",
        effective=1,
        quota=1.0,
        quota_source="sys/fs/cgroup/a/b/c/cpu.max",
    ),
    # opencontainers/cgroups utils_test.go TestGetCgroupMounts: on the Fedora host every v1
    # controller is at /sys/fs/cgroup/<name> with root "/" (the cifs line has spaces in its
    # super options); TestParseCgroupString: the CoreOS membership paths hold colons.
    Case(
        "runc-fedora-coreos",
        effective=1,  # 1.5 CPUs of quota on the 6 CPUs of cpuset 0-5
        quota=1.5,
        quota_source=f"sys/fs/cgroup/cpu,cpuacct/{SSHD}/cpu.cfs_quota_us",
        dirs={
            "cpu": f"sys/fs/cgroup/cpu,cpuacct/{SSHD}",
            "cpuset": "sys/fs/cgroup/cpuset",
            "memory": f"sys/fs/cgroup/memory/{SSHD}",
        },
    ),
    # TestGetCgroupMounts, systemdMountinfo: inside a docker container every mount's root is
    # the container's scope, so the scope is the mount point itself.
    Case(
        "runc-systemd-docker",
        effective=2,
        quota=2.0,
        quota_source="sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
        dirs={
            "cpu": "sys/fs/cgroup/cpu,cpuacct",
            "cpuset": "sys/fs/cgroup/cpuset",
            "memory": "sys/fs/cgroup/memory",
        },
    ),
    # TestIgnoreCgroup2Mount: the cgroup2 mount at /sys/fs/cgroup/systemd is not a v1
    # controller's; cpu is v1, and its 3.5-CPU quota is on the ancestor user.slice (the cgroup2
    # group's cpu.max of 1 CPU must not be read).
    Case(
        "runc-hybrid-cgroup2",
        effective=3,
        quota=3.5,
        quota_source="sys/fs/cgroup/cpu,cpuacct/user.slice/cpu.cfs_quota_us",
        dirs={
            "cpu": "sys/fs/cgroup/cpu,cpuacct/user.slice/user-1000.slice/session-2.scope",
            "cpuset": "sys/fs/cgroup/cpuset",
            "memory": "sys/fs/cgroup/memory/user.slice/user-1000.slice/session-2.scope",
        },
    ),
    # tikv cgroup.rs test_cgroup_sys: memory at /sys/fs/cgroup/memory and cpu at
    # /sys/fs/cgroup/cpu,cpuacct, the mount roots being the pod's cgroup; quota -1 is none.
    Case(
        "tikv-kubepods-v1",
        effective=8,
        dirs={"cpu": "sys/fs/cgroup/cpu,cpuacct", "memory": "sys/fs/cgroup/memory"},
    ),
    # tikv test_mountinfo_with_relative_path: TiKV folds the root /../../../../../.. to "/" and
    # reads /sys/fs/cgroup, expecting no limit. hwtune differs on purpose: that root is an
    # ancestor of the process's cgroup namespace (cgroup_namespaces(7)), so /sys/fs/cgroup is
    # some other cgroup (its 2-CPU cpu.max here is not this process's) and the limits are
    # unknown, with an issue.
    Case(
        "tikv-relative-root",
        effective=8,
        quota_unknown=True,
        issue=("proc/self/mountinfo", "mounted outside this process's cgroup namespace"),
    ),
]


def _root(case: Case, tmp_path: Path) -> Path:
    root = CGROUP_DATA / case.name
    if case.extra:
        root = Path(shutil.copytree(root, tmp_path / case.name))
        for relative, text in case.extra.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text)
    return root


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cpu_budget_on_other_projects_data(case: Case, tmp_path: Path) -> None:
    root = _root(case, tmp_path)
    issues = IssueLog()
    cgroup = read_cgroup_limits(root, issues)
    _, count, reason = effective_cpus(ONLINE, None, cgroup, issues)
    assert (cgroup.cpu_quota, cgroup.cpu_quota_source) == (case.quota, case.quota_source)
    assert cgroup.cpu_quota_unknown is case.quota_unknown
    assert count == case.effective, reason
    said = [(i.path, i.reason) for i in issues]
    if case.issue is None:
        assert said == []
    else:
        path, words = case.issue
        assert len(said) == 1 and said[0][0] == path and words in said[0][1], said


@pytest.mark.parametrize("case", [c for c in CASES if c.dirs], ids=lambda c: c.name)
def test_cgroup_directories_are_the_ones_the_other_project_finds(
    case: Case, tmp_path: Path
) -> None:
    root = _root(case, tmp_path)
    found = find_controllers(root, IssueLog()) or {}
    assert {name: str(d.chain[0].relative_to(root)) for name, d in found.items()} == case.dirs


# automaxprocs subsys_test.go TestNewCGroupSubsysFromLine and ...Err; the third path holds colons.
CRI_PATH = (
    "/system.slice/containerd.service/kubepods-besteffort-podb41662f7_b03a_4c65_8ef9_"
    "6e4e55c3cf27.slice:cri-containerd:1753b7cbbf62734d812936961224d5bc0cf8f45214e0d5cdd1a781a053e7c48f"
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1:cpu:/", (1, ("cpu",), "/")),
        (
            "8:cpu,cpuacct,cpuset:/docker/1234567890abcdef",
            (8, ("cpu", "cpuacct", "cpuset"), "/docker/1234567890abcdef"),
        ),
        (f"12:cpu,cpuacct:{CRI_PATH}", (12, ("cpu", "cpuacct"), CRI_PATH)),
        ("1:cpu", None),
        ("not-a-number:cpu:/", None),
    ],
)
def test_proc_cgroup_lines_of_automaxprocs(
    line: str, expected: tuple[int, tuple[str, ...], str] | None
) -> None:
    issues = IssueLog()
    found = parse_proc_cgroup(line + "\n", issues)
    if expected is None:
        assert found == [] and [i.line for i in issues] == [1]
    else:
        assert found == [Membership(*expected, line=1)] and not list(issues)


# automaxprocs mountpoint_test.go TestMountPointTranslate and ...TranslateError.
DOCKER_CPU = Mount("/docker/0123456789abcdef", "/sys/fs/cgroup/cpu", 1, ("cpu",))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/docker/0123456789abcdef", "/sys/fs/cgroup/cpu"),
        ("/docker/0123456789abcdef/", "/sys/fs/cgroup/cpu"),
        (
            "/docker/0123456789abcdef/large/cpu.cfs_quota_us",
            "/sys/fs/cgroup/cpu/large/cpu.cfs_quota_us",
        ),
        ("/", None),
        ("/docker", None),
        ("/docker/0123456789abcdef-let-me-hack-this-path", None),
        ("/docker/0123456789abcde/abc/../../def", None),
        ("/system.slice/docker.service", None),
    ],
)
def test_translate_as_automaxprocs(path: str, expected: str | None) -> None:
    assert translate(DOCKER_CPU, path) == expected


# golang/go cgroup_test.go TestParseV2Limit: a unit on either number is an error. (Go also
# refuses a lone "500000" and a missing newline; hwtune takes both, as automaxprocs' "only-max"
# and "set" do, and as cgroup-v2.rst allows a lone $MAX.)
@pytest.mark.parametrize(
    ("text", "why"),
    [("500000us 100000\n", "quota '500000us'"), ("500000 100000us\n", "period '100000us'")],
)
def test_cpu_max_with_units_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_cpu_max(text)


def test_a_mountinfo_line_longer_than_gos_buffer_hides_no_mount() -> None:
    # TestParseCPUMount "v2-longline": an overlay line longer than Go's 69,632-byte scratch
    # buffer (cgroup_linux.go ScratchSize) before the cgroup2 line, built as Go builds it.
    lower = "/so/many/overlay/layers"
    long_lower = lower
    while len(long_lower) < 4096 + 4 * 4 * 4096:
        long_lower += f":{lower}{long_lower.count(':')}"
    text = (
        "21 22 0:20 / /sys rw,nosuid,nodev,noexec - sysfs sysfs rw\n"
        "262 31 0:72 / /tmp/overlay2/0143e063b02f/merged rw,relatime shared:729 - overlay "
        f"overlay rw,lowerdir={long_lower},upperdir=/tmp/diff,workdir=/tmp/work\n"
        "25 21 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw\n"
    )
    issues = IssueLog()
    assert parse_mountinfo(text, issues) == [Mount("/", "/sys/fs/cgroup", 2, ())]
    assert not list(issues)
