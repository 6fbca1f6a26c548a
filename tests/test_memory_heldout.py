"""The memory probe on other projects' /proc/meminfo texts (tests/data/memory, SOURCES.md there),
the cgroup memory limit's "no limit" forms, and the THP switch under each path and mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.models.hardware import CpuInfo
from hwtune.probes.cgroup_text import parse_memory_limit
from hwtune.probes.issues import IssueLog
from hwtune.probes.limits import probe_limits
from hwtune.probes.memory import parse_meminfo, probe_memory
from tests.conftest import DATA

MEMORY_DATA = DATA / "memory"
KIB = 1024
UPSTREAM_THP = "sys/kernel/mm/transparent_hugepage/enabled"
RHEL6_THP = "sys/kernel/mm/redhat_transparent_hugepage/enabled"


def _root(tmp_path: Path, meminfo: str, thp: dict[str, str] | None = None) -> Path:
    (tmp_path / "proc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/meminfo").write_text(meminfo)
    for relative, text in (thp or {UPSTREAM_THP: "always [madvise] never\n"}).items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("name", "total_kib", "available_kib", "issues"),
    [
        # psutil expects available 6574984 kB: the kernel's MemAvailable, not an estimate.
        ("psutil-avail-old-comes-from-kernel", 16325648, 6574984, []),
        # No MemAvailable (before Linux 3.14): psutil estimates free + cached; hwtune reports
        # it unknown rather than guess (only the report shows it).
        ("psutil-avail-old-missing-zoneinfo", 16325648, None, ["MemAvailable missing"]),
        # MemAvailable -1 kB is no meminfo value (the kernel clamps at 0): refused, line named.
        (
            "psutil-warnings-on-misses",
            16325648,
            None,
            ["not a meminfo line: 'MemAvailable:         -1 kB'", "MemAvailable missing"],
        ),
        ("psutil-virtual-memory-mocked", 100, 3, []),
    ],
)
def test_psutil_meminfo(
    name: str,
    total_kib: int,
    available_kib: int | None,
    issues: list[str],
    tmp_path: Path,
) -> None:
    log = IssueLog()
    memory = probe_memory(_root(tmp_path, (MEMORY_DATA / name).read_text()), log)
    assert memory.total_bytes == total_kib * KIB
    assert memory.available_bytes == (None if available_kib is None else available_kib * KIB)
    assert [i.reason for i in log] == issues


def test_psutil_hugepage_size() -> None:
    log = IssueLog()
    values = parse_meminfo((MEMORY_DATA / "psutil-virtual-memory-mocked").read_text(), log)
    assert values["Hugepagesize"] == 45 * KIB
    assert values["DirectMap48G"] == 48 * KIB
    assert list(log) == []


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("[always] madvise never\n", "always"),
        ("always [madvise] never\n", "madvise"),
        ("always madvise [never]\n", "never"),
    ],
)
def test_thp_modes(text: str, mode: str, tmp_path: Path) -> None:
    log = IssueLog()
    memory = probe_memory(
        _root(tmp_path, "MemTotal: 1 kB\nMemAvailable: 1 kB\n", {UPSTREAM_THP: text}), log
    )
    assert memory.transparent_hugepages == mode
    assert list(log) == []


@pytest.mark.parametrize(
    ("text", "mode"), [("[always] never\n", "always"), ("always [never]\n", "never")]
)
def test_rhel6_thp_path(text: str, mode: str, tmp_path: Path) -> None:
    """RHEL 6 has only redhat_transparent_hugepage/enabled; before the fix the mode was
    "unknown: file missing" there."""
    log = IssueLog()
    memory = probe_memory(
        _root(tmp_path, "MemTotal: 1 kB\nMemAvailable: 1 kB\n", {RHEL6_THP: text}), log
    )
    assert memory.transparent_hugepages == mode
    assert list(log) == []


def test_upstream_thp_path_wins(tmp_path: Path) -> None:
    log = IssueLog()
    thp = {UPSTREAM_THP: "always madvise [never]\n", RHEL6_THP: "[always] never\n"}
    memory = probe_memory(_root(tmp_path, "MemTotal: 1 kB\nMemAvailable: 1 kB\n", thp), log)
    assert memory.transparent_hugepages == "never"


def test_no_thp_file_names_the_upstream_path(tmp_path: Path) -> None:
    log = IssueLog()
    root = tmp_path / "r"
    (root / "proc").mkdir(parents=True)
    (root / "proc/meminfo").write_text("MemTotal: 1 kB\nMemAvailable: 1 kB\n")
    probe_memory(root, log)
    assert [(i.path, i.reason) for i in log] == [
        (UPSTREAM_THP, "transparent hugepage mode unknown: file missing")
    ]


@pytest.mark.parametrize(
    ("text", "version", "limit"),
    [
        ("9223372036854771712\n", 1, None),  # PAGE_COUNTER_MAX, 4 KiB pages
        ("9223372036854710272\n", 1, None),  # PAGE_COUNTER_MAX, 64 KiB pages
        ("9223372036854775807\n", 1, None),  # LONG_MAX
        ("max\n", 2, None),
        ("4294967296\n", 1, 4 << 30),
        ("4294967296\n", 2, 4 << 30),
    ],
)
def test_memory_limit_forms(text: str, version: int, limit: int | None) -> None:
    assert parse_memory_limit(text, version) == limit  # type: ignore[arg-type]


def _v2_tree(root: Path, memory_max: str, mem_total_kib: int) -> Path:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/meminfo").write_text(
        f"MemTotal: {mem_total_kib} kB\nMemAvailable: {mem_total_kib // 2} kB\n"
    )
    (root / "proc/self/cgroup").write_text("0::/job\n")
    (root / "proc/self/mountinfo").write_text(
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"
    )
    (root / "sys/fs/cgroup/job").mkdir(parents=True)
    (root / "sys/fs/cgroup/job/memory.max").write_text(memory_max)
    (root / "sys/fs/cgroup/job/cgroup.controllers").write_text("cpu memory\n")
    return root


@pytest.mark.parametrize(
    ("memory_max", "mem_total_kib", "limit", "chosen"),
    [
        # lxcfs: MemTotal inside the container is the limit itself; both agree.
        ("2147483648\n", 2 << 20, 2 << 30, 2 << 30),
        # A limit above RAM does not bind: RAM is what the job can use.
        ("68719476736\n", 8 << 20, 64 << 30, 8 << 30),
        ("max\n", 8 << 20, None, 8 << 30),
    ],
)
def test_limit_chosen(
    memory_max: str, mem_total_kib: int, limit: int | None, chosen: int, tmp_path: Path
) -> None:
    root = _v2_tree(tmp_path, memory_max, mem_total_kib)
    log = IssueLog()
    memory = probe_memory(root, log)
    limits = probe_limits(root, log, CpuInfo(logical_cpus=4), memory, live=False)
    assert limits.memory_limit_bytes == limit
    assert limits.memory_bytes == chosen
