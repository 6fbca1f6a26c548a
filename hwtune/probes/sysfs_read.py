"""Small-file reads under a root for the sysfs probes, collecting problems instead of raising.

The kernel prints CPU sets three ways, each parsed here as the kernel writes it:
- lists ("0-3,8-11"): `online`, `*_list` topology files, `node*/cpulist` (bitmap_print_list);
- hex masks ("00000000,000000f0"): `thread_siblings`, `core_siblings`, `package_cpus`,
  `shared_cpu_map`, `node*/cpumap` (bitmap_print_bitmask), the only form older kernels have;
- space-separated numbers ("0 1 2 3 "): cpufreq's `related_cpus` and `affected_cpus`
  (show_cpus() in drivers/cpufreq/cpufreq.c prints "%u " per CPU).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from hwtune.models.cpulist import MAX_CPU, CpuListError, parse_cpulist, parse_cpumask
from hwtune.models.digits import is_ascii_digits, parse_u64
from hwtune.probes.root import list_dir, read_text


class SysfsProblem(NamedTuple):
    path: str  # relative to the root
    reason: str


class SysfsReader:
    """Reads files under `root`; a missing file is None, any other failure a problem."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.problems: list[SysfsProblem] = []

    def text(self, relative: str) -> str | None:
        try:
            # inside the root, regular files only, capped (probes.root)
            return read_text(Path(self.root), relative).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            self.problems.append(SysfsProblem(relative, f"cannot read: {err.strerror or err}"))
            return None

    def cpus(self, relative: str) -> tuple[int, ...] | None:
        """A CPU list file ("0-3,8-11")."""
        value = self.text(relative)
        if value is None:
            return None
        try:
            return parse_cpulist(value)
        except CpuListError as err:
            self.problems.append(SysfsProblem(relative, str(err)))
            return None

    def mask(self, relative: str) -> tuple[int, ...] | None:
        """A hex CPU mask file ("ff", "00000000,000000f0")."""
        value = self.text(relative)
        if value is None:
            return None
        try:
            return parse_cpumask(value)
        except CpuListError as err:
            self.problems.append(SysfsProblem(relative, str(err)))
            return None

    def cpu_set(self, base: str, names: Iterable[str]) -> tuple[tuple[int, ...], str] | None:
        """The first of `names` under `base` that reads, and its name: `*_list`/`cpulist`
        files are lists, the others hex masks."""
        for name in names:
            list_form = name.endswith("_list") or name == "cpulist"
            found = (self.cpus if list_form else self.mask)(f"{base}/{name}")
            if found is not None:
                return found, name
        return None

    def cpu_words(self, relative: str) -> tuple[int, ...] | None:
        """cpufreq's space-separated CPU numbers; a list ("0-3") is accepted too."""
        value = self.text(relative)
        if value is None:
            return None
        words = value.split()
        if words and all(is_ascii_digits(w) and len(w) <= len(str(MAX_CPU)) for w in words):
            numbers = sorted({int(w) for w in words})
            if numbers[-1] < MAX_CPU:
                return tuple(numbers)
        try:
            return parse_cpulist(value)
        except CpuListError:
            bad = value[:40]
            self.problems.append(
                SysfsProblem(relative, f"not space-separated CPU numbers: {bad!r}")
            )
            return None

    def number(self, relative: str) -> int | None:
        value = self.text(relative)
        if value is None:
            return None
        try:
            return parse_u64(value, signed=True)  # physical_package_id is -1 when unknown
        except ValueError as err:
            self.problems.append(SysfsProblem(relative, f"not a number: {err}"))
            return None

    def names(self, relative: str, pattern: re.Pattern[str]) -> list[int]:
        """The numbers of the entries of a directory whose names match `pattern` (one group)."""
        try:
            entries = list_dir(Path(self.root), relative)  # inside the root (probes.root)
        except OSError:
            return []
        return sorted(int(m.group(1)) for name in entries if (m := pattern.match(name)))

    def cpu_names(self, relative: str, pattern: re.Pattern[str]) -> list[int]:
        """`names` of cpuN entries, below MAX_CPU: a larger N is no CPU a kernel has (the
        highest CPU list hwtune reads, models/cpulist.py), and one problem names them. Taken
        as CPUs, "cpu" + 250 digits made detect --json write a number plan cannot read."""
        found = self.names(relative, pattern)
        beyond = [cpu for cpu in found if cpu >= MAX_CPU]
        if beyond:
            first = str(beyond[0]) if len(str(beyond[0])) <= 12 else f"{str(beyond[0])[:12]}…"
            self.problems.append(
                SysfsProblem(
                    relative,
                    f"{len(beyond)} cpuN entr{'y' if len(beyond) == 1 else 'ies'} beyond CPU "
                    f"{MAX_CPU - 1} (cpu{first}…), which no kernel has: ignored",
                )
            )
        return [cpu for cpu in found if cpu < MAX_CPU]
