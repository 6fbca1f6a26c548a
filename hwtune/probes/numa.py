"""`probe_numa(root, issues, cpu)`: NUMA nodes, their CPUs, memory and distances.

Sources, best first:
1. sysfs `root/sys/devices/system/node/nodeN/{cpulist, meminfo, distance}` (kernel
   Documentation/ABI/stable/sysfs-devices-node); memory-only nodes (CXL, HBM) have an empty
   `cpulist`;
   a node without `cpulist` is read from `cpumap` or the CPU links (probes/sysfs_nodes.py), and
   a node no source describes keeps `cpus_known=False` and an issue, so nothing pins to it;
2. the node of each CPU as `probe_cpu` found it (lscpu "NUMA nodeN CPU(s)" lines or `-p` rows),
   with the nodes lscpu lists empty (memory-only), and an issue naming online CPUs no node
   lists; a "NUMA node(s): N" line without the lists gives N nodes whose CPUs are unknown;
3. a single node holding every online CPU, only when the CPU list is known to be complete and the
   machine has one socket (a multi-socket machine almost always has a node per socket or more),
   recorded as an issue because it is an assumption;
4. otherwise no nodes, and an issue.
"""

from __future__ import annotations

import re
from pathlib import Path

from hwtune.models.cpulist import MAX_NUMA_NODES, format_cpulist
from hwtune.models.digits import parse_u64, within_u64
from hwtune.models.hardware import CpuInfo, NumaNode
from hwtune.probes.cpuinfo import read_text
from hwtune.probes.issues import IssueLog
from hwtune.probes.lscpu import parse_lscpu
from hwtune.probes.root import is_file
from hwtune.probes.sysfs_nodes import NODE_DIR, read_node_cpus

PROBE = "numa"
# At most 20 digits (a u64): int() refuses over 4300 with a bare ValueError. ASCII digits
# only: a str pattern's \d also matches other Unicode digits, never in a kernel file.
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d{1,20})\s*kB", re.MULTILINE | re.ASCII)


def parse_node_meminfo(text: str) -> int | None:
    """Bytes of MemTotal in a `nodeN/meminfo` ("Node 0 MemTotal:  6252748 kB")."""
    match = _MEMTOTAL.search(text)
    size = int(match.group(1)) * 1024 if match else None
    return size if size is not None and within_u64(size) else None


def parse_distance(text: str) -> tuple[int, ...] | None:
    """A `nodeN/distance` line ("10 21"): the SLIT distance to every node, in node order."""
    try:
        return tuple(parse_u64(value) for value in text.split())
    except ValueError:
        return None


def probe_numa(root: Path, issues: IssueLog, cpu: CpuInfo) -> tuple[NumaNode, ...]:
    """The NUMA nodes under `root`, or () when they cannot be told (with an issue saying why)."""
    found = read_node_cpus(root)
    if found is not None:
        for problem in found.problems:
            issues.add(PROBE, problem.reason, path=problem.path)
        unknown = [node for node, cpus in found.cpus.items() if cpus is None]
        if unknown:
            names = ", ".join(f"node{node}" for node in unknown)
            issues.add(
                PROBE,
                f"{names}: no cpulist, cpumap or CPU links: the node's CPUs are unknown "
                "and nothing is pinned to it",
                path=NODE_DIR,
            )
        nodes = tuple(
            _sysfs_node(root, issues, node, cpus) for node, cpus in sorted(found.cpus.items())
        )
        _say_missing(root, issues, nodes)
        return nodes
    by_node: dict[int, list[int]] = {}
    for logical in cpu.topology:
        if logical.node is not None:
            by_node.setdefault(logical.node, []).append(logical.cpu)
    listed, declared = _lscpu_nodes(root)
    if by_node or listed:
        for node in listed:  # a memory-only node: "NUMA node1 CPU(s):" with nothing after it
            by_node.setdefault(node, [])
        unlisted = _beyond_the_cpus(listed, cpu, issues)
        placed = {c for cpus in by_node.values() for c in cpus}
        loose = [c for c in cpu.online_cpus if c not in placed]
        if loose:
            # util-linux's lscpu-x86_64-64cpu: "NUMA node(s): 1", node0 lists the 32 even CPUs
            # and the -p rows leave Node empty on the odd ones. Nothing may pin them to node 0.
            issues.add(
                PROBE,
                f"online CPUs {format_cpulist(loose)} are in none of the NUMA nodes lscpu.txt "
                "lists: their node is unknown",
                path="lscpu.txt",
            )
        return tuple(
            NumaNode(id=node, cpus=tuple(sorted(cpus)), cpus_known=node not in unlisted)
            for node, cpus in sorted(by_node.items())
        )
    if declared is not None and declared > MAX_NUMA_NODES:
        issues.add(
            PROBE,
            f"lscpu.txt says {declared} NUMA nodes, beyond the {MAX_NUMA_NODES} a kernel has: "
            "ignored",
            path="lscpu.txt",
        )
        declared = None
    if declared is not None and declared > 1:
        issues.add(
            PROBE,
            f"lscpu.txt says {declared} NUMA nodes but lists none of their CPUs: nodes "
            f"0-{declared - 1} are assumed, their CPUs unknown and nothing is pinned to them",
            path="lscpu.txt",
        )
        return tuple(NumaNode(id=node, cpus=(), cpus_known=False) for node in range(declared))
    complete = cpu.logical_cpus is not None and bool(cpu.online_cpus)
    if complete and cpu.sockets == 1:
        issues.add(
            PROBE,
            "no NUMA information (no sysfs node directories, no lscpu NUMA lines): "
            "assumed one node holding every online CPU of this single-socket machine",
            path=NODE_DIR,
        )
        return (NumaNode(id=0, cpus=cpu.online_cpus),)
    reason = "no NUMA information (no sysfs node directories, no lscpu NUMA lines)"
    if complete and cpu.sockets != 1:
        sockets = cpu.sockets or "an unknown number of"
        reason += f" on a machine with {sockets} sockets: nodes unknown"
    else:
        reason += " and the CPU list is incomplete: nodes unknown"
    issues.add(PROBE, reason, path=NODE_DIR)
    return ()


