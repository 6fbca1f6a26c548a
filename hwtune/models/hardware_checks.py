"""Values no machine can have, in a hardware model read from a file (`--hardware FILE`).

`models.convert.load` checks a file's shape (keys and types); this checks what the types allow
but no probe ever writes, and the planner would take at face value: a negative count or
size (`effective_cpus: -4` planned one thread), memory of 0 bytes (a RAM budget of 0), CPUs
usable that are not online (pinned to a CPU the machine does not have), an infinite float, or
a `schema_version` from a newer hwtune whose fields this one would misread.

Only what `detect()` cannot produce is refused: unknown values are None (or an empty list) in
the model, and stay accepted. A model, not I/O: the caller names the file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from hwtune.models.cpulist import MAX_CPU, MAX_NUMA_NODES
from hwtune.models.hardware import SCHEMA_VERSION, Hardware
from hwtune.models.words import plural

# Fields that hold CPU numbers (a list of them, or LogicalCpu.cpu): each one below MAX_CPU, as
# every CPU list parsed from the kernel is (models/cpulist.py).
_CPU_NUMBER_FIELDS = frozenset(
    {"cpu", "online_cpus", "cpus", "affinity_cpus", "cpuset_cpus", "usable_cpus", "cpu_affinity"}
)


def schema_problem(data: Mapping[str, Any]) -> str | None:
    """Why the parsed JSON's `schema_version` is not one this hwtune reads, or None (absent:
    the current version, as the model's default). Checked before the keys, so that a newer
    model is reported as newer rather than by its first unknown key."""
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        return None  # a wrong type: models.convert.load says so with the key path
    if version > SCHEMA_VERSION:
        return (
            f"schema_version {version} is newer than this hwtune reads ({SCHEMA_VERSION}): "
            "the file was written by a newer hwtune"
        )
    if version < 1:
        return f"schema_version {version} is not one any hwtune wrote (they start at 1)"
    return None


def hardware_problem(hw: Hardware) -> tuple[str, str] | None:
    """(key path, what is wrong) for the first value no machine can have, or None."""
    return _number_problem(hw, "", cpu_numbers=False) or _node_problem(hw) or _limits_problem(hw)


def _node_problem(hw: Hardware) -> tuple[str, str] | None:
    """NUMA node ids below MAX_NUMA_NODES (1024), the most any kernel has: `hwtune exec` sizes
    its set_mempolicy(2) node mask from them (id 10^18 was a MemoryError in the child)."""
    ids: list[tuple[str, int | None]] = [(f"numa[{i}].id", n.id) for i, n in enumerate(hw.numa)]
    ids += [(f"cpu.topology[{i}].node", lc.node) for i, lc in enumerate(hw.cpu.topology)]
    ids += [(f"gpus[{i}].numa_node", gpu.numa_node) for i, gpu in enumerate(hw.gpus)]
    for key, node in ids:
        if node is not None and node >= MAX_NUMA_NODES:
            return key, (
                f"NUMA node {node} is beyond {MAX_NUMA_NODES - 1}, the highest node id a "
                "kernel has (MAX_NUMNODES)"
            )
    return None


def _number_problem(obj: object, path: str, *, cpu_numbers: bool) -> tuple[str, str] | None:
    """Every number in the model is a count, size, id, index or frequency: finite and not
    negative; CPU numbers also below MAX_CPU."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return None
    if isinstance(obj, (int, float)):
        return _one_number(obj, path, cpu_numbers=cpu_numbers)
    if isinstance(obj, tuple):
        for i, item in enumerate(obj):
            found = _number_problem(item, f"{path}[{i}]", cpu_numbers=cpu_numbers)
            if found:
                return found
        return None
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            key = f"{path}.{f.name}" if path else f.name
            found = _number_problem(
                getattr(obj, f.name), key, cpu_numbers=f.name in _CPU_NUMBER_FIELDS
            )
            if found:
                return found
    return None


def _one_number(value: float, path: str, *, cpu_numbers: bool) -> tuple[str, str] | None:
    if not math.isfinite(value):
        return path, f"{value} is not a finite number"
    if value < 0:
        return path, f"{value} is negative; no count, size or id of a machine is"
    if cpu_numbers and value >= MAX_CPU:
        return path, f"CPU {value} is beyond {MAX_CPU - 1}, the highest CPU number hwtune reads"
    return None


