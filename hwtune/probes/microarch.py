"""Which microarchitecture a CPU is, as the name GCC's -march/-mcpu takes, and how that was told.

The knowledge is data (`knowledge/data/microarchitectures.json`); this module is the matcher,
pure and I/O-free apart from loading that table. It follows archspec's approach, with ids first:

1. Ids: vendor + family + model (x86), implementer + part (Arm), PVR or the cpu name (POWER)
   select the candidate entries.
2. Flags verify them: an entry fits when every flag it requires (its own and its parents') is
   present. Among fitting candidates the most specific wins (Skylake-SP, Cascade Lake and Cooper
   Lake share model 0x55 and differ only by avx512_vnni / avx512_bf16).
3. When the model is unknown, or a hypervisor hides a required flag, the most specific entry of
   the same vendor (or a generic one) whose required flags are all present is taken instead,
   ending at an x86-64-vN level; an Arm core told by implementer and part gets a generic
   Armv8/v9 level only, never another core. Entries with no flags of their own (Emerald
   Rapids, Raptor Lake…) are never chosen this way: flags cannot tell them from their parent.
4. Nothing fits: no name, and the reason, which the caller records as an issue.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal, NamedTuple

from hwtune.errors import KnowledgeError
from hwtune.knowledge import load_table
from hwtune.models.hardware import Arch

# MIDR_EL1.Implementer codes -> the vendor name lscpu prints. Sources: Arm ARM (MIDR_EL1),
# archspec-json "conversions.arm_vendors", util-linux sys-utils/lscpu-arm.c (0xc0, 0x6d, 0x70).
ARM_IMPLEMENTERS = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x44: "DEC",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x49: "Infineon",
    0x4D: "Motorola",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x53: "Samsung",
    0x56: "Marvell",
    0x61: "Apple",
    0x66: "Faraday",
    0x68: "HXT",
    0x69: "Intel",
    0x6D: "Microsoft",
    0x70: "Phytium",
    0xC0: "Ampere",
}


@dataclass(frozen=True, slots=True)
class MicroarchEntry:
    """One row of `microarchitectures.json` (see its `_doc`)."""

    key: str  # the GCC -march/-mcpu name
    arch: Arch
    name: str
    source: str
    vendor: str | None = None  # x86 vendor_id, Arm implementer ("0x41"), "IBM"; None: generic
    option: Literal["-march", "-mcpu"] = "-march"
    march: str | None = None  # the compiler's name when it is not the key (dhyana -> znver1)
    parents: tuple[str, ...] = ()
    x86_ids: tuple[str, ...] = ()
    hybrid_x86_ids: tuple[str, ...] = ()  # those of x86_ids whose parts may have P and E cores
    arm_ids: tuple[str, ...] = ()
    power_pvrs: tuple[str, ...] = ()
    riscv_ids: tuple[str, ...] = ()  # "MVENDORID:MARCHID", as /proc/cpuinfo prints them
    names: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    extra_flags: tuple[str, ...] = ()
    level: int | None = None
    threads_per_core: int | None = None
    gcc: str | None = None
    clang: str | None = None


class CpuIdentity(NamedTuple):
    """What a CPU says about itself, from /proc/cpuinfo or lscpu."""

    arch: Arch
    vendor: str | None = None  # x86 vendor_id; for Arm the implementer, e.g. "0x41"
    family: int | None = None
    model: int | None = None
    stepping: int | None = None
    arm_parts: tuple[tuple[int, int], ...] = ()  # (implementer, part) of each core kind seen
    pvr: int | None = None  # POWER PVR version field, e.g. 0x004E
    cpu_name: str | None = (
        None  # POWER "cpu" line, lscpu's Arm model name, RISC-V uarch, s390 machine
    )
    riscv_id: str | None = None  # "0x710:0x8000000058000001": mvendorid:marchid
    flags: frozenset[str] = frozenset()


class Identification(NamedTuple):
    microarch: str | None
    basis: str
    x86_64_level: int | None = None
    threads_per_core: int | None = None  # a fact of the core design (Neoverse: 1), when known
    problem: str | None = None  # why it could not be told; the caller records it as an issue
    # The entry the model ids name, even where hidden flags rule it out as a compile target: it
    # decides -mtune (a Zen 5 guest whose hypervisor masks rdseed still tunes for Zen 5).
    model: str | None = None


class _Table:
    """The entries with their flag closures and id indexes, built once per loaded table."""

    def __init__(self, entries: tuple[MicroarchEntry, ...]) -> None:
        self.by_key = {e.key: e for e in entries}
        self.order = {e.key: i for i, e in enumerate(entries)}
        self.required: dict[str, frozenset[str]] = {}
        self.depth: dict[str, int] = {}
        for entry in entries:
            self._close(entry.key, ())
        self.x86: list[tuple[str, int, int, int, MicroarchEntry]] = []
        self.hybrid: list[tuple[str, int, int, int, MicroarchEntry]] = []
        self.arm: dict[tuple[int, int], list[MicroarchEntry]] = {}
        self.pvr: dict[int, list[MicroarchEntry]] = {}
        self.names: dict[str, list[MicroarchEntry]] = {}
        self.riscv: dict[str, list[MicroarchEntry]] = {}
        for entry in entries:
            self._index(entry)

    def _close(self, key: str, trail: tuple[str, ...]) -> frozenset[str]:
        if key in self.required:
            return self.required[key]
        if key in trail:
            cycle = " -> ".join((*trail, key))
            raise KnowledgeError(f"microarchitectures: parents form a cycle: {cycle}")
        entry = self.by_key.get(key)
        if entry is None:
            raise KnowledgeError(f"microarchitectures: {trail[-1]!r} names unknown parent {key!r}")
        flags = set(entry.flags)
        depth = 0
        for parent in entry.parents:
            flags |= self._close(parent, (*trail, key))
            depth = max(depth, self.depth[parent] + 1)
        self.required[key] = frozenset(flags)
        self.depth[key] = depth
        return self.required[key]

    def _index(self, entry: MicroarchEntry) -> None:
        try:
            for spec in entry.x86_ids:
                self.x86.append((entry.vendor or "", *_x86_range(spec), entry))
            for spec in entry.hybrid_x86_ids:
                if spec not in entry.x86_ids:
                    raise ValueError(f"hybrid id {spec} is not one of its x86_ids")
                self.hybrid.append((entry.vendor or "", *_x86_range(spec), entry))
            for spec in entry.arm_ids:
                implementer, _, part = spec.partition(":")
                self.arm.setdefault((int(implementer, 16), int(part, 16)), []).append(entry)
            for pvr in entry.power_pvrs:
                self.pvr.setdefault(int(pvr, 16), []).append(entry)
            for spec in entry.riscv_ids:
                vendor, _, arch_id = spec.partition(":")
                self.riscv.setdefault(f"{int(vendor, 16):#x}:{int(arch_id, 16):#x}", []).append(
                    entry
                )
        except ValueError as err:
            message = f"microarchitectures: entry {entry.key!r}: bad id: {err}"
            raise KnowledgeError(message) from err
        for name in entry.names:
            self.names.setdefault(name.lower(), []).append(entry)

    def optional(self, key: str) -> frozenset[str]:
        """`extra_flags` of `key` and its ancestors that it does not require."""
        extra: set[str] = set()
        pending = [key]
        while pending:
            entry = self.by_key[pending.pop()]
            extra |= set(entry.extra_flags)
            pending.extend(entry.parents)
        return frozenset(extra - self.required[key])

    def specificity(self, entry: MicroarchEntry) -> tuple[int, int, int]:
        return (len(self.required[entry.key]), self.depth[entry.key], self.order[entry.key])


def _x86_range(spec: str) -> tuple[int, int, int]:
    """'FAMILY:MODEL' or 'FAMILY:FIRST-LAST' -> (family, first model, last model)."""
    family, _, models = spec.partition(":")
    first, _, last = models.partition("-")
    return int(family), int(first, 16), int(last or first, 16)


def hybrid_model(
    vendor: str | None,
    family: int | None,
    model: int | None,
    entries: tuple[MicroarchEntry, ...] | None = None,
) -> MicroarchEntry | None:
    """The entry whose `hybrid_x86_ids` name this x86 model: a part that may have P- and
    E-cores. None for every other CPU."""
    if vendor is None or family is None or model is None:
        return None
    table = _compile(load_microarchitectures() if entries is None else entries)
    return next(
        (
            entry
            for seller, fam, lo, hi, entry in table.hybrid
            if seller == vendor and fam == family and lo <= model <= hi
        ),
        None,
    )


def load_microarchitectures() -> tuple[MicroarchEntry, ...]:
    """The shipped table merged with user additions (`hwtune.knowledge.load_table`)."""
    return load_table("microarchitectures", MicroarchEntry)


@functools.lru_cache(maxsize=4)
def _compile(entries: tuple[MicroarchEntry, ...]) -> _Table:
    return _Table(entries)


def x86_64_level(
    flags: frozenset[str], entries: tuple[MicroarchEntry, ...] | None = None
) -> int | None:
    """The highest x86-64 psABI level (1-4) whose flags are all present; None without flags."""
    table = _compile(load_microarchitectures() if entries is None else entries)
    if not flags:
        return None
    levels = [
        e.level
        for e in table.by_key.values()
        if e.level is not None and table.required[e.key] <= flags
    ]
    return max(levels, default=None)


# Architectures Linux runs on that hwtune has no table for, and what to call them in an issue.
UNSUPPORTED_ARCHES = {
    "armv7l": "32-bit Arm",
    "i686": "32-bit x86",
    "ppc": "32-bit PowerPC",
    "riscv32": "32-bit RISC-V",
    "loongarch64": "LoongArch",
    "sparc64": "SPARC",
    "mips": "MIPS",
    "ia64": "Itanium",
}


def identify(
    cpu: CpuIdentity, entries: tuple[MicroarchEntry, ...] | None = None
) -> Identification:
    """Tell the microarchitecture of `cpu` (see the module docstring for the order of evidence)."""
    table = _compile(load_microarchitectures() if entries is None else entries)
    level = x86_64_level(cpu.flags, entries) if cpu.arch == "x86_64" else None
    if not any(e.arch == cpu.arch for e in table.by_key.values()):
        if cpu.arch in UNSUPPORTED_ARCHES:
            reason = (
                f"{UNSUPPORTED_ARCHES[cpu.arch]} ({cpu.arch}) is not supported: hwtune knows no "
                "compiler targets for it and TensorFlow publishes no build for it; arch and "
                "vendor only"
            )
        elif cpu.arch == "unknown":
            reason = "architecture unknown"
        else:
            reason = f"no microarchitectures known for {cpu.arch}"
        return Identification(None, reason, level, problem=reason)
    described, candidates = _candidates(table, cpu)
    # POWER and s390 captures may list no flags at all; ids alone decide there.
    flags_known = bool(cpu.flags) or cpu.arch in ("ppc64le", "ppc64")
    fitting = [e for e in candidates if not flags_known or table.required[e.key] <= cpu.flags]
    if fitting:
        best = max(fitting, key=table.specificity)
        basis = f"{described}: {best.name}"
        if not flags_known:
            basis += " (no flags to verify it against)"
        elif table.required[best.key]:
            hidden = sorted(table.optional(best.key) - cpu.flags)
            basis += "; its required flags are present"
            if hidden:
                basis += (
                    "; not visible to this system (hidden by a hypervisor, or a kernel older "
                    f"than the flag): {' '.join(hidden)}"
                )
        return Identification(best.key, basis, level, best.threads_per_core, model=best.key)
    model = max(candidates, key=table.specificity) if candidates else None
    fallback = _by_flags(table, cpu, named=model is not None) if flags_known else None
    if model is not None:
        missing = " ".join(masked_flags(model.key, cpu.flags, entries))
        lead = (
            f"{described} is {model.name}, but flags {missing} are absent (masked by a "
            "hypervisor or the firmware?): visible flags decide the target, the model decides "
            "tuning"
        )
    else:
        lead = f"no table entry for {described}"
    model_key = model.key if model else None
    if fallback is None:
        tail = "no target's required flags are all present" if flags_known else "no flags to go by"
        reason = f"{lead}; {tail}"
        return Identification(None, reason, level, problem=reason, model=model_key)
    basis = f"{lead}; most specific target whose required flags are all present: {fallback.key}"
    # A target taken by flags alone says nothing about the core's design, so no threads per core.
    return Identification(fallback.key, basis, level, model=model_key)


def masked_flags(
    key: str, flags: frozenset[str], entries: tuple[MicroarchEntry, ...] | None = None
) -> list[str]:
    """The flags `key` requires that `flags` lacks: the oldest ancestor's first, then shorter
    names first (movdiri before movdir64b), then by name."""
    table = _compile(load_microarchitectures() if entries is None else entries)
    missing = table.required.get(key, frozenset()) - flags
    return sorted(missing, key=lambda flag: (_introduced_at(table, key, flag), len(flag), flag))


def _introduced_at(table: _Table, key: str, flag: str) -> int:
    """How deep in `key`'s ancestry `flag` first appears (0: the root)."""
    depths = [
        table.depth[k]
        for k, required in table.required.items()
        if flag in table.by_key[k].flags and table.required[key] >= required
    ]
    return min(depths, default=0)


