"""probe_cpu/probe_numa on synthetic sysfs trees: multi-socket, SMT off, offline CPUs, hybrids."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.models.cpulist import format_cpulist
from hwtune.models.hardware import CpuInfo, NumaNode
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.numa import probe_numa
from hwtune.probes.root import MAX_SMALL

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"
X86_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ht syscall nx lm pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx "
    "f16c rdrand lahf_lm abm fsgsbase bmi1 avx2 bmi2 rdseed adx clflushopt xsavec xsaveopt"
)


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def machine(
    root: Path,
    cores: list[tuple[int, int, list[int]]],
    *,
    offline: tuple[int, ...] = (),
    smt_control: str | None = None,
    l3_missing: tuple[int, ...] = (),
    nodes: dict[int, list[int]] | None = None,
    model: int = 143,
) -> None:
    """A sysfs tree: `cores` is [(package, core_id, [cpus])]; offline CPUs get no topology.
    /proc/cpuinfo names an Intel `model` (143, Sapphire Rapids; 151, Alder Lake: a hybrid)."""
    every = sorted(c for _, _, cpus in cores for c in cpus)
    online = [c for c in every if c not in offline]
    write(root, f"{CPU}/present", format_cpulist(every))
    write(root, f"{CPU}/online", format_cpulist(online))
    if smt_control:
        write(root, f"{CPU}/smt/control", smt_control)
    for package, core_id, cpus in cores:
        up = [c for c in cpus if c not in offline]
        for cpu in cpus:
            base = f"{CPU}/cpu{cpu}"
            (root / base).mkdir(parents=True, exist_ok=True)
            if cpu not in up:
                continue
            write(root, f"{base}/topology/physical_package_id", str(package))
            write(root, f"{base}/topology/core_id", str(core_id))
            write(root, f"{base}/topology/core_cpus_list", format_cpulist(up))
            write(root, f"{base}/topology/thread_siblings_list", format_cpulist(up))
            package_cpus = [
                c for p, _, cs in cores if p == package for c in cs if c not in offline
            ]
            for index, (level, kind, size, shared) in enumerate(
                [
                    (1, "Data", "48K", up),
                    (1, "Instruction", "32K", up),
                    (2, "Unified", "2048K", up),
                    (3, "Unified", "107520K", [c for c in package_cpus if c not in l3_missing]),
                ]
            ):
                if level == 3 and cpu in l3_missing:
                    continue
                cache = f"{base}/cache/index{index}"
                write(root, f"{cache}/level", str(level))
                write(root, f"{cache}/type", kind)
                write(root, f"{cache}/size", size)
                write(root, f"{cache}/shared_cpu_list", format_cpulist(shared))
    for node, cpus in (nodes or {}).items():
        write(root, f"{NODE}/node{node}/cpulist", format_cpulist(cpus))
        write(root, f"{NODE}/node{node}/meminfo", f"Node {node} MemTotal:       1048576 kB")
        write(
            root,
            f"{NODE}/node{node}/distance",
            " ".join("10" if other == node else "21" for other in sorted(nodes or {})),
        )
    processors = "\n\n".join(
        f"processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: {model}\n"
        f"model name\t: Test Xeon\nstepping\t: 8\nflags\t\t: {X86_FLAGS} avx512f avx512bw "
        "avx512cd avx512dq avx512vl clwb avx512_vnni avx512_bf16 avx512ifma avx512vbmi sha_ni "
        "avx512_bitalg avx512_vbmi2 avx512_vpopcntdq gfni rdpid vaes vpclmulqdq "
        "cldemote movdiri movdir64b serialize"
        for n in online
    )
    write(root, "proc/cpuinfo", processors)


def probe(root: Path) -> tuple[CpuInfo, tuple[NumaNode, ...], list[str]]:
    issues = IssueLog()
    cpu = probe_cpu(root, issues)
    numa = probe_numa(root, issues, cpu)
    return cpu, numa, [f"{i.probe}: {i.path}: {i.reason}" for i in issues]


def two_sockets_smt() -> list[tuple[int, int, list[int]]]:
    # Linux numbers the second threads after all first threads: siblings are N and N+8.
    return [(p, core, [p * 4 + core, p * 4 + core + 8]) for p in (0, 1) for core in range(4)]


def test_two_sockets_with_smt_and_numa(tmp_path: Path) -> None:
    machine(
        tmp_path,
        two_sockets_smt(),
        nodes={0: [0, 1, 2, 3, 8, 9, 10, 11], 1: [4, 5, 6, 7, 12, 13, 14, 15]},
    )
    cpu, numa, issues = probe(tmp_path)
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (16, 8, 2)
    assert (cpu.threads_per_core, cpu.smt_enabled) == (2, True)
    by_cpu = {c.cpu: c for c in cpu.topology}
    assert by_cpu[1].core == by_cpu[9].core != by_cpu[2].core
    assert (by_cpu[12].socket, by_cpu[12].node) == (1, 1)
    caches = {(c.level, c.type): (c.size_bytes, c.instances) for c in cpu.caches}
    assert caches[(1, "data")] == (48 * 1024, 8)
    assert caches[(3, "unified")] == (107520 * 1024, 2)
    assert [(n.id, len(n.cpus), n.memory_bytes, n.distances) for n in numa] == [
        (0, 8, 1 << 30, (10, 21)),
        (1, 8, 1 << 30, (21, 10)),
    ]
    assert cpu.microarch == "sapphirerapids"
    assert not issues


def test_smt_switched_off(tmp_path: Path) -> None:
    cores = two_sockets_smt()
    machine(tmp_path, cores, offline=tuple(range(8, 16)), smt_control="off")
    cpu, _, issues = probe(tmp_path)
    assert cpu.logical_cpus == 16  # present, as lscpu's CPU(s) and nproc --all count
    assert cpu.online_cpus == tuple(range(8))
    assert (cpu.physical_cores, cpu.sockets) == (8, 2)
    assert (cpu.threads_per_core, cpu.smt_enabled) == (1, False)
    assert not [i for i in issues if "offline" in i]


def test_offline_cpus_are_reported(tmp_path: Path) -> None:
    machine(tmp_path, [(0, core, [core]) for core in range(8)], offline=(6, 7))
    cpu, _, issues = probe(tmp_path)
    assert cpu.logical_cpus == 8 and cpu.online_cpus == tuple(range(6))
    assert cpu.physical_cores == 6
    assert any("CPUs 6-7 are offline" in i for i in issues)


def test_one_offline_cpu_reads_singular(tmp_path: Path) -> None:
    machine(tmp_path, [(0, core, [core]) for core in range(8)], offline=(7,))
    _, _, issues = probe(tmp_path)
    assert any("CPU 7 is offline: sockets and cores" in i for i in issues), issues


def test_intel_hybrid_from_pmu_directories(tmp_path: Path) -> None:
    p_cores = [(0, core, [2 * core, 2 * core + 1]) for core in range(6)]
    e_cores = [(0, 8 + core, [12 + core]) for core in range(10)]
    machine(tmp_path, p_cores + e_cores, l3_missing=(20, 21))
    write(tmp_path, "sys/devices/cpu_core/cpus", "0-11")
    write(tmp_path, "sys/devices/cpu_atom/cpus", "12-21")
    for n in range(22):
        khz = 5_100_000 if n < 12 else 3_800_000 if n < 20 else 2_500_000
        write(tmp_path, f"{CPU}/cpufreq/policy{n}/related_cpus", str(n))
        write(tmp_path, f"{CPU}/cpufreq/policy{n}/cpuinfo_max_freq", str(khz))
    cpu, _, _ = probe(tmp_path)
    kinds = {t.kind: (t.cpus, t.cores, t.max_mhz) for t in cpu.core_types}
    assert kinds == {
        "performance": (tuple(range(12)), 6, 5100.0),
        "efficiency": (tuple(range(12, 20)), 8, 3800.0),
        "low-power-efficiency": ((20, 21), 2, 2500.0),
    }
    assert cpu.threads_per_core is None and cpu.smt_enabled is True
    assert cpu.physical_cores == 16 and cpu.logical_cpus == 22
    assert {c.cpu: c.kind for c in cpu.topology}[13] == "efficiency"


def test_core_types_from_max_frequency_only_past_a_real_gap(tmp_path: Path) -> None:
    machine(tmp_path, [(0, core, [core]) for core in range(8)], model=151)
    for n in range(8):  # a hybrid without the PMU directories: 5.0 vs 3.8 GHz
        write(tmp_path, f"{CPU}/cpufreq/policy{n}/related_cpus", str(n))
        write(
            tmp_path,
            f"{CPU}/cpufreq/policy{n}/cpuinfo_max_freq",
            "5000000" if n < 4 else "3800000",
        )
    cpu, _, _ = probe(tmp_path)
    assert [(t.kind, t.cpus) for t in cpu.core_types] == [
        ("performance", (0, 1, 2, 3)),
        ("efficiency", (4, 5, 6, 7)),
    ]
    for n in range(8):  # Turbo Boost Max favoured cores: 4.8 vs 4.6 GHz is not hybrid
        write(
            tmp_path,
            f"{CPU}/cpufreq/policy{n}/cpuinfo_max_freq",
            "4800000" if n < 2 else "4600000",
        )
    cpu, _, _ = probe(tmp_path)
    assert cpu.core_types == () and cpu.threads_per_core == 1


def test_arm_big_little_by_capacity(tmp_path: Path) -> None:
    machine(tmp_path, [(0, core, [core]) for core in range(8)])
    records = []
    for n in range(8):
        write(tmp_path, f"{CPU}/cpu{n}/cpu_capacity", "1024" if n >= 4 else "446")
        part = "0xd0b" if n >= 4 else "0xd05"
        records.append(
            f"processor\t: {n}\nFeatures\t: fp asimd crc32 atomics asimdrdm dcpop "
            f"fphp asimdhp lrcpc asimddp\nCPU implementer\t: 0x41\n"
            f"CPU architecture: 8\nCPU part\t: {part}\n"
        )
    write(tmp_path, "proc/cpuinfo", "\n".join(records))
    cpu, _, issues = probe(tmp_path)
    assert cpu.arch == "aarch64" and cpu.vendor == "ARM"
    assert [(t.kind, t.cpus) for t in cpu.core_types] == [
        ("performance", (4, 5, 6, 7)),
        ("efficiency", (0, 1, 2, 3)),
    ]
    # Both cores are in the table; Cortex-A76 lists Cortex-A55 among its ancestors, so the big
    # core names the target (its flags also fit neoverse-n1, whose -mcpu tunes another core).
    assert cpu.microarch == "cortex-a76", cpu.microarch_basis
    assert not [i for i in issues if "microarchitecture" in i]


def test_kernel_without_sibling_lists_groups_by_ids(tmp_path: Path) -> None:
    machine(tmp_path, two_sockets_smt())
    for n in range(16):
        (tmp_path / f"{CPU}/cpu{n}/topology/core_cpus_list").unlink()
        (tmp_path / f"{CPU}/cpu{n}/topology/thread_siblings_list").unlink()
    cpu, _, _ = probe(tmp_path)
    # core_id repeats in each package: (package, core_id) tells the 8 cores apart.
    assert (cpu.physical_cores, cpu.sockets, cpu.threads_per_core) == (8, 2, 2)


def test_no_topology_directories_fall_back_to_cpuinfo(tmp_path: Path) -> None:
    write(tmp_path, f"{CPU}/online", "0-3")
    write(
        tmp_path,
        "proc/cpuinfo",
        "\n\n".join(
            f"processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
            f"physical id\t: 0\nsiblings\t: 4\ncore id\t\t: {n // 2}\ncpu cores\t: 2\n"
            f"flags\t\t: {X86_FLAGS}"
            for n in range(4)
        ),
    )
    cpu, numa, issues = probe(tmp_path)
    assert (cpu.logical_cpus, cpu.physical_cores) == (4, 2)
    assert (cpu.sockets, cpu.threads_per_core) == (1, 2)
    assert any("no cpuN/topology directories" in i for i in issues)
    # One socket and a complete CPU list: one node is assumed, and said so.
    assert [n.cpus for n in numa] == [(0, 1, 2, 3)]
    assert any(i.startswith("numa:") and "assumed one node" in i for i in issues)


def test_malformed_sysfs_files_become_issues(tmp_path: Path) -> None:
    machine(tmp_path, [(0, core, [core]) for core in range(4)], nodes={0: [0, 1, 2, 3]})
    write(tmp_path, f"{CPU}/online", "0-3,x")
    write(tmp_path, f"{CPU}/cpu2/topology/physical_package_id", "\x00\xff garbage")
    write(tmp_path, f"{NODE}/node0/distance", "ten")
    write(tmp_path, f"{NODE}/node0/meminfo", "nothing useful")
    cpu, numa, issues = probe(tmp_path)
    text = "\n".join(issues)
    assert f"{CPU}/online: 'x' is not a CPU number" in text
    assert f"{CPU}/cpu2/topology/physical_package_id: not a number" in text
    assert f"{NODE}/node0/distance: not a list of numbers" in text
    assert f"{NODE}/node0/meminfo: no 'Node N MemTotal" in text
    assert cpu.logical_cpus == 4 and numa[0].memory_bytes is None


def test_cpus_online_without_a_directory_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short `online` of 0-65535 over two cpuN directories took 37 s: ~10 failed opens per
    listed CPU. Only CPUs with a directory are read now; 0-4095 keeps the old cost to seconds."""
    import hwtune.probes.sysfs_read as sysfs_read

    machine(tmp_path, [(0, 0, [0]), (0, 1, [1])])
    write(tmp_path, f"{CPU}/online", "0-4095")
    reads: list[str] = []
    real = sysfs_read.read_text

    def counted(root: Path, path: str | Path, limit: int = MAX_SMALL) -> str:
        reads.append(str(path))
        return real(root, path, limit)

    monkeypatch.setattr(sysfs_read, "read_text", counted)
    cpu, _, issues = probe(tmp_path)
    assert len(reads) < 100, f"{len(reads)} sysfs reads for 2 CPU directories"
    assert cpu.physical_cores == 2
    assert any("no topology for online CPUs 2-4095" in i for i in issues)


