"""Topology and NUMA from sysfs trees in the kernel's own formats (tests/kernel_trees.py).

Each machine is one of util-linux's lscpu test dumps or a documented platform, rebuilt from the
kernel's sysfs ABI (Documentation/ABI/stable/sysfs-devices-system-cpu, sysfs-devices-node); the
expected counts are lscpu's own (util-linux tests/expected/lscpu/lscpu-<name>) unless noted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hwtune.models.cpulist import CpuListError, format_cpulist, parse_cpumask
from hwtune.models.hardware import CpuInfo, NumaNode
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.numa import probe_numa

from .kernel_trees import CPU, NODE, cache, cpu_topology, cpufreq_cpus, cpumask, write

ARM_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm"


def probe(root: Path) -> tuple[CpuInfo, tuple[NumaNode, ...], list[str]]:
    issues = IssueLog()
    cpu = probe_cpu(root, issues)
    numa = probe_numa(root, issues, cpu)
    return cpu, numa, [f"{i.probe}: {i.path}: {i.reason}" for i in issues]


def arm_cpuinfo(root: Path, parts: dict[int, str]) -> None:
    write(
        root,
        "proc/cpuinfo",
        "\n".join(
            f"processor\t: {n}\nBogoMIPS\t: 38.40\nFeatures\t: {ARM_FEATURES}\n"
            f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n"
            f"CPU part\t: {part}\nCPU revision\t: 1\n"
            for n, part in sorted(parts.items())
        ),
    )


# --- the kernel's hex mask ------------------------------------------------------------------


def test_cpumask_words_most_significant_first() -> None:
    # util-linux's ia64-hpmatterhorn dump: node0/cpumap on a 1024-CPU kernel holds CPUs 4-7.
    assert parse_cpumask(",".join(["00000000"] * 31 + ["000000f0"])) == (4, 5, 6, 7)
    assert parse_cpumask("f,ffffffff") == tuple(range(36))
    assert parse_cpumask("ff00,00000001\n") == (0, 40, 41, 42, 43, 44, 45, 46, 47)
    assert cpumask(range(36), 36) == "f,ffffffff" and cpumask([0], 8) == "01"
    for bad in ("xyz", "123456789", "ff,,ff", ""):
        with pytest.raises(CpuListError):
            parse_cpumask(bad)


# --- NUMA node CPUs without cpulist -----------------------------------------------------------


def numa_machine(
    root: Path,
    nodes: dict[int, list[int]],
    nr_cpu_ids: int = 64,
    memory_only: tuple[int, ...] = (),
) -> None:
    every = sorted(c for cpus in nodes.values() for c in cpus)
    write(root, f"{CPU}/online", format_cpulist(every))
    write(root, f"{CPU}/present", format_cpulist(every))
    for cpu in every:
        node = next(n for n, cpus in nodes.items() if cpu in cpus)
        cpu_topology(
            root,
            cpu,
            nr_cpu_ids=nr_cpu_ids,
            siblings=[cpu],
            package=node,
            package_cpus=nodes[node],
            core_id=cpu,
        )
    every_node = sorted([*nodes, *memory_only])
    for node in every_node:
        write(root, f"{NODE}/node{node}/meminfo", f"Node {node} MemTotal:       1048576 kB")
        # node_read_distance() (drivers/base/node.c): one SLIT distance per node, 10 to itself.
        write(
            root,
            f"{NODE}/node{node}/distance",
            " ".join("10" if n == node else "20" for n in every_node),
        )


def test_node_cpus_from_cpumap_when_cpulist_is_absent(tmp_path: Path) -> None:
    nodes = {0: list(range(20)), 1: list(range(20, 40))}
    numa_machine(tmp_path, nodes)
    for node, cpus in nodes.items():
        write(tmp_path, f"{NODE}/node{node}/cpumap", cpumask(cpus, 64))
    assert (tmp_path / f"{NODE}/node1/cpumap").read_text() == "000000ff,fff00000\n"
    cpu, numa, issues = probe(tmp_path)
    assert [(n.id, n.cpus, n.cpus_known) for n in numa] == [
        (0, tuple(range(20)), True),
        (1, tuple(range(20, 40)), True),
    ]
    assert {c.cpu: c.node for c in cpu.topology}[25] == 1
    assert not [i for i in issues if i.startswith("numa")]


def test_node_cpus_from_node_links(tmp_path: Path) -> None:
    nodes = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    numa_machine(tmp_path, nodes)
    for node, cpus in nodes.items():
        for cpu in cpus:
            os.symlink(f"../../cpu/cpu{cpu}", tmp_path / f"{NODE}/node{node}/cpu{cpu}")
    _, numa, issues = probe(tmp_path)
    assert [n.cpus for n in numa] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert not [i for i in issues if i.startswith("numa")]


def test_node_cpus_from_cpu_links_and_a_memory_only_node(tmp_path: Path) -> None:
    nodes = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    numa_machine(tmp_path, nodes, memory_only=(2,))  # node2: CXL memory
    for node, cpus in nodes.items():
        for cpu in cpus:
            os.symlink(f"../../node/node{node}", tmp_path / f"{CPU}/cpu{cpu}/node{node}")
    _, numa, issues = probe(tmp_path)
    assert [(n.id, n.cpus, n.cpus_known) for n in numa] == [
        (0, (0, 1, 2, 3), True),
        (1, (4, 5, 6, 7), True),
        (2, (), True),
    ]
    assert not [i for i in issues if i.startswith("numa")]


def test_node_without_any_cpu_source_is_unknown_and_said(tmp_path: Path) -> None:
    nodes = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    numa_machine(tmp_path, nodes)
    write(tmp_path, f"{NODE}/node0/cpulist", "0-3")
    _, numa, issues = probe(tmp_path)
    assert [(n.id, n.cpus, n.cpus_known) for n in numa] == [
        (0, (0, 1, 2, 3), True),
        (1, (), False),
    ]
    assert any("node1: no cpulist, cpumap or CPU links" in i for i in issues)


def test_memory_only_node_with_an_empty_cpulist_is_known(tmp_path: Path) -> None:
    # util-linux's ppc64-POWER7-64cpu: "NUMA node1 CPU(s):" is empty; the kernel prints "\n".
    numa_machine(tmp_path, {0: [0, 1]}, memory_only=(1,))
    write(tmp_path, f"{NODE}/node0/cpulist", "0-1")
    write(tmp_path, f"{NODE}/node1/cpulist", "")
    _, numa, issues = probe(tmp_path)
    assert [(n.cpus, n.cpus_known) for n in numa] == [((0, 1), True), ((), True)]
    assert not [i for i in issues if i.startswith("numa")]


# --- sockets when physical_package_id says nothing ------------------------------------------


def test_power7_lpar_counts_sockets_from_core_siblings(tmp_path: Path) -> None:
    # lscpu-ppc64-POWER7-64cpu: 64 CPUs, SMT4, physical_package_id -1 ("-" in `lscpu -p -y`),
    # core_siblings one core wide: lscpu prints 4 threads/core, 1 core/socket, 16 sockets.
    write(tmp_path, f"{CPU}/online", "0-63")
    write(tmp_path, f"{CPU}/present", "0-63")
    for cpu in range(64):
        core = [c for c in range(cpu - cpu % 4, cpu - cpu % 4 + 4)]
        cpu_topology(
            tmp_path,
            cpu,
            nr_cpu_ids=64,
            siblings=core,
            package=-1,
            package_cpus=core,
            core_id=cpu - cpu % 4,
            lists=False,
        )
    write(tmp_path, f"{NODE}/node0/cpulist", "0-63")
    write(tmp_path, f"{NODE}/node1/cpulist", "")
    cpu, numa, _ = probe(tmp_path)
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (64, 16, 16)
    assert cpu.threads_per_core == 4
    assert cpu.topology_basis == "sysfs: sockets from core_siblings"
    assert [len(n.cpus) for n in numa] == [64, 0]


def test_sparc64_ids_minus_one_and_masks_only(tmp_path: Path) -> None:
    # lscpu-sparc64: CPUs 6,7,10,11,14,15 online, core_id 0 on every CPU, socket "-": lscpu
    # counts 6 sockets of 1 core from the masks, never one core from the repeated core_id.
    online = [6, 7, 10, 11, 14, 15]
    write(tmp_path, f"{CPU}/online", format_cpulist(online))
    write(tmp_path, f"{CPU}/present", format_cpulist(online))
    for cpu in online:
        cpu_topology(
            tmp_path,
            cpu,
            nr_cpu_ids=64,
            siblings=[cpu],
            package=-1,
            package_cpus=[cpu],
            lists=False,
        )
    cpu, _, _ = probe(tmp_path)
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (6, 6, 6)
    assert cpu.threads_per_core == 1
    assert {c.socket for c in cpu.topology} == set(range(6))


def test_package_cpus_list_when_physical_package_id_is_absent(tmp_path: Path) -> None:
    write(tmp_path, f"{CPU}/online", "0-7")
    for cpu in range(8):
        package = list(range(0, 4)) if cpu < 4 else list(range(4, 8))
        cpu_topology(
            tmp_path,
            cpu,
            nr_cpu_ids=8,
            siblings=[cpu],
            package=None,
            package_cpus=package,
            core_id=cpu % 4,
            extra={"package_cpus_list": format_cpulist(package)},
        )
    cpu, _, _ = probe(tmp_path)
    assert (cpu.physical_cores, cpu.sockets) == (8, 2)
    assert cpu.topology_basis == "sysfs: sockets from package_cpus_list"
    for n in range(8):  # and with no package information at all: unknown, and said
        for name in ("package_cpus_list", "core_siblings", "core_siblings_list"):
            (tmp_path / f"{CPU}/cpu{n}/topology/{name}").unlink()
    cpu, _, issues = probe(tmp_path)
    assert (cpu.physical_cores, cpu.sockets) == (8, None)
    assert any(
        "no package mask (package_cpus, core_siblings): sockets unknown" in i for i in issues
    )


# --- clusters are not sockets ----------------------------------------------------------------

PHONE_PARTS = {**dict.fromkeys(range(3), "0xd46"), 3: "0xd47", 4: "0xd47", 5: "0xd4d", 6: "0xd4d"}
PHONE_PARTS[7] = "0xd4e"  # Cortex-A510, A710, A715, X3 (GCC aarch64-cores.def)
# physical_package_id per cluster as a pre-6.3 device-tree kernel sets it (util-linux's
# arm-A510-A710-A715-X3 dump, `lscpu -p -y` Socket column: 0,0,0,1,1,1,1,2).
PHONE_CLUSTERS = [[0, 1, 2], [3, 4, 5, 6], [7]]
PHONE_CAPACITY = {0: 325, 1: 325, 2: 325, 3: 828, 4: 828, 5: 828, 6: 828, 7: 1024}


def phone(root: Path, *, l3: bool = True, capacity: bool = True) -> None:
    write(root, f"{CPU}/online", "0-7")
    write(root, f"{CPU}/present", "0-7")
    for package, cpus in enumerate(PHONE_CLUSTERS):
        for core_id, cpu in enumerate(cpus):
            cpu_topology(
                root,
                cpu,
                nr_cpu_ids=8,
                siblings=[cpu],
                package=package,
                package_cpus=cpus,
                core_id=core_id,
                extra={"cluster_id": str(package), "cluster_cpus_list": format_cpulist(cpus)},
            )
            cache(root, cpu, 0, 1, "Data", "64K", [cpu], nr_cpu_ids=8)
            if l3:
                cache(root, cpu, 1, 3, "Unified", "8192K", list(range(8)), nr_cpu_ids=8)
            if capacity:
                write(root, f"{CPU}/cpu{cpu}/cpu_capacity", str(PHONE_CAPACITY[cpu]))
    for policy, cpus in ((0, [0, 1, 2]), (3, [3, 4, 5, 6]), (7, [7])):
        base = f"{CPU}/cpufreq/policy{policy}"
        write(root, f"{base}/related_cpus", cpufreq_cpus(cpus))
        write(root, f"{base}/affected_cpus", cpufreq_cpus(cpus))
        khz = {0: 2016000, 3: 2803200, 7: 3187200}[policy]
        write(root, f"{base}/cpuinfo_max_freq", str(khz))
    arm_cpuinfo(root, PHONE_PARTS)


@pytest.mark.parametrize(
    ("l3", "capacity"), [(True, True), (False, True), (False, False), (True, False)]
)
def test_dynamiq_phone_is_one_socket_of_eight_cores(
    tmp_path: Path, l3: bool, capacity: bool
) -> None:
    phone(tmp_path, l3=l3, capacity=capacity)
    cpu, numa, issues = probe(tmp_path)
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (8, 8, 1)
    assert (cpu.threads_per_core, cpu.smt_enabled) == (1, False)
    assert "are clusters of one SoC, counted as 1 socket" in (cpu.topology_basis or "")
    assert {c.socket for c in cpu.topology} == {0}
    kinds = {c.cpu: c.kind for c in cpu.topology}
    assert (kinds[0], kinds[3], kinds[7]) == ("efficiency", "performance", "performance")
    # No NUMA directories on this phone: one socket, so one node is assumed (and said).
    assert [n.cpus for n in numa] == [tuple(range(8))]
    assert not [i for i in issues if "3 sockets" in i or "not a CPU number" in i]


def test_two_socket_arm_server_keeps_its_sockets(tmp_path: Path) -> None:
    # Ampere Altra 2P style: identical Neoverse-N1 sockets, an SLC per socket, no shared cache.
    write(tmp_path, f"{CPU}/online", "0-7")
    for cpu in range(8):
        package = [c for c in range(8) if c // 4 == cpu // 4]
        cpu_topology(
            tmp_path,
            cpu,
            nr_cpu_ids=8,
            siblings=[cpu],
            package=cpu // 4,
            package_cpus=package,
            core_id=cpu % 4,
        )
        cache(tmp_path, cpu, 0, 2, "Unified", "1024K", [cpu], nr_cpu_ids=8)
        cache(tmp_path, cpu, 1, 3, "Unified", "16384K", package, nr_cpu_ids=8)
        write(tmp_path, f"{CPU}/cpu{cpu}/cpu_capacity", "1024")
    arm_cpuinfo(tmp_path, dict.fromkeys(range(8), "0xd0c"))
    cpu, _, _ = probe(tmp_path)
    assert (cpu.physical_cores, cpu.sockets, cpu.threads_per_core) == (8, 2, 1)
    assert cpu.topology_basis == "sysfs: sockets from physical_package_id"


# --- cpufreq's space-separated lists ----------------------------------------------------------


def test_related_cpus_space_separated_give_arm_core_types(tmp_path: Path) -> None:
    phone(tmp_path, capacity=False)
    assert (tmp_path / f"{CPU}/cpufreq/policy3/related_cpus").read_text() == "3 4 5 6 \n"
    cpu, _, issues = probe(tmp_path)
    # Three frequency tiers past the 10% gap: the two upper ones are performance cores.
    assert [(t.kind, t.cpus, t.cores, t.max_mhz) for t in cpu.core_types] == [
        ("performance", (3, 4, 5, 6, 7), 5, 3187.2),
        ("efficiency", (0, 1, 2), 3, 2016.0),
    ]
    assert cpu.threads_per_core == 1  # hybrid, and every core has one thread
    assert not [i for i in issues if "related_cpus" in i]


# --- threads per core ------------------------------------------------------------------------


def test_thunderx2_single_record_does_not_prove_smt4(tmp_path: Path) -> None:
    write(
        tmp_path,
        "proc/cpuinfo",
        f"processor\t: 0\nFeatures\t: {ARM_FEATURES}\nCPU implementer\t: 0x43\n"
        "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0x0af\nCPU revision\t: 1\n",
    )
    cpu, _, _ = probe(tmp_path)
    # The table gives ThunderX2 (implementer 0x43, part 0x0af) 4 threads per core by design.
    assert cpu.threads_per_core is None and cpu.smt_enabled is None


def test_node_without_sources_holds_no_cpu_when_every_cpu_is_elsewhere(tmp_path: Path) -> None:
    numa_machine(tmp_path, {0: [0, 1, 2, 3]}, memory_only=(1,))
    write(tmp_path, f"{NODE}/node0/cpulist", "0-3")
    _, numa, issues = probe(tmp_path)
    assert [(n.id, n.cpus, n.cpus_known) for n in numa] == [
        (0, (0, 1, 2, 3), True),
        (1, (), True),
    ]
    assert not [i for i in issues if i.startswith("numa")]
