"""Detection on other projects' captured trees: prometheus/node_exporter and prometheus/procfs.

The trees are theirs (tests/data/procfs/SOURCES.md), laid out from `.ttar` archives by
tests/ttar.py; every expected value below is read from the fixture entry named beside it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hwtune.models.hardware import CpuInfo, Memory, NumaNode
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.memory import probe_memory
from hwtune.probes.numa import probe_numa
from hwtune.probes.sysfs_cpu import read_sysfs_cpu

from .ttar import TtarError, extract

DATA = Path(__file__).parent / "data" / "procfs"
KIB = 1024


class Probed:
    def __init__(self, root: Path) -> None:
        issues = IssueLog()
        self.cpu: CpuInfo = probe_cpu(root, issues)
        self.numa: tuple[NumaNode, ...] = probe_numa(root, issues, self.cpu)
        self.memory: Memory = probe_memory(root, issues)
        self.issues = [(i.probe, i.path, i.reason) for i in issues]

    def places(self) -> list[tuple[int, int | None, int | None, int | None]]:
        return [(c.cpu, c.socket, c.core, c.node) for c in self.cpu.topology]


def node_exporter_tree(root: Path) -> Path:
    """node_exporter's sys.ttar (its `sys/` prefix kept) with its proc/cpuinfo and meminfo."""
    extract((DATA / "node_exporter-sys-devices-system.ttar").read_text(), root)
    (root / "proc").mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / "node_exporter-proc-cpuinfo", root / "proc/cpuinfo")
    shutil.copy(DATA / "node_exporter-meminfo", root / "proc/meminfo")
    return root


def cpuinfo_tree(root: Path, name: str) -> Path:
    (root / "proc").mkdir(parents=True)
    shutil.copy(DATA / name, root / "proc/cpuinfo")
    return root


# --- the archive format ---------------------------------------------------------------------


def test_ttar_markers(tmp_path: Path) -> None:
    # procfs proc.ttar `proc/26231/cmdline`: "vimNULLBYTEtest.goNULLBYTE+10NULLBYTEEOF"
    archive = (
        "Directory: d\nMode: 755\n# ttar - - -\n"
        "Path: d/cmdline\nLines: 1\nvimNULLBYTEtest.goNULLBYTE+10NULLBYTEEOF\nMode: 644\n"
        "Path: d/online\nLines: 1\n1EOF\nMode: 644\n"
        "Path: d/empty_line\nLines: 1\n\nMode: 644\n"
        "Path: d/empty\nLines: 0\nMode: 644\n"
        "Path: d/escaped\nLines: 1\nno \\EOF here, \\NULLBYTE neither\nMode: 644\n"
        "Path: d/link\nSymlinkTo: online\n"
    )
    extract(archive, tmp_path)
    assert (tmp_path / "d/cmdline").read_bytes() == b"vim\0test.go\0+10\0"
    assert (tmp_path / "d/online").read_bytes() == b"1"
    assert (tmp_path / "d/empty_line").read_bytes() == b"\n"
    assert (tmp_path / "d/empty").read_bytes() == b""
    assert (tmp_path / "d/escaped").read_bytes() == b"no EOF here, NULLBYTE neither\n"
    assert (tmp_path / "d/link").read_bytes() == b"1"


@pytest.mark.parametrize("name", ["/etc/x", "../x", "a/../../x"])
def test_ttar_stays_inside(tmp_path: Path, name: str) -> None:
    with pytest.raises(TtarError):
        extract(f"Path: {name}\nLines: 1\nx\nMode: 644\n", tmp_path / "dest")
    assert not (tmp_path / "x").exists()


# --- node_exporter: a two-socket machine with a memory-only NUMA node ------------------------


def test_node_exporter_topology(tmp_path: Path) -> None:
    got = Probed(node_exporter_tree(tmp_path))
    # sys/devices/system/cpu/online "0-3"; cpuN/topology/physical_package_id 0,0,1,1 and
    # core_id 0,1,0,1 (no sibling lists: one thread per core); node0/cpulist "0-1",
    # node1/cpulist "2-3".
    assert got.cpu.online_cpus == (0, 1, 2, 3)
    assert (got.cpu.sockets, got.cpu.physical_cores, got.cpu.logical_cpus) == (2, 4, 4)
    assert got.cpu.threads_per_core == 1
    assert got.places() == [(0, 0, 0, 0), (1, 0, 1, 0), (2, 1, 2, 1), (3, 1, 3, 1)]
    assert got.cpu.topology_basis == "sysfs: sockets from physical_package_id"


