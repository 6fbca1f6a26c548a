"""`/proc/cpuinfo`: read it (`read_text`) and parse it (`parse_cpuinfo`, pure).

The format differs by architecture (Linux arch/*/kernel/cpu* show_cpuinfo):
- x86: one block per processor with vendor_id, cpu family, model, stepping, model name, flags,
  physical id, core id, siblings, cpu cores.
- aarch64: one block per processor with Features, CPU implementer/part/variant/revision.
- ppc64: one block per processor with cpu ("POWER9, altivec supported") and revision
  ("2.2 (pvr 004e 1202)"), then a trailer block (timebase, platform, model, machine).
- s390x: a header (vendor_id IBM/S390, features), then one line per processor:
  "processor 0: version = FF,  identification = 0133E8,  machine = 2964" (arch/s390/kernel/
  processor.c show_cpu_summary), then optional per-CPU blocks keyed "cpu number".
- riscv: one block per processor with hart, isa ("rv64imafdc_zicsr_..."), mmu, and on newer
  kernels uarch ("sifive,u74-mc"), mvendorid, marchid, mimpid (arch/riscv/kernel/cpu.c).
Blocks are separated by blank lines; a new "processor" line also starts a record. Lines that are
not `key : value` (truncated or binary input) become `ParseProblem`s with their line number.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import NamedTuple

from hwtune.models.cpulist import MAX_CPU
from hwtune.models.digits import parse_u64
from hwtune.models.hardware import Arch
from hwtune.models.words import plural
from hwtune.probes.arch_ids import (
    PVR,
    RISCV_VENDORS,
    cpuinfo_arch,
    powerpc_vendor,
    riscv_extensions,
)
from hwtune.probes.issues import IssueLog
from hwtune.probes.root import MAX_SMALL, read_bytes

PROBE = "cpu"
_S390_PROCESSOR = re.compile(r"processor\s+(\d+)$")


class ParseProblem(NamedTuple):
    """A line that could not be understood; `line` is 1-based."""

    line: int
    reason: str


# The longest value a "key : value" line of /proc/cpuinfo or lscpu may hold. The longest the
# captures in tests/data hold is 1,267 bytes (an x86 flags line); 64 KiB is 50 times that. What
# is kept (model name, vendor, flags) goes into `detect --json`, where a 12 MB model name of
# non-ASCII text, escaped, came to 37 MB: more than `plan --hardware` reads (32 MiB).
MAX_VALUE_CHARS = 1 << 16


def overlong(key: str, value: str) -> str | None:
    """Why the value of `key` is not kept (longer than MAX_VALUE_CHARS), or None."""
    if len(value) <= MAX_VALUE_CHARS:
        return None
    return (
        f"{key[:40]!r}: a value of {len(value)} characters, longer than any line of the kernel "
        f"or lscpu ({MAX_VALUE_CHARS}): ignored"
    )


# Problems kept per file: enough to show what is wrong with it. A 32 MiB file (MAX_LARGE) of
# junk lines would otherwise make 16 million of them, gigabytes of objects.
MAX_PROBLEMS = 50


class ProblemList(list[ParseProblem]):
    """A file's problems: the first MAX_PROBLEMS, then one that counts the rest."""

    dropped = 0

    def append(self, problem: ParseProblem) -> None:
        if len(self) < MAX_PROBLEMS:
            super().append(problem)
            return
        self.dropped += 1
        note = ParseProblem(
            problem.line,
            f"{plural(self.dropped, 'more problem')} up to line {problem.line}, not listed",
        )
        if self.dropped == 1:
            super().append(note)
        else:
            self[-1] = note


class Cap:
    """A bound on what a parse keeps (keys, records, rows): `over` says whether the next item
    would pass `limit`, and the first time it does adds one problem, `why`, at that line; a
    parser then skips or stops. Bounds the cost of a file of junk under the size cap."""

    def __init__(self, problems: list[ParseProblem], limit: int, why: str) -> None:
        self.problems = problems
        self.limit = limit
        self.why = why
        self.said = False

    def over(self, size: int, line: int) -> bool:
        """Whether an item at `line`, after `size` kept, passes the limit (said once)."""
        if size < self.limit:
            return False
        if not self.said:
            self.problems.append(ParseProblem(line, self.why))
            self.said = True
        return True