def _say_missing(root: Path, issues: IssueLog, nodes: tuple[NumaNode, ...]) -> None:
    """One issue per file kind that some nodes lack: a missing meminfo or distance left the
    node's memory or distances empty without a word (prometheus/procfs's devices.ttar has
    nodes holding only vmstat; node_exporter's sys.ttar has no distance files)."""
    unset = {
        "meminfo": [n.id for n in nodes if n.memory_bytes is None],
        "distance": [n.id for n in nodes if not n.distances],
    }
    for name, what in (("meminfo", "memory size"), ("distance", "distances")):
        # Only nodes left without the fact are looked at again: a file that was there and did
        # not parse has its own issue already.
        lacking = [n for n in unset[name] if not is_file(root, f"{NODE_DIR}/node{n}/{name}")]
        if lacking:
            names = ", ".join(f"node{node}" for node in lacking)
            issues.add(PROBE, f"{names}: no {name} file: {what} unknown", path=NODE_DIR)


def _beyond_the_cpus(
    listed: dict[int, tuple[int, ...]], cpu: CpuInfo, issues: IssueLog
) -> set[int]:
    """Report CPUs a "NUMA nodeN CPU(s)" line lists that the machine does not have (beyond
    lscpu's own "CPU(s)" count and the CPUs it describes): the capture contradicts itself, so
    those CPUs are dropped, and a node left with none of its listed CPUs is returned, to be
    marked as having unknown CPUs rather than passing for a memory-only node."""
    known = set(range(cpu.logical_cpus or 0)) | set(cpu.online_cpus)
    known |= {logical.cpu for logical in cpu.topology}
    if not known:
        return set()
    unlisted = set()
    for node, cpus in sorted(listed.items()):
        beyond = [c for c in cpus if c not in known]
        if not beyond:
            continue
        reason = (
            f"NUMA node{node} lists CPUs {format_cpulist(beyond)}, beyond the "
            f"{cpu.logical_cpus or len(known)} CPUs lscpu.txt describes: ignored"
        )
        if len(beyond) == len(cpus):
            unlisted.add(node)
            reason += "; the node's CPUs are unknown and nothing is pinned to it"
        issues.add(PROBE, reason, path="lscpu.txt")
    return unlisted


def _lscpu_nodes(root: Path) -> tuple[dict[int, tuple[int, ...]], int | None]:
    """The nodes a saved lscpu lists ("NUMA nodeN CPU(s)", empty ones too) with their CPUs,
    and the count its "NUMA node(s)" line gives; only read when sysfs has no node directories
    (a capture)."""
    quiet = IssueLog()  # probe_cpu already reported this file's problems
    text = read_text(root, "lscpu.txt", quiet, PROBE)
    if text is None:
        return {}, None
    facts = parse_lscpu(text)
    return dict(facts.numa), facts.number("NUMA node(s)")


def _sysfs_node(root: Path, issues: IssueLog, node: int, cpus: tuple[int, ...] | None) -> NumaNode:
    base = f"{NODE_DIR}/node{node}"
    memory = None
    meminfo = read_text(root, f"{base}/meminfo", issues, PROBE)
    if meminfo is not None:
        memory = parse_node_meminfo(meminfo)
        if memory is None:
            issues.add(PROBE, "no 'Node N MemTotal: X kB' line", path=f"{base}/meminfo")
    distances: tuple[int, ...] = ()
    text = read_text(root, f"{base}/distance", issues, PROBE)
    if text is not None:
        parsed = parse_distance(text)
        if parsed is None:
            bad = text.strip()[:40]
            issues.add(PROBE, f"not a list of numbers: {bad!r}", path=f"{base}/distance")
        distances = parsed or ()
    return NumaNode(
        id=node,
        cpus=cpus or (),
        memory_bytes=memory,
        distances=distances,
        cpus_known=cpus is not None,
    )