def test_an_empty_online_file_is_called_empty(tmp_path: Path) -> None:
    machine(tmp_path, [(0, 0, [0]), (0, 1, [1])])
    write(tmp_path, f"{CPU}/online", "")
    cpu, _, issues = probe(tmp_path)
    assert (
        f"cpu: {CPU}/online: empty: no online CPU listed; topology taken from other sources"
        in (issues)
    )
    assert not any("no cpuN/topology directories" in i for i in issues)
    assert cpu.logical_cpus == 2  # from /proc/cpuinfo


def test_a_node_id_no_kernel_has_is_an_issue_and_ignored(tmp_path: Path) -> None:
    """node<200 digits> was taken as a node: its id reached `hwtune exec`, whose node mask
    sized from it was a MemoryError. MAX_NUMNODES is at most 1024 (include/linux/numa.h)."""
    machine(tmp_path, [(0, core, [core]) for core in range(4)], nodes={0: [0, 1], 1: [2, 3]})
    huge = "9" * 200
    write(tmp_path, f"{NODE}/node{huge}/cpulist", "")
    write(tmp_path, f"{NODE}/node1024/cpulist", "")
    cpu, numa, issues = probe(tmp_path)
    assert [node.id for node in numa] == [0, 1]
    assert {lc.node for lc in cpu.topology} == {0, 1}
    text = "\n".join(issues)
    assert f"{NODE}/node{huge}: node{'9' * 12}… is beyond node 1023" in text, text
    assert f"{NODE}/node1024: node1024 is beyond node 1023" in text, text


def test_a_cpu_two_nodes_list_is_kept_on_the_lowest_and_an_issue(tmp_path: Path) -> None:
    """Before: node 0 and node 1 both held CPU 2 with no issue, while CPU 2's own record said
    node 1 (the last listing won): pinning by node 0 or by node 1 both pinned it."""
    machine(tmp_path, [(0, core, [core]) for core in range(4)], nodes={0: [0, 1, 2], 1: [2, 3]})
    cpu, numa, issues = probe(tmp_path)
    assert {node.id: node.cpus for node in numa} == {0: (0, 1, 2), 1: (3,)}
    assert {lc.cpu: lc.node for lc in cpu.topology} == {0: 0, 1: 0, 2: 0, 3: 1}
    text = "\n".join(issues)
    assert f"{NODE}/node1/cpulist: CPU 2 is also on node 0" in text, text