def _limits_problem(hw: Hardware) -> tuple[str, str] | None:
    """The budget the planner sizes pools and pins from, as `probes.limits` derives it: at
    least one effective CPU and no more than are usable, usable CPUs among the online ones,
    a positive quota and memory."""
    limits = hw.limits
    online = set(hw.cpu.online_cpus)
    stray = [cpu for cpu in limits.usable_cpus if online and cpu not in online]
    if stray:
        return "limits.usable_cpus", f"CPU {stray[0]} is usable but not in cpu.online_cpus"
    if limits.effective_cpus < 1:
        why = f"{limits.effective_cpus} is below 1, where detect floors it"
        return "limits.effective_cpus", why
    if limits.usable_cpus and limits.effective_cpus > len(limits.usable_cpus):
        return (
            "limits.effective_cpus",
            f"{limits.effective_cpus} is more than the "
            f"{plural(len(limits.usable_cpus), 'usable CPU')}",
        )
    found = _count_problem(hw)
    if found:
        return found
    if limits.cpu_quota is not None and limits.cpu_quota <= 0:
        return "limits.cpu_quota", f"{limits.cpu_quota} CPUs is no quota the kernel takes"
    found = _narrowing_problem(hw)
    if found:
        return found
    for key, size in _memory_sizes(hw):
        if size == 0:
            return key, "0 bytes: no machine or process runs without memory (unknown is null)"
    return None


def _count_problem(hw: Hardware) -> tuple[str, str] | None:
    """CPU counts no kernel has (beyond MAX_CPU, the CPU numbers hwtune reads), and an
    effective count above the CPUs it is drawn from: `probes.limits` takes the usable CPUs
    among the online ones, or among 0..logical_cpus-1 when no online list is known, so detect
    never writes more. Unchecked, an empty CPU list and `effective_cpus: 100000000` made the
    planner lay out 10^8 CPUs (8.6 GB, over a minute)."""
    limits, cpu = hw.limits, hw.cpu
    for key, count in (
        ("cpu.logical_cpus", cpu.logical_cpus),
        ("limits.effective_cpus", limits.effective_cpus),
    ):
        if count is not None and count > MAX_CPU:
            return key, f"{count} CPUs is beyond {MAX_CPU}, the most CPUs hwtune reads"
    if cpu.online_cpus and limits.effective_cpus > len(cpu.online_cpus):
        return (
            "limits.effective_cpus",
            f"{limits.effective_cpus} is more than the "
            f"{plural(len(cpu.online_cpus), 'online CPU')}",
        )
    if not cpu.online_cpus and cpu.logical_cpus and limits.effective_cpus > cpu.logical_cpus:
        return (
            "limits.effective_cpus",
            f"{limits.effective_cpus} is more than the {plural(cpu.logical_cpus, 'logical CPU')}",
        )
    return None


def _narrowing_problem(hw: Hardware) -> tuple[str, str] | None:
    """What `probes.limits.effective_cpus` derives, checked against the facts it derives it
    from: usable CPUs among the affinity and cpuset lists (unless online ∩ affinity ∩ cpuset
    is empty, where detect falls back to the first list), and no more effective CPUs than the
    quota floored, at least 1. Before, `cpu_quota: 0.5, effective_cpus: 2` planned 2 threads
    where detect under that quota plans 1, and `affinity_cpus: [0], usable_cpus: [0, 1]`
    pinned to a CPU the process may not run on."""
    limits = hw.limits
    if limits.cpu_quota is not None:
        allowed = max(1, math.floor(limits.cpu_quota))
        if limits.effective_cpus > allowed:
            return (
                "limits.effective_cpus",
                f"{limits.effective_cpus} is more than the cgroup quota of {limits.cpu_quota:g} "
                f"CPUs allows ({allowed}: floored, at least 1)",
            )
    online = hw.cpu.online_cpus or tuple(range(hw.cpu.logical_cpus or 0))
    lists = [
        (key, set(cpus))
        for key, cpus in (
            ("cpu.online_cpus", online),
            ("limits.affinity_cpus", limits.affinity_cpus),
            ("limits.cpuset_cpus", limits.cpuset_cpus),
        )
        if cpus
    ]
    if not lists or not set.intersection(*(cpus for _, cpus in lists)):
        return None  # nothing known, or detect's fallback for lists that contradict
    for key, cpus in lists[1:]:
        outside = sorted(set(limits.usable_cpus) - cpus)
        if outside:
            return "limits.usable_cpus", f"CPU {outside[0]} is usable but not in {key}"
    return None


def _memory_sizes(hw: Hardware) -> tuple[tuple[str, int | None], ...]:
    """The memory a process runs in, as the probes read it: /proc/meminfo's MemTotal and the
    cgroup's memory.max or memory.limit_in_bytes. None is unknown or unlimited; 0 bytes is no
    memory at all, which no running kernel or process (hwtune detect's own) has."""
    return (
        ("limits.memory_bytes", hw.limits.memory_bytes),
        ("limits.memory_limit_bytes", hw.limits.memory_limit_bytes),
        ("memory.total_bytes", hw.memory.total_bytes),
    )