class ProcessorRecord(NamedTuple):
    """The per-processor fields of one cpuinfo block."""

    processor: int | None
    line: int  # where the block starts, for messages
    physical_id: int | None = None
    core_id: int | None = None
    siblings: int | None = None
    cpu_cores: int | None = None
    arm_part: tuple[int, int] | None = None  # (implementer, part)


class CpuinfoFacts(NamedTuple):
    arch: Arch = "unknown"
    vendor: str | None = None
    model_name: str | None = None
    family: int | None = None
    model: int | None = None
    stepping: int | None = None
    implementer: str | None = None  # "0x41"
    part: str | None = None  # "0xd0c", of the first processor
    pvr: int | None = None  # POWER PVR version field
    platform: str | None = None  # POWER: PowerNV (bare metal), pSeries (PowerVM LPAR)
    machine: str | None = None  # s390 machine type ("2964"), RISC-V uarch ("sifive,u74-mc")
    riscv_id: str | None = None  # RISC-V "mvendorid:marchid"
    flags: tuple[str, ...] = ()
    processors: tuple[ProcessorRecord, ...] = ()
    problems: tuple[ParseProblem, ...] = ()


def read_text(
    root: Path, relative: str, issues: IssueLog, probe: str = "cpu", limit: int = MAX_SMALL
) -> str | None:
    """The text of `root/relative`, or None when absent; unreadable files become issues.

    Read inside the root, regular files only, at most `limit` bytes (`probes.root`). Bytes
    that are not UTF-8 are replaced (U+FFFD) so the parser can report the line.
    """
    try:
        data = read_bytes(root, relative, limit)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except OSError as err:
        issues.add(probe, f"cannot read: {err.strerror or err}", path=relative)
        return None
    return data.decode("utf-8", errors="replace")


def _int(value: str, base: int = 10) -> int | None:
    """A decimal (or, base 16, "0x41"/"41") number below 2**64 in ASCII; None otherwise:
    int() also takes "٥", "+5", "5_0" and thousands of digits, which no kernel writes."""
    text = value.strip()
    if base == 16:
        digits = text[2:] if text[:2].lower() == "0x" else text
        hex_digits = digits.isascii() and digits.isalnum() and len(digits) <= 16
        if not hex_digits or digits.strip("0123456789abcdefABCDEF"):
            return None
        return int(digits, 16)
    try:
        return parse_u64(text)
    except ValueError:
        return None


class _Split(NamedTuple):
    records: list[dict[str, str]]
    lines: list[dict[str, int]]  # per record: key -> its line number
    globals: dict[str, str]  # keys outside processor records (ppc trailer, old Arm headers)
    problems: list[ParseProblem]


# Keys kept per processor record (and outside records): the kernel's show_cpuinfo prints
# about 30 per CPU on x86 (arch/x86/kernel/cpu/proc.c), fewer on other architectures, and
# s390's header a few dozen; one record of 2.7 million different "kN: v" lines (a 31 MB file,
# under the size cap) took 4.6 s and 612 MB.
MAX_RECORD_KEYS = 256


