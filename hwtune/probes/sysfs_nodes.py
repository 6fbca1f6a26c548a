"""NUMA node -> CPUs from `root/sys/devices/system/node` (kernel
Documentation/ABI/stable/sysfs-devices-node), each node from the first source it has:
1. `nodeN/cpulist` ("0-3,8-11"); empty for a memory-only node (CXL, HBM, a GPU's memory);
2. `nodeN/cpumap`, the same set as a hex mask (the only form some old kernels and copies have);
3. the `nodeN/cpuM` links drivers/base/node.c creates for each CPU of the node;
4. the `cpuM/nodeN` links the same code creates beside each CPU (one directory listing per CPU,
   so only read when a node has none of the above).
A node none of these describe has unknown CPUs (None), never an empty list: a planner pinning to
it would pin to nothing. A node none of them describe is taken as CPU-less only when every CPU
directory is placed on another node.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from hwtune.models.cpulist import MAX_NUMA_NODES
from hwtune.probes.sysfs_read import SysfsProblem, SysfsReader

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"
# re.ASCII: a str pattern's \d also matches other Unicode digits, which no sysfs name holds.
NODE_NAME = re.compile(r"^node(\d+)$", re.ASCII)
CPU_NAME = re.compile(r"^cpu(\d+)$", re.ASCII)


class NodeCpus(NamedTuple):
    cpus: dict[int, tuple[int, ...] | None]  # node -> CPUs; None where no source says
    sources: dict[int, str]  # node -> the file or links that decided
    problems: tuple[SysfsProblem, ...]

    def by_cpu(self) -> dict[int, int]:
        return {cpu: node for node, cpus in self.cpus.items() for cpu in cpus or ()}


def read_node_cpus(root: Path) -> NodeCpus | None:
    """Each NUMA node's CPUs under `root`; None when there are no node directories."""
    read = SysfsReader(root)
    nodes = read.names(NODE_DIR, NODE_NAME)
    for node in (n for n in nodes if n >= MAX_NUMA_NODES):
        name = f"node{node}" if len(str(node)) <= 12 else f"node{str(node)[:12]}…"
        read.problems.append(
            SysfsProblem(
                f"{NODE_DIR}/node{node}",
                f"{name} is beyond node {MAX_NUMA_NODES - 1}, the highest a kernel has "
                "(MAX_NUMNODES): ignored",
            )
        )
    nodes = [n for n in nodes if n < MAX_NUMA_NODES]
    if not nodes:
        return NodeCpus({}, {}, tuple(read.problems)) if read.problems else None
    cpus: dict[int, tuple[int, ...] | None] = {}
    sources: dict[int, str] = {}
    for node in nodes:
        base = f"{NODE_DIR}/node{node}"
        found = read.cpu_set(base, ("cpulist", "cpumap"))
        if found is None:
            linked = read.cpu_names(base, CPU_NAME)
            found = (tuple(linked), "nodeN/cpuM links") if linked else None
        cpus[node], sources[node] = found if found else (None, "")
    if any(value is None for value in cpus.values()):
        _from_cpu_links(read, cpus, sources)
    _one_node_per_cpu(read, cpus, sources)
    return NodeCpus(cpus, sources, tuple(read.problems))


def _one_node_per_cpu(
    read: SysfsReader, cpus: dict[int, tuple[int, ...] | None], sources: dict[int, str]
) -> None:
    """A CPU listed by several nodes stays on the lowest one and is an issue naming the others.

    The kernel puts each CPU on exactly one node (drivers/base/node.c, `register_cpu_under_node`
    links it once); two listings are a damaged or hand-made tree. Left as read, the node list
    held the CPU twice while the CPU's own record said the last node, and pinning by node
    pinned it to both."""
    owner: dict[int, int] = {}
    for node in sorted(cpus):
        members = cpus[node]
        if not members:
            continue
        taken = [cpu for cpu in members if cpu in owner]
        for cpu in taken[:1]:  # one problem per node is enough to show the tree is wrong
            more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
            read.problems.append(
                SysfsProblem(
                    f"{NODE_DIR}/node{node}"
                    + (f"/{sources[node]}" if sources[node] in ("cpulist", "cpumap") else ""),
                    f"CPU {cpu}{more} is also on node {owner[cpu]}; a CPU is on one node, "
                    f"so it is kept on node {owner[cpu]} only",
                )
            )
        cpus[node] = tuple(cpu for cpu in members if cpu not in owner)
        owner.update((cpu, node) for cpu in cpus[node] or ())


def _from_cpu_links(
    read: SysfsReader, cpus: dict[int, tuple[int, ...] | None], sources: dict[int, str]
) -> None:
    """Fill the nodes nothing described from the `cpuM/nodeN` links, where there are any."""
    every = read.cpu_names(CPU_DIR, CPU_NAME)
    linked: dict[int, list[int]] = {}
    for cpu in every:
        for node in read.names(f"{CPU_DIR}/cpu{cpu}", NODE_NAME):
            linked.setdefault(node, []).append(cpu)
    placed = {cpu for members in cpus.values() for cpu in members or ()}
    placed.update(cpu for members in linked.values() for cpu in members)
    # A CPU belongs to exactly one node: once every CPU is placed, the rest hold memory only.
    complete = bool(every) and placed >= set(every)
    for node, value in cpus.items():
        if value is not None:
            continue
        if node in linked:
            cpus[node], sources[node] = tuple(linked[node]), "cpuM/nodeN links"
        elif complete:
            cpus[node], sources[node] = (), "every CPU is on another node"