def test_node_exporter_numa(tmp_path: Path) -> None:
    got = Probed(node_exporter_tree(tmp_path))
    # nodeN/meminfo "Node N MemTotal:": 134182340, 134217728 and 134217728 kB;
    # node2/cpulist is an empty line: a node with memory and no CPUs.
    assert [(n.id, n.cpus, n.memory_bytes, n.cpus_known) for n in got.numa] == [
        (0, (0, 1), 134182340 * KIB, True),
        (1, (2, 3), 134217728 * KIB, True),
        (2, (), 134217728 * KIB, True),
    ]


def test_node_exporter_memory(tmp_path: Path) -> None:
    got = Probed(node_exporter_tree(tmp_path))
    # meminfo: "MemTotal: 3742148 kB", "Hugepagesize: 2048 kB", no MemAvailable line; the
    # tree has no sys/kernel/mm/transparent_hugepage.
    assert got.memory == Memory(
        total_bytes=3742148 * KIB, available_bytes=None, hugepage_size_bytes=2048 * KIB
    )
    assert ("memory", "proc/meminfo", "MemAvailable missing") in got.issues
    assert any(p == "sys/kernel/mm/transparent_hugepage/enabled" for _, p, _ in got.issues)


def test_node_exporter_cpuinfo_alone(tmp_path: Path) -> None:
    got = Probed(cpuinfo_tree(tmp_path, "node_exporter-proc-cpuinfo"))
    cpu = got.cpu
    # 8 records: vendor_id GenuineIntel, cpu family 6, model 142, stepping 10, physical id 0,
    # siblings 8, cpu cores 4, core id 0-3 then 0-3 again (CPUs 4-7 are the second threads).
    assert (cpu.arch, cpu.vendor, cpu.family, cpu.model, cpu.stepping) == (
        "x86_64",
        "GenuineIntel",
        6,
        142,
        10,
    )
    assert cpu.model_name == "Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz"
    assert (cpu.sockets, cpu.physical_cores, cpu.logical_cpus, cpu.threads_per_core) == (
        1,
        4,
        8,
        2,
    )
    assert [(c.cpu, c.core) for c in cpu.topology] == [(n, n % 4) for n in range(8)]
    assert {"avx2", "fma", "vme", "md_clear"} <= set(cpu.flags) and "avx512f" not in cpu.flags


# --- procfs's cpuinfo_test.go captures -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arch", "vendor", "model_name", "logical", "flags"),
    [
        # "CPU part : 0xd08" (Cortex-A72), 4 "processor" records, Features line.
        ("arm7", "armv7l", "ARM", "Cortex-A72", 4, {"neon", "vfpv4", "crc32", "lpae"}),
        # "CPU part : 0xc07" (Cortex-A7), 2 records, one Features line after them.
        ("arm7-legacy", "armv7l", "ARM", "Cortex-A7", 2, {"swp", "thumbee", "idivt"}),
        # "CPU part : 0xb36" (ARM1136); a uniprocessor kernel prints no "processor" line.
        ("arm7-legacy-v1", "armv7l", "ARM", "ARM1136", None, {"java", "vfp"}),
        # "vendor_id : IBM/S390", "# processors : 4", "features : esan3 zarch ... vx sie".
        ("s390x", "s390x", "IBM/S390", None, 4, {"zarch", "vx", "te"}),
        # 6 records "cpu : POWER7 (architected), altivec supported".
        ("ppc64", "ppc64", "IBM", "POWER7 (architected), altivec supported", 6, set()),
        # 2 records "cpu model : Cavium Octeon+ V0.1"; no vendor line.
        ("mips", "mips", None, "Cavium Octeon+ V0.1", 2, set()),
    ],
)
def test_procfs_cpuinfo_captures(
    tmp_path: Path,
    name: str,
    arch: str,
    vendor: str | None,
    model_name: str | None,
    logical: int | None,
    flags: set[str],
) -> None:
    cpu = Probed(cpuinfo_tree(tmp_path, f"cpuinfo/{name}")).cpu
    assert (cpu.arch, cpu.vendor, cpu.model_name, cpu.logical_cpus) == (
        arch,
        vendor,
        model_name,
        logical,
    )
    assert flags <= set(cpu.flags)


