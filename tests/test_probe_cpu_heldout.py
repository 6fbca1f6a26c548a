"""util-linux's `lscpu` test expectations (tests/expected/lscpu/*) that hwtune had not been
checked against, laid out as `ROOT/lscpu.txt` (captures in tests/data/cpu, sources in its
SOURCES.md). Each expected value is read from the capture; the comment beside it names the line.
These old dumps print no Architecture line and often no Flags line, so identity is what their
Vendor ID / CPU family / ISA / Machine type lines allow, and nothing more.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from hwtune.models.hardware import CpuInfo, NumaNode
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.numa import probe_numa
from tests.conftest import DATA

CAPTURES = DATA / "cpu"


class Want(NamedTuple):
    arch: str | None  # None: the capture cannot tell (not asserted)
    sockets: int | None
    cores: int | None
    logical: int | None
    threads: int | None
    online: int
    nodes: tuple[int, ...] | None  # CPUs per NUMA node, by id; None: no NUMA lines at all


WANT = {
    # "Vendor ID: AuthenticAMD", "CPU op-mode(s): 32-bit, 64-bit"; "Socket(s): 2",
    # "Core(s) per socket: 4", "Thread(s) per core: 2", "CPU(s): 16", "On-line CPU(s) list:
    # 0-15", "NUMA node0..3 CPU(s): 0-3, 4-7, 8-11, 12-15".
    "utillinux-vmware_fpe.lscpu": Want("x86_64", 2, 8, 16, 2, 16, (4, 4, 4, 4)),
    # "ISA: rv64imafdc"; "Socket(s): 1", "CPU(s): 2". Its summary and Core column say one core
    # of two threads, but the -p rows "0,0,0,,,0,0,0" and "1,0,0,,,1,1,0" give CPUs 0 and 1
    # their own L1d and L1i (a U74-MC has no SMT): two cores, one thread each. No NUMA lines.
    "utillinux-rv64-linux.lscpu": Want("riscv64", 1, 2, 2, 1, 2, None),
    # "Socket(s): 4", "Core(s) per socket: 8", "Thread(s) per core: 2", "CPU(s): 64";
    # "NUMA node(s): 1" whose "NUMA node0 CPU(s)" lists the 32 even CPUs only.
    "utillinux-x86_64-64cpu.lscpu": Want("x86_64", 4, 32, 64, 2, 64, (32,)),
    # The rest passed unchanged. x86 with "CPU op-mode(s): 32-bit, 64-bit" (or "64-bit") is
    # x86_64; without that line or a Flags line the dump cannot say (arch None, not asserted).
    # "Socket(s): 1", "Core(s) per socket: 4", "Thread(s) per core: 2", "NUMA node0 CPU(s): 0-7".
    "utillinux-x86_64-64cpu-linux6.2.lscpu": Want("x86_64", 1, 4, 8, 2, 8, (8,)),
    # "Socket(s): 1", "Core(s) per socket: 2", "Thread(s) per core: 2", "NUMA node0 CPU(s): 0-3".
    "utillinux-x86_64-dell_e4310.lscpu": Want("x86_64", 1, 2, 4, 2, 4, (4,)),
    # "CPU socket(s): 2" (util-linux < 2.19's key), "Core(s) per socket: 4", "Thread(s) per
    # core: 2", "CPU(s): 16", "NUMA node0/1 CPU(s)": the even / odd CPUs.
    "utillinux-x86_64-dell_poweredgeR610.lscpu": Want("x86_64", 2, 8, 16, 2, 16, (8, 8)),
    "utillinux-x86_64-dellr710.lscpu": Want("x86_64", 2, 8, 16, 2, 16, (8, 8)),
    # "CPU socket(s): 8", "Core(s) per socket: 1", "Thread(s) per core: 1"; no NUMA lines and
    # an empty Node column; "Hypervisor vendor: Xen".
    "utillinux-x86_64-el5xen.lscpu": Want("x86_64", 8, 8, 8, 1, 8, None),
    # "CPU op-mode(s): 64-bit", "CPU socket(s): 4", "Core(s) per socket: 4", four NUMA lines.
    "utillinux-x86_64-hpdl585.lscpu": Want("x86_64", 4, 16, 16, 1, 16, (4, 4, 4, 4)),
    # No op-mode line; "CPU socket(s): 1", "Core(s) per socket: 2"; rows' Node 0 for both.
    "utillinux-x86_64-ibme326m.lscpu": Want(None, 1, 2, 2, 1, 2, (2,)),
    # No op-mode line; "Core(s) per socket: 1", "Thread(s) per core: 2"; rows' Node 0.
    "utillinux-x86_64-necem14.lscpu": Want(None, 1, 1, 2, 2, 2, (2,)),
    # "Socket(s): 1", "Core(s) per socket: 2", "Thread(s) per core: 1", "NUMA node0 CPU(s): 0,1".
    "utillinux-vbox-win.lscpu": Want("x86_64", 1, 2, 2, 1, 2, (2,)),
    # No op-mode line; "CPU socket(s): 2", "Core(s) per socket: 4"; no NUMA lines.
    "utillinux-i386-amdshanghai.lscpu": Want(None, 2, 8, 8, 1, 8, None),
    # No op-mode line; "CPU socket(s): 1", "Core(s) per socket: 1", "Thread(s) per core: 2".
    "utillinux-i386-dellpe700.lscpu": Want(None, 1, 1, 2, 2, 2, None),
    # "CPU op-mode(s): 32-bit, 64-bit", "CPU socket(s): 2", "Core(s) per socket: 4".
    "utillinux-i386-intels5000phb.lscpu": Want("x86_64", 2, 8, 8, 1, 8, None),
    # No Vendor ID, Model name or Flags: the architecture is unknown. "Socket(s): 1",
    # "Core(s) per socket: 2", "Thread(s) per core: 1".
    "utillinux-armv7.lscpu": Want("unknown", 1, 2, 2, 1, 2, None),
    # "CPU family: Loongson-64bit"; "Socket(s): 32", "Core(s) per socket: 1",
    # "NUMA node0 CPU(s): 0-31".
    "utillinux-loongarch-kvm_on_loongson_3c6000.lscpu": Want(
        "loongarch64", 32, 32, 32, 1, 32, (32,)
    ),
    # "Vendor ID: 0x5b7" (T-Head's mvendorid) and no ISA line: riscv64, the width every Linux
    # T-Head core has. "Socket(s): 1", "Core(s) per socket: 64", four "NUMA nodeN CPU(s)" lines
    # of 16 CPUs.
    "utillinux-rv64-milkvpioneer.lscpu": Want("riscv64", 1, 64, 64, 1, 64, (16, 16, 16, 16)),
    # "Vendor ID: IBM/S390"; "Socket(s) per book: 1", "Book(s): 3", "Core(s) per socket: 1".
    "utillinux-s390-kvm.lscpu": Want("s390x", 3, 3, 3, 1, 3, None),
    # "Socket(s) per book: 1", "Book(s): 4", "Core(s) per socket: 1".
    "utillinux-s390-zvm.lscpu": Want("s390x", 4, 4, 4, 1, 4, None),
    # "Socket(s) per book: 1", "Book(s) per drawer: 1", "Drawer(s): 2", "NUMA node0 CPU(s): 0,1".
    "utillinux-s390-nested-virt.lscpu": Want("s390x", 2, 2, 2, 1, 2, (2,)),
    # Its summary's 3 x 2 x 4 sockets of 8 cores is the LPAR's virtual layout, not 8 CPUs; the
    # -p rows put CPUs 0-2 on Socket 0 and 3-7 on Socket 1, each its own Core; node0 of
    # "NUMA node0 CPU(s): 0-140" holds the 8 that exist.
    "utillinux-s390-lpar-drawer.lscpu": Want("s390x", 2, 8, 8, 1, 8, (8,)),
    # No Flags or Model name: the architecture is unknown. "CPU(s): 32", "On-line CPU(s) list:
    # 0-23", "Thread(s) per core: 4", "CPU socket(s): 6"; node0 holds the 24 online CPUs.
    "utillinux-sparc64-UltraSparc-T1.lscpu": Want("unknown", 6, 6, 32, 4, 24, (24,)),
    # Itanium: "Vendor ID: GenuineIntel" with "CPU family: Itanium 2" (no x86 prints a name).
    # "CPU socket(s): 8", "Core(s) per socket: 2", "Thread(s) per core: 1", "CPU(s): 16"; the
    # -p rows' Node column: CPUs 0-7 on node 0, 8-15 on node 1 ("NUMA node(s): 2").
    "utillinux-ia64-pg0.lscpu": Want("ia64", 8, 16, 16, 1, 16, (8, 8)),
    # "CPU socket(s): 2", "Core(s) per socket: 1", "CPU(s): 2"; rows' Node 0 for both.
    "utillinux-ia64-hprx1620.lscpu": Want("ia64", 2, 2, 2, 1, 2, (2,)),
    # "CPU socket(s): 8", "Core(s) per socket: 1", "CPU(s): 8"; "NUMA node0 CPU(s): 4-7",
    # "NUMA node1 CPU(s): 0-3", "NUMA node2 CPU(s):" (empty: a memory-only node).
    "utillinux-ia64-hpmatterhorn.lscpu": Want("ia64", 8, 8, 8, 1, 8, (4, 4, 0)),
}


def probe(tmp_path: Path, name: str) -> tuple[CpuInfo, tuple[NumaNode, ...], list[str]]:
    shutil.copy(CAPTURES / name, tmp_path / "lscpu.txt")
    issues = IssueLog()
    cpu = probe_cpu(tmp_path, issues)
    numa = probe_numa(tmp_path, issues, cpu)
    return cpu, numa, [f"{i.probe}: {i.reason}" for i in issues]


@pytest.mark.parametrize("name", sorted(WANT))
def test_heldout_lscpu_capture(tmp_path: Path, name: str) -> None:
    want = WANT[name]
    cpu, numa, issues = probe(tmp_path, name)
    if want.arch is not None:
        assert cpu.arch == want.arch
    got = (cpu.sockets, cpu.physical_cores, cpu.logical_cpus, cpu.threads_per_core)
    assert got == (want.sockets, want.cores, want.logical, want.threads)
    assert len(cpu.online_cpus) == want.online
    assert cpu.smt_enabled == (want.threads > 1 if want.threads else None)
    if want.nodes is None:
        assert any(i.startswith("numa: no NUMA information") for i in issues), issues
    else:
        assert tuple(len(n.cpus) for n in sorted(numa, key=lambda n: n.id)) == want.nodes


def test_bulldozer_module_is_one_core_of_two_threads(tmp_path: Path) -> None:
    # lscpu-vmware_fpe's first -p section: "0,0,0,0,,0,0,0,0" and "1,0,0,0,,1,0,0,0" -- one
    # Core, their own L1d (0, 1), one L1i (0): a module's two integer cores, siblings to the
    # kernel. The L1d alone must not split them.
    cpu, _, issues = probe(tmp_path, "utillinux-vmware_fpe.lscpu")
    by_cpu = {c.cpu: c.core for c in cpu.topology}
    assert by_cpu[0] == by_cpu[1] != by_cpu[2]
    assert not [i for i in issues if "thread(s) per core" in i]


def test_rows_that_contradict_the_summary_say_so(tmp_path: Path) -> None:
    cpu, _, issues = probe(tmp_path, "utillinux-rv64-linux.lscpu")
    assert cpu.threads_per_core == 1
    assert (
        "cpu: the summary says 2 thread(s) per core, but the -p/-e rows give 1 (CPUs with "
        "their own L1i cache are separate cores): the rows are used"
    ) in issues


def test_lscpu_e_cache_cell_keys_cores_by_l1i(tmp_path: Path) -> None:
    # The same module as `lscpu -e` prints it (L1d:L1i:L2:L3 cells, sys-utils/lscpu.c).
    text = "CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE\n" + "".join(
        f"{cpu:3d}    0      0 {cpu // 2:4d} {cpu}:{cpu // 2}:{cpu // 2}:0          yes\n"
        for cpu in range(4)
    )
    (tmp_path / "lscpu.txt").write_text(text)
    cpu = probe_cpu(tmp_path, IssueLog())
    assert (cpu.physical_cores, cpu.threads_per_core) == (2, 2)


@pytest.mark.parametrize("name", [n for n in WANT if "-ia64-" in n])
def test_itanium_is_not_x86(tmp_path: Path, name: str) -> None:
    cpu, _, issues = probe(tmp_path, name)
    assert (cpu.arch, cpu.vendor, cpu.microarch, cpu.x86_64_level) == (
        "ia64",
        "GenuineIntel",
        None,
        None,
    )
    assert any("Itanium (ia64) is not supported" in i for i in issues)


def test_itanium_cpuinfo_is_ia64(tmp_path: Path) -> None:
    # The record arch/ia64/kernel/setup.c show_cpuinfo() prints (no public capture at hand):
    # "vendor", not x86's "vendor_id", and "arch : IA-64".
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(
        "processor  : 0\nvendor     : GenuineIntel\narch       : IA-64\nfamily     : 32\n"
        "model      : 1\nmodel name : Dual-Core Intel(R) Itanium(R) Processor 9140M\n"
        "revision   : 1\narchrev    : 0\nfeatures   : branchlong, 16-byte atomic ops\n"
        "cpu number : 0\ncpu regs   : 4\ncpu MHz    : 1669.000\nitc MHz    : 416.875000\n"
        "BogoMIPS   : 3325.95\n\n"
    )
    cpu = probe_cpu(tmp_path, IssueLog())
    assert (cpu.arch, cpu.vendor) == ("ia64", "GenuineIntel")
    assert cpu.model_name == "Dual-Core Intel(R) Itanium(R) Processor 9140M"


def test_online_cpus_in_no_listed_node_are_named(tmp_path: Path) -> None:
    # lscpu-x86_64-64cpu: node0 lists 0,2,...,62 and the -p rows ("1,1,1,,,1,1,1,1") leave the
    # odd CPUs' Node empty: their node is unknown, and an issue must say which they are.
    _, numa, issues = probe(tmp_path, "utillinux-x86_64-64cpu.lscpu")
    assert [n.cpus for n in numa] == [tuple(range(0, 64, 2))]
    odd = ",".join(str(c) for c in range(1, 64, 2))
    assert (
        f"numa: online CPUs {odd} are in none of the NUMA nodes lscpu.txt lists: their node "
        "is unknown"
    ) in issues
