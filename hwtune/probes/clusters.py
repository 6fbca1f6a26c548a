"""Clusters are not sockets: undo the package ids Arm and RISC-V SoC kernels give each cluster.

Until Linux 6.3, drivers/base/arch_topology.c's device-tree path (parse_cluster()) set each
CPU's package id to its cluster's index in `cpu-map`; phone and laptop kernels (Android GKI
5.10-6.1) still do. An 8-core DynamIQ SoC (3x Cortex-A510, 2x A710, 2x A715, 1x X3, util-linux's
`arm-A510-A710-A715-X3` dump) then shows `physical_package_id` 0, 1 and 2 and lscpu prints one
"Socket(s): 1" per core type. It is one socket. Two physical facts tell a cluster from a package:
- a cache shared by CPUs of several "packages" (DynamIQ's L3 spans every cluster), since no cache
  spans two sockets;
- packages whose core types differ (by capacity, top frequency or CPU part): multi-socket Arm
  servers (ThunderX2, Altra, Grace) are built of identical sockets.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from hwtune.models.cpulist import format_cpulist

Core = TypeVar("Core", bound=Hashable)


def merge_clusters(
    places: Mapping[int, tuple[int | None, Core]],
    spans: Sequence[Sequence[int]],
    types: Mapping[int, Hashable],
) -> tuple[dict[int, tuple[int | None, Core]], str]:
    """`places` with cluster "packages" joined into sockets, and a note saying why ("" if none)."""
    packages: dict[int, set[int]] = {}
    package_of: dict[int, int] = {}
    for cpu, (package, _) in places.items():
        if package is None:
            return dict(places), ""
        packages.setdefault(package, set()).add(cpu)
        package_of[cpu] = package
    if len(packages) < 2:
        return dict(places), ""
    parent = {package: package for package in packages}

    def root(package: int) -> int:
        while parent[package] != package:
            package = parent[package]
        return package

    reasons = []
    for span in spans:
        touched = sorted({package_of[c] for c in span if c in package_of})
        if len(touched) > 1:
            for other in touched[1:]:
                parent[root(other)] = root(touched[0])
            reasons.append(
                f"a cache shared by CPUs {format_cpulist(span)} spans package ids "
                + ",".join(map(str, touched))
            )
    kinds = {
        package: frozenset(types[c] for c in cpus if c in types)
        for package, cpus in packages.items()
    }
    if all(kinds.values()) and len(set(kinds.values())) > 1:
        for package in packages:
            parent[root(package)] = root(min(packages))
        reasons.append("the package ids hold different core types")
    joined = {root(package) for package in packages}
    if len(joined) == len(packages):
        return dict(places), ""
    number = {group: index for index, group in enumerate(sorted(joined))}
    merged: dict[int, tuple[int | None, Core]] = {
        cpu: (number[root(package_of[cpu])], core) for cpu, (_, core) in places.items()
    }
    note = (
        f"package ids {','.join(map(str, sorted(packages)))} are clusters of one SoC, "
        f"counted as {len(joined)} socket{'s' if len(joined) > 1 else ''} ({reasons[0]})"
    )
    return merged, note