def _split(text: str) -> _Split:
    """Split cpuinfo text into processor records and the keys outside them."""
    split = _Split([], [], {}, ProblemList())
    current: dict[str, str] | None = None
    # As lscpu's rows (lscpu._RowBudget): past MAX_CPU records, far beyond the 8192 CPUs of
    # x86-64's MAXSMP, the rest are bogus; 2.5 million tiny records in a 31 MB file took 19 s
    # and 1.5 GB.
    records = Cap(
        split.problems, MAX_CPU, f"more than {MAX_CPU} processor records: the rest are ignored"
    )
    keys = Cap(
        split.problems,
        MAX_RECORD_KEYS,
        f"more than {MAX_RECORD_KEYS} different keys in a record: the rest are ignored",
    )
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            current = None
            continue
        if "\x00" in line or "\ufffd" in line:
            split.problems.append(ParseProblem(number, "binary data, not text"))
            continue
        key, colon, value = line.partition(":")
        key = key.strip()
        if not colon or not key:
            got = line.strip()[:60]
            split.problems.append(ParseProblem(number, f"expected 'key : value', got {got!r}"))
            continue
        if why := overlong(key, value):
            split.problems.append(ParseProblem(number, why))
            continue
        if (key == "processor" or _S390_PROCESSOR.match(key)) and records.over(
            len(split.records), number
        ):
            break
        s390 = _S390_PROCESSOR.match(key)
        if s390:  # "processor 0: version = FF,  identification = 0133E8,  machine = 2964"
            record = {"processor": s390.group(1)}
            for item in value.split(","):
                name, equals, text = item.partition("=")
                if equals:
                    record[name.strip()] = text.strip()
            split.records.append(record)
            split.lines.append(dict.fromkeys(record, number))
            current = None
            continue
        if key == "processor":
            current = {}
            split.records.append(current)
            split.lines.append({})
        target = split.globals if current is None else current
        if key not in target and keys.over(len(target), number):
            continue
        target[key] = value.strip()
        if current is not None:
            split.lines[-1][key] = number
    return split


# What names an x86 part. Every logical CPU of one machine reports the same values, hybrid
# Intel parts included (P- and E-cores share family and model; CPUID leaf 0x1A tells them
# apart, not /proc/cpuinfo): records that differ are a spliced or damaged file.
_IDENTITY_KEYS = ("vendor_id", "cpu family", "model")


def _mixed_identity(
    records: list[dict[str, str]], lines: list[dict[str, int]]
) -> list[ParseProblem]:
    """One problem per identity key on which a record disagrees with the first record that
    has it; the facts are then the first record's (said in the problem)."""
    found = []
    for key in _IDENTITY_KEYS:
        first = next((r[key] for r in records if key in r), None)
        if first is None:
            continue
        for record, numbers in zip(records, lines, strict=True):
            if key in record and record[key] != first:
                found.append(
                    ParseProblem(
                        numbers[key],
                        f"{key!r} is {record[key][:40]!r} on this processor but "
                        f"{first[:40]!r} on the first; the first processor's identity is used",
                    )
                )
                break
    return found


