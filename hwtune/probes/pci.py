"""A PCI device's place in the machine, from sysfs: its NUMA node and the CPUs next to it.

Shared by the GPU sources (NVML and nvidia-smi both give a PCI bus id; the kernel gives the
locality under ROOT/sys/bus/pci/devices/<domain:bus:device.function>/).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from hwtune.models.cpulist import MAX_NUMA_NODES, CpuListError, parse_cpulist
from hwtune.models.digits import parse_ascii_int
from hwtune.probes.root import read_text

# NVML's and nvidia-smi's PCI bus id: domain (up to 8 hex digits), bus, device, function.
_BUS_ID_RE = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def pci_sysfs_name(bus_id: str | None) -> str | None:
    """NVML's "00000000:07:00.0" as sysfs names it: "0000:07:00.0" (lower case, 4-digit domain)."""
    m = _BUS_ID_RE.match((bus_id or "").strip())
    if not m:
        return None
    domain, bus, device, function = m.groups()
    return f"{int(domain, 16):04x}:{bus}:{device}.{function}".lower()


def read_pci_locality(root: Path, bus_id: str | None) -> tuple[int | None, tuple[int, ...]]:
    """The NUMA node and local CPUs of a PCI device from sysfs; (None, ()) where unknown."""
    name = pci_sysfs_name(bus_id)
    if name is None:
        return None, ()
    base = root / "sys/bus/pci/devices" / name
    node: int | None = None
    cpus: tuple[int, ...] = ()
    try:
        value = parse_ascii_int(read_text(root, base / "numa_node"))
        # -1: the platform reports no locality; past MAX_NUMA_NODES no kernel's node
        node = value if 0 <= value < MAX_NUMA_NODES else None
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError, CpuListError):
        cpus = parse_cpulist(read_text(root, base / "local_cpulist"))
    return node, cpus
