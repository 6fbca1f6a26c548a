"""Build sysfs trees the way the kernel prints them, for the topology and NUMA tests.

Formats (kernel sources named where they are defined):
- CPU lists "0-3,8-11": bitmap_print_list_to_buf() (lib/bitmap-str.c) - `online`, `*_list`,
  `node*/cpulist`;
- hex masks "00000000,000000f0": bitmap_string() (lib/vsprintf.c, "%*pb") - 32-bit words, most
  significant first, the first word only as wide as nr_cpu_ids needs - `thread_siblings`,
  `core_siblings`, `package_cpus`, `shared_cpu_map`, `node*/cpumap`;
- "0 1 2 3 ": show_cpus() in drivers/cpufreq/cpufreq.c - `related_cpus`, `affected_cpus`;
- every file ends with a newline; physical_package_id is -1 where the architecture has none
  (include/linux/topology.h's default).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hwtune.models.cpulist import format_cpulist

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def cpumask(cpus: Iterable[int], nr_cpu_ids: int) -> str:
    """The kernel's "%*pb" rendering of a CPU set on a kernel with `nr_cpu_ids` CPUs."""
    value = sum(1 << cpu for cpu in set(cpus))
    words = []
    for index in range((nr_cpu_ids + 31) // 32):
        words.append((value >> (32 * index)) & 0xFFFFFFFF)
    first_bits = nr_cpu_ids % 32 or 32
    text = [f"{words[-1]:0{(first_bits + 3) // 4}x}"]
    text += [f"{word:08x}" for word in reversed(words[:-1])]
    return ",".join(text)


def cpufreq_cpus(cpus: Iterable[int]) -> str:
    """show_cpus(): each CPU as "%u ", the trailing space kept (write() adds the newline)."""
    return "".join(f"{cpu} " for cpu in sorted(cpus))


def cpu_topology(
    root: Path,
    cpu: int,
    *,
    nr_cpu_ids: int,
    siblings: Iterable[int],
    package: int | None,
    package_cpus: Iterable[int],
    core_id: int = 0,
    lists: bool = True,
    extra: dict[str, str] | None = None,
) -> None:
    """cpuN/topology as a kernel writes it; `lists=False` leaves only the hex masks (pre-4.x
    kernels, util-linux's ia64 and sparc dumps); `package=None` leaves physical_package_id out."""
    base = f"{CPU}/cpu{cpu}/topology"
    siblings, package_cpus = sorted(siblings), sorted(package_cpus)
    if package is not None:
        write(root, f"{base}/physical_package_id", str(package))
    write(root, f"{base}/core_id", str(core_id))
    write(root, f"{base}/thread_siblings", cpumask(siblings, nr_cpu_ids))
    write(root, f"{base}/core_siblings", cpumask(package_cpus, nr_cpu_ids))
    if lists:
        write(root, f"{base}/thread_siblings_list", format_cpulist(siblings))
        write(root, f"{base}/core_siblings_list", format_cpulist(package_cpus))
    for name, text in (extra or {}).items():
        write(root, f"{base}/{name}", text)


def cache(
    root: Path,
    cpu: int,
    index: int,
    level: int,
    kind: str,
    size: str,
    shared: list[int],
    *,
    nr_cpu_ids: int,
) -> None:
    base = f"{CPU}/cpu{cpu}/cache/index{index}"
    write(root, f"{base}/level", str(level))
    write(root, f"{base}/type", kind)
    write(root, f"{base}/size", size)
    write(root, f"{base}/shared_cpu_map", cpumask(shared, nr_cpu_ids))
    write(root, f"{base}/shared_cpu_list", format_cpulist(shared))