def parse_cpuinfo(text: str) -> CpuinfoFacts:
    """Parse /proc/cpuinfo text of any architecture Linux prints it for."""
    split = _split(text)
    records, problems = split.records, split.problems

    def field(name: str) -> str | None:
        for record in records:
            if name in record:
                return record[name]
        return split.globals.get(name)

    def number(name: str) -> int | None:
        for record, lines in zip(records, split.lines, strict=True):
            if name in record:
                value = _int(record[name])
                if value is None:
                    problems.append(
                        ParseProblem(
                            lines[name], f"{name!r} is not a number: {record[name][:40]!r}"
                        )
                    )
                return value
        return None

    processors = tuple(
        _processor(record, lines, problems)
        for record, lines in zip(records, split.lines, strict=True)
    )
    vendor = field("vendor_id")
    flags_key = next((k for k in ("flags", "Features", "features") if field(k) is not None), None)
    flags = _common_flags(records, flags_key, field(flags_key) if flags_key else None)
    isa = field("isa") or field("ISA")
    arch = cpuinfo_arch(field, flags)
    facts = CpuinfoFacts(arch=arch, flags=flags, processors=processors)
    if arch in ("x86_64", "i686"):
        problems.extend(_mixed_identity(records, split.lines))
        facts = facts._replace(
            vendor=vendor,
            model_name=field("model name"),
            family=number("cpu family"),
            model=number("model"),
            # "stepping : unknown" is what some hypervisors give; not worth a problem.
            stepping=_int(field("stepping") or ""),
        )
    elif arch in ("aarch64", "armv7l"):
        first = next((p.arm_part for p in processors if p.arm_part), _arm_part(split.globals))
        facts = facts._replace(
            implementer=f"{first[0]:#04x}" if first else None,
            part=f"{first[1]:#05x}" if first else None,
            model_name=split.globals.get("Processor") or field("model name"),
        )
    elif arch in ("ppc64le", "ppc64", "ppc"):
        match = PVR.search(field("revision") or "")
        pvr = int(match.group(1), 16) if match else None
        facts = facts._replace(
            vendor=powerpc_vendor(field("cpu") or "", pvr),
            model_name=field("cpu"),
            platform=field("platform"),
            pvr=pvr,
        )
    elif arch in ("riscv64", "riscv32"):
        mvendorid, marchid = _int(field("mvendorid") or "", 16), _int(field("marchid") or "", 16)
        facts = facts._replace(
            vendor=RISCV_VENDORS.get(mvendorid) if mvendorid is not None else None,
            model_name=field("model name") or field("uarch"),
            machine=field("uarch"),
            riscv_id=f"{mvendorid:#x}:{marchid:#x}"
            if mvendorid is not None and marchid is not None
            else None,
            flags=riscv_extensions(isa or ""),
        )
    elif arch == "s390x":
        facts = facts._replace(
            vendor=vendor,
            machine=field("machine"),  # lscpu prints no model name either
        )
    elif arch == "sparc64":
        cpu = field("cpu") or ""
        facts = facts._replace(
            vendor="Fujitsu" if cpu.upper().startswith("SPARC64") else "Oracle", model_name=cpu
        )
    elif arch == "loongarch64":
        facts = facts._replace(
            vendor="Loongson", model_name=field("Model Name") or field("model name")
        )
    elif arch == "ia64":  # "vendor", not "vendor_id" (arch/ia64/kernel/setup.c)
        facts = facts._replace(vendor=field("vendor"), model_name=field("model name"))
    else:
        facts = facts._replace(vendor=vendor, model_name=field("model name") or field("cpu model"))
    return facts._replace(problems=tuple(problems))


def _arm_part(record: dict[str, str]) -> tuple[int, int] | None:
    implementer, part = record.get("CPU implementer"), record.get("CPU part")
    if implementer is None or part is None:
        return None
    imp, prt = _int(implementer, 16), _int(part, 16)
    return (imp, prt) if imp is not None and prt is not None else None


def _processor(
    record: dict[str, str], lines: dict[str, int], problems: list[ParseProblem]
) -> ProcessorRecord:
    def number(key: str) -> int | None:
        if key not in record:
            return None
        value = _int(record[key])
        if value is None:
            bad = record[key][:40]
            problems.append(ParseProblem(lines[key], f"{key!r} is not a number: {bad!r}"))
        return value

    return ProcessorRecord(
        processor=number("processor"),
        line=lines.get("processor", 0),
        physical_id=number("physical id"),
        core_id=number("core id"),
        siblings=number("siblings"),
        cpu_cores=number("cpu cores"),
        arm_part=_arm_part(record),
    )


def _common_flags(
    records: list[dict[str, str]], key: str | None, first: str | None
) -> tuple[str, ...]:
    """Flags every processor has: a compiler target must not use what one core lacks."""
    if key is None or first is None:
        return ()
    flags = set(first.split())
    for record in records:
        text = record.get(key)
        if text is not None and text != first:
            flags &= set(text.split())
    return tuple(sorted(flags))


class Topology:
    """What one topology source established; None where it could not tell."""

    __slots__ = (
        "basis",
        "cores",
        "logical",
        "nodes",
        "online",
        "places",
        "smt",
        "sockets",
        "threads_per_core",
    )

    def __init__(
        self, logical: int | None = None, online: tuple[int, ...] = (), basis: str = ""
    ) -> None:
        self.logical = logical
        self.online = online
        self.basis = basis
        self.sockets: int | None = None
        self.cores: int | None = None
        self.threads_per_core: int | None = None
        self.smt: bool | None = None
        self.places: dict[int, tuple[int | None, Hashable]] = {}  # cpu -> (socket, core group)
        self.nodes: dict[int, int] = {}  # cpu -> NUMA node

    def count(self, places: Mapping[int, tuple[int | None, Hashable]]) -> Topology:
        """Fill sockets, cores, threads per core and SMT from per-CPU (socket, core) places."""
        self.places = dict(places)
        packages = {socket for socket, _ in places.values()}
        self.sockets = None if None in packages or not packages else len(packages)
        per_core = Counter(group for _, group in places.values())
        self.cores = len(per_core) or None
        threads = set(per_core.values())
        self.threads_per_core = threads.pop() if len(threads) == 1 else None
        self.smt = max(per_core.values()) > 1 if per_core else None
        return self