def test_procfs_cpuinfo_microarch(tmp_path: Path) -> None:
    # s390x "machine = 2964" is a z13; ppc64 "pvr 003f 0201" is POWER7.
    s390 = Probed(cpuinfo_tree(tmp_path / "s", "cpuinfo/s390x")).cpu
    power = Probed(cpuinfo_tree(tmp_path / "p", "cpuinfo/ppc64")).cpu
    assert (s390.microarch, power.microarch) == ("z13", "power7")


# --- procfs: a hand-made devices/system with no `online` file --------------------------------


def procfs_tree(root: Path) -> Path:
    """procfs's devices.ttar holds `devices/...`: it goes under `sys/`."""
    extract((DATA / "procfs-sys-devices-system.ttar").read_text(), root / "sys")
    return cpuinfo_tree(root, "node_exporter-proc-cpuinfo")


def test_procfs_online_cpus_without_online_file(tmp_path: Path) -> None:
    got = Probed(procfs_tree(tmp_path))
    # devices/system/cpu: directories cpu0, cpu1, cpu2 (cpu2 empty), `offline` "2", no
    # `online` or `present`; thread_siblings_list "0,4" and "1,5" name CPUs 4 and 5, which have
    # no directory. Online: 0 and 1, on package 0 (physical_package_id), cores 0 and 1.
    assert got.cpu.online_cpus == (0, 1)
    assert got.cpu.logical_cpus == 3
    assert [(c.cpu, c.socket, c.core) for c in got.cpu.topology] == [(0, 0, 0), (1, 0, 1)]
    assert (got.cpu.sockets, got.cpu.physical_cores) == (1, 2)
    reasons = {(path, reason.split(":")[0]) for _, path, reason in got.issues}
    assert ("sys/devices/system/cpu/online", "missing") in reasons
    assert ("sys/devices/system/cpu/offline", "CPU 2 is offline") in reasons
    assert any("CPUs 4-5" in reason for _, _, reason in got.issues)


def test_cpufreq_max_per_cpu(tmp_path: Path) -> None:
    # procfs: cpufreq/policy0/cpuinfo_max_freq "2400000" (related_cpus "0"), and cpu1/cpufreq
    # a directory of its own (the layout before policyN) with cpuinfo_max_freq "3300000".
    procfs = read_sysfs_cpu(procfs_tree(tmp_path / "procfs"))
    assert procfs is not None and procfs.max_khz == {0: 2_400_000, 1: 3_300_000}
    # node_exporter: cpuN/cpufreq hold scaling_max_freq (a policy limit, 3700000 and 4200000)
    # and no cpuinfo_max_freq: the hardware maximum is unknown, not the limit.
    node_exporter = read_sysfs_cpu(node_exporter_tree(tmp_path / "ne"))
    assert node_exporter is not None and node_exporter.max_khz == {}


def test_numa_files_missing_are_said(tmp_path: Path) -> None:
    # procfs: devices/system/node/node1 and node2 hold only `vmstat` (no cpulist, meminfo or
    # distance); node_exporter: node0-node2 have cpulist and meminfo, no distance.
    procfs = Probed(procfs_tree(tmp_path / "procfs"))
    assert [(n.id, n.memory_bytes, n.distances, n.cpus_known) for n in procfs.numa] == [
        (1, None, (), False),
        (2, None, (), False),
    ]
    said = {reason for probe, _, reason in procfs.issues if probe == "numa"}
    assert "node1, node2: no meminfo file: memory size unknown" in said
    assert "node1, node2: no distance file: distances unknown" in said
    node_exporter = Probed(node_exporter_tree(tmp_path / "ne"))
    said = {reason for probe, _, reason in node_exporter.issues if probe == "numa"}
    assert said == {"node0, node1, node2: no distance file: distances unknown"}


def test_an_intel_part_that_is_no_hybrid_keeps_one_core_type(tmp_path: Path) -> None:
    # procfs's tree gives CPU 0 2.4 GHz and CPU 1 3.3 GHz (test_cpufreq_max_per_cpu); with
    # node_exporter's cpuinfo that is an i7-8650U (family 6, model 142 = 0x8e), a Kaby Lake
    # R with one core type, which the frequency gap alone made "1 P-core, 1 E-core".
    got = Probed(procfs_tree(tmp_path))
    assert got.cpu.core_types == ()
    assert {c.kind for c in got.cpu.topology} == {None}
    said = [reason for probe, _, reason in got.issues if "top frequencies differ" in reason]
    assert said == ["the CPUs' top frequencies differ (2 groups), but model 6:0x8e is no Intel "
                    "hybrid part: one core type"]  # fmt: skip