def compiler_name(entry: MicroarchEntry) -> str:
    """The name -march/-mcpu/-mtune takes for `entry`."""
    return entry.march or entry.key


def _candidates(table: _Table, cpu: CpuIdentity) -> tuple[str, list[MicroarchEntry]]:
    if cpu.arch == "x86_64":
        if cpu.family is None or cpu.model is None:
            return f"{cpu.vendor or 'unknown vendor'} (no family/model)", []
        vendor = cpu.vendor or "unknown vendor"
        described = f"{vendor} family {cpu.family} model {cpu.model:#x} ({cpu.model})"
        if cpu.stepping is not None:
            described += f" stepping {cpu.stepping}"
        found = [
            entry
            for vendor, family, lo, hi, entry in table.x86
            if vendor == (cpu.vendor or "") and family == cpu.family and lo <= cpu.model <= hi
        ]
        return described, found
    if cpu.arch == "aarch64" and cpu.arm_parts:
        found = [e for ids in cpu.arm_parts for e in table.arm.get(ids, [])]
        parts = ", ".join(f"implementer {i:#04x} part {p:#05x}" for i, p in cpu.arm_parts)
        return f"CPU {parts}", found
    if cpu.arch == "riscv64" and cpu.riscv_id and cpu.riscv_id in table.riscv:
        return f"mvendorid:marchid {cpu.riscv_id}", list(table.riscv[cpu.riscv_id])
    # A PowerVM LPAR in compatibility mode prints "POWER8 (architected)" on POWER9 hardware, whose
    # PVR it still shows: the architected level is what code may use, so the name wins there.
    architected = "architected" in (cpu.cpu_name or "").lower()
    if cpu.arch in ("ppc64le", "ppc64") and cpu.pvr is not None and not architected:
        found = [e for e in table.pvr.get(cpu.pvr, []) if e.arch == cpu.arch]
        if found or not cpu.cpu_name:
            return f"pvr {cpu.pvr:#06x}", found
    if cpu.cpu_name:
        # "POWER9 (architected), altivec supported" -> "power9"; lscpu's Arm "Neoverse-N1" as is.
        name = cpu.cpu_name.split(",")[0].split("(")[0].strip().lower()
        if cpu.arch == "riscv64":  # "sifive,u74-mc": the comma is part of the name
            name = cpu.cpu_name.strip().lower()
        found = [e for e in table.names.get(name, []) if e.arch == cpu.arch]
        label = "machine type" if cpu.arch == "s390x" else "cpu name"
        return f"{label} {cpu.cpu_name!r}", found
    return "no model ids", []