def _misnumbered(records: tuple[ProcessorRecord, ...]) -> tuple[int, str] | None:
    """(line, why) of the first processor numbered as no kernel numbers one: beyond MAX_CPU,
    or again (the kernel prints each online CPU once, arch/*/kernel show_cpuinfo walking
    cpu_online_mask); None when every number is possible and once."""
    first: dict[int, int] = {}
    for record in records:
        number = record.processor
        if number is None:
            continue
        if number >= MAX_CPU:
            return record.line, f"processor {number} is beyond any CPU number (< {MAX_CPU})"
        if number in first:
            return record.line, f"processor {number} again (first on line {first[number]})"
        first[number] = record.line
    return None


def cpuinfo_topology(cpuinfo: CpuinfoFacts, issues: IssueLog) -> Topology:
    """Topology from `physical id`/`core id`, only when the records are self-consistent.

    A file is taken as complete when its processors are numbered 0..n-1 and each package holds
    `siblings` records; without per-package counts (Arm, POWER) at least two records are needed,
    since archspec-style captures keep a single record of a much larger machine.
    """
    records = cpuinfo.processors
    numbers = [r.processor for r in records if r.processor is not None]
    topo = Topology(basis="proc/cpuinfo")
    siblings = {r.siblings for r in records if r.siblings is not None}
    per_package = {r.cpu_cores for r in records if r.cpu_cores is not None}
    sib = siblings.pop() if len(siblings) == 1 else None
    cores = per_package.pop() if len(per_package) == 1 else None
    # Threads per core of a package is a fact of each record, true even of a fragment.
    if sib and cores and sib % cores == 0:
        topo.threads_per_core = sib // cores
        topo.smt = topo.threads_per_core > 1
    packages = Counter(r.physical_id for r in records)
    known_packages = bool(sib) and None not in packages
    contiguous = len(numbers) == len(records) and sorted(numbers) == list(range(len(numbers)))
    if known_packages:
        consistent = contiguous and all(count == sib for count in packages.values())
    else:
        consistent = contiguous and len(numbers) >= 2
    if not consistent and (wrong := _misnumbered(records)) is not None:
        issues.add(PROBE, f"{wrong[1]}: topology unknown", path="proc/cpuinfo", line=wrong[0])
        return topo
    if not consistent:
        listed = (sib or 0) * len(packages) if known_packages else 0
        at_least = max(max(numbers, default=-1) + 1, listed)
        if at_least > len(records):
            reason = f"only {len(records)} of >={at_least} processors present: topology unknown"
        else:
            reason = (
                f"{len(records)} processor record(s) and no sysfs or lscpu to show they "
                "are all the machine has: counts unknown"
            )
        issues.add(PROBE, reason, path="proc/cpuinfo")
        return topo
    topo.logical = len(numbers)
    topo.online = tuple(sorted(numbers))
    if all(r.physical_id is not None and r.core_id is not None for r in records):
        threads, smt = topo.threads_per_core, topo.smt
        topo.count(
            {
                r.processor: (r.physical_id, (r.physical_id, r.core_id))
                for r in records
                if r.processor is not None
            }
        )
        topo.threads_per_core = topo.threads_per_core or threads
        topo.smt = topo.smt if topo.smt is not None else smt
    else:
        issues.add(
            PROBE, "no physical id / core id lines: sockets and cores unknown", path="proc/cpuinfo"
        )
    return topo
