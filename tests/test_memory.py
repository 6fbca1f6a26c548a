"""probe_memory on real /proc/meminfo text, partial trees, malformed files, and this machine."""

from __future__ import annotations

from pathlib import Path

from hwtune.probes.issues import IssueLog
from hwtune.probes.memory import parse_meminfo, parse_thp_mode, probe_memory

MEMINFO = """\
MemTotal:       24684084 kB
MemFree:        23523352 kB
MemAvailable:   24128812 kB
Buffers:            4292 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""


def tree(
    root: Path, meminfo: str | None = MEMINFO, thp: str | None = "always [madvise] never\n"
) -> Path:
    if meminfo is not None:
        (root / "proc").mkdir(parents=True, exist_ok=True)
        (root / "proc/meminfo").write_text(meminfo)
    if thp is not None:
        thp_dir = root / "sys/kernel/mm/transparent_hugepage"
        thp_dir.mkdir(parents=True, exist_ok=True)
        (thp_dir / "enabled").write_text(thp)
    return root


def test_parse_meminfo_units() -> None:
    values = parse_meminfo(MEMINFO, IssueLog())
    assert values["MemTotal"] == 24684084 * 1024
    assert values["HugePages_Total"] == 0  # a count, not kB
    assert values["Hugepagesize"] == 2 << 20


def test_thp_mode() -> None:
    assert parse_thp_mode("always [madvise] never\n") == "madvise"
    assert parse_thp_mode("[always] madvise never") == "always"
    assert parse_thp_mode("always madvise never") is None


def test_probe_memory_from_a_tree(tmp_path: Path) -> None:
    issues = IssueLog()
    memory = probe_memory(tree(tmp_path), issues)
    assert memory.total_bytes == 24684084 * 1024
    assert memory.available_bytes == 24128812 * 1024
    assert memory.hugepage_size_bytes == 2 << 20
    assert memory.transparent_hugepages == "madvise"
    assert list(issues) == []


def test_missing_files_are_issues(tmp_path: Path) -> None:
    issues = IssueLog()
    memory = probe_memory(tmp_path, issues)
    assert memory.total_bytes is None and memory.transparent_hugepages is None
    assert {i.path for i in issues} == {
        "proc/meminfo",
        "sys/kernel/mm/transparent_hugepage/enabled",
    }


def test_malformed_lines_name_the_line(tmp_path: Path) -> None:
    issues = IssueLog()
    text = MEMINFO.replace("Buffers:            4292 kB", "Buffers: lots") + "Odd: 3 MB\n"
    memory = probe_memory(tree(tmp_path, meminfo=text, thp="never\n"), issues)
    assert memory.total_bytes == 24684084 * 1024  # the good lines still count
    assert [(i.path, i.line) for i in issues] == [
        ("sys/kernel/mm/transparent_hugepage/enabled", 1),
        ("proc/meminfo", 4),
        ("proc/meminfo", 7),
    ]


def test_old_kernel_without_memavailable(tmp_path: Path) -> None:
    issues = IssueLog()
    memory = probe_memory(tree(tmp_path, meminfo="MemTotal: 1024 kB\n"), issues)
    assert memory.total_bytes == 1 << 20 and memory.available_bytes is None
    assert [i.reason for i in issues] == ["MemAvailable missing"]


def test_this_machine() -> None:
    issues = IssueLog()
    memory = probe_memory(Path("/"), issues)
    first = Path("/proc/meminfo").read_text().splitlines()[0].split()
    assert first[0] == "MemTotal:"
    assert memory.total_bytes == int(first[1]) * 1024
    assert memory.available_bytes is not None and 0 < memory.available_bytes <= memory.total_bytes
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        assert f"[{memory.transparent_hugepages}]" in thp.read_text()
    assert list(issues) == []
