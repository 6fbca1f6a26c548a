"""What a saved `lscpu` says about the CPU's identity when no /proc/cpuinfo came with it.

util-linux's own test dumps (tests/expected/lscpu/*) omit the Architecture line, so the
architecture is told from what lscpu prints per architecture (sys-utils/lscpu-cputype.c):
x86 `Vendor ID`; s390 `Vendor ID: IBM/S390` and `Machine type`; PowerPC `Model: 2.1 (pvr 003f
0201)`; RISC-V `ISA`; LoongArch `CPU family: Loongson-64bit`; SPARC `Flags: sun4u`; Arm an
implementer name plus its hwcaps (arm64-only `asimd` vs 32-bit `vfp`/`thumb`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from hwtune.models.digits import is_ascii_digits
from hwtune.models.hardware import Arch
from hwtune.probes.arch_ids import (
    ARM32_ONLY,
    ARM64_ONLY,
    PVR,
    RISCV_VENDORS,
    X86_VENDORS,
    powerpc_arch,
    powerpc_vendor,
    riscv_extensions,
    x86_arch,
)
from hwtune.probes.microarch import arm_implementer_code

# uname machines lscpu prints in its Architecture line (util-linux sys-utils/lscpu-arch.c).
MACHINES: dict[str, Arch] = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    # A 32-bit x86 kernel: uname prints i686 (i386, i486, i586 on older or smaller builds).
    "i686": "i686",
    "i586": "i686",
    "i486": "i686",
    "i386": "i686",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "ppc64le": "ppc64le",
    "ppc64": "ppc64",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "armv7l": "armv7l",
    "armv8l": "armv7l",  # a 32-bit userland on a 64-bit Arm kernel
    "ppc": "ppc",
    "riscv32": "riscv32",
    "loongarch64": "loongarch64",
    "sparc64": "sparc64",
    "mips": "mips",
    "mips64": "mips",
    "ia64": "ia64",
}

_ITANIUM = re.compile(r"^(Itanium|McKinley|Merced|Madison)\b", re.IGNORECASE)


class LscpuIdentity(NamedTuple):
    arch: Arch
    vendor: str | None = None
    flags: tuple[str, ...] = ()
    pvr: int | None = None  # PowerPC: from "Model: 2.1 (pvr 003f 0201)"
    machine: str | None = None  # s390 machine type, RISC-V uarch (lscpu's Model name)


def lscpu_arch(fields: dict[str, str], flags: tuple[str, ...]) -> Arch:
    """lscpu's Architecture line, else what only one architecture's lscpu prints."""
    if fields.get("Architecture") in MACHINES:
        return MACHINES[fields["Architecture"]]
    vendor = fields.get("Vendor ID", "").strip()
    if vendor in X86_VENDORS:
        # Itanium is GenuineIntel too. x86 lscpu prints "CPU family" as a number; ia64 kernels
        # before 2.6.19 printed the family's name (arch/ia64/kernel/setup.c show_cpuinfo:
        # "Itanium", "Itanium 2", "McKinley"), which util-linux's ia64-* dumps show.
        family = fields.get("CPU family", "").strip()
        if family and not is_ascii_digits(family):
            return "ia64" if _ITANIUM.match(family) else "unknown"
        if fields.get("CPU op-mode(s)", "").strip() == "32-bit":  # no "64-bit": no long mode
            return "i686"
        return x86_arch(flags)
    if vendor.startswith("IBM/S390") or "Machine type" in fields:
        return "s390x"
    isa = fields.get("ISA", "").lower()
    if isa.startswith(("rv64", "rv32")):
        return "riscv64" if isa.startswith("rv64") else "riscv32"
    if riscv_vendor(vendor) is not None:
        # util-linux's lscpu-rv64-milkvpioneer prints no Architecture and no ISA line, only the
        # hart's mvendorid as Vendor ID ("0x5b7"). No Arm implementer code is one of these ids,
        # and a 32-bit RISC-V Linux machine is rare enough that riscv64 is the guess.
        return "riscv64"
    if "loongson-64bit" in fields.get("CPU family", "").lower() or "loongarch" in isa:
        return "loongarch64"
    if (
        any(flag.startswith("sun4") for flag in flags)
        or "sparc" in fields.get("Model name", "").lower()
    ):
        return "sparc64"
    if PVR.search(fields.get("Model", "")):
        return powerpc_arch(fields.get("Model name", ""))
    if fields.get("Model name", "").upper().startswith("POWER"):
        return powerpc_arch(fields["Model name"])
    if vendor and arm_implementer_code(vendor) is not None:
        if set(flags) & ARM32_ONLY and not set(flags) & ARM64_ONLY:
            return "armv7l"
        return "aarch64"
    return "unknown"


def riscv_vendor(vendor_id: str) -> str | None:
    """The vendor a RISC-V mvendorid names ("0x5b7" -> "T-HEAD"), as lscpu prints the id."""
    text = vendor_id.strip().lower()
    if not text.startswith("0x") or len(text) > 18:  # an mvendorid is one XLEN-bit register
        return None
    try:
        return RISCV_VENDORS.get(int(text, 16))
    except ValueError:
        return None


def lscpu_identity(fields: dict[str, str], flags: tuple[str, ...], arch: Arch) -> LscpuIdentity:
    """The vendor, flags and model ids lscpu gives for `arch`."""
    vendor = fields.get("Vendor ID") or None
    found = LscpuIdentity(arch=arch, vendor=vendor, flags=flags)
    if arch in ("riscv64", "riscv32"):
        # lscpu prints mvendorid as Vendor ID ("0x489") and the isa, space-separated, as ISA.
        isa = fields.get("ISA", "").replace(" ", "_")
        return found._replace(
            vendor=riscv_vendor(vendor or "") or vendor,
            flags=riscv_extensions(isa) or flags,
            machine=fields.get("Model name") or None,
        )
    if arch in ("ppc64le", "ppc64", "ppc"):
        match = PVR.search(fields.get("Model", ""))
        pvr = int(match.group(1), 16) if match else None
        return found._replace(
            vendor=vendor or powerpc_vendor(fields.get("Model name", ""), pvr), pvr=pvr
        )
    if arch == "s390x":
        return found._replace(machine=fields.get("Machine type") or None)
    if arch == "loongarch64":
        return found._replace(vendor=vendor or "Loongson")
    return found