def _by_flags(table: _Table, cpu: CpuIdentity, named: bool = False) -> MicroarchEntry | None:
    vendor = cpu.vendor
    if cpu.arch == "aarch64" and cpu.arm_parts:
        vendor = f"{cpu.arm_parts[0][0]:#04x}"
    # An Arm core the ids named keeps its name for -mtune; another core's -mcpu would tune for
    # the wrong design, so only the generic Armv8/v9 levels stand in for it. The same holds for
    # a part the table lacks: its flags may fit a listed core of the same implementer (a
    # Cortex-A53's fp asimd crc32 fit cortex-a72, a Cortex-A55's fit neoverse-n1), but
    # -mcpu=cortex-a72 schedules for an out-of-order core the in-order A53 is not. Only Apple,
    # told by its brand string and not by MIDR ids, keeps its vendor's lineage (a later chip
    # with SME is apple-m4).
    generic_only = cpu.arch == "aarch64" and (named or bool(cpu.arm_parts))
    fits = [
        e
        for e in table.by_key.values()
        if e.arch == cpu.arch
        and (e.vendor is None or (e.vendor == vendor and not generic_only))
        # An entry adding no flags to its parents can only be told by its ids.
        and (e.flags or e.level is not None or not e.parents)
        and table.required[e.key] <= cpu.flags
    ]
    return max(fits, key=table.specificity, default=None)


def arm_vendor_name(implementer: int) -> str | None:
    """The vendor name lscpu prints for an Arm implementer code."""
    return ARM_IMPLEMENTERS.get(implementer)


def arm_implementer_code(name: str) -> int | None:
    """The implementer code for a vendor name as lscpu prints it (case-insensitive)."""
    wanted = name.strip().lower()
    codes = (code for code, vendor in ARM_IMPLEMENTERS.items() if vendor.lower() == wanted)
    return next(codes, None)
