"""Which architecture and vendor a /proc/cpuinfo or lscpu capture is from, by what only it prints.

Each architecture's kernel prints its own keys (arch/*/kernel/*cpuinfo* show functions), so the
keys and a few values tell them apart without the `uname` of the captured machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from hwtune.models.hardware import Arch

# x86 vendor_id strings (Linux arch/x86/kernel/cpu/*.c c_ident).
X86_VENDORS = {
    "GenuineIntel",
    "AuthenticAMD",
    "HygonGenuine",
    "CentaurHauls",
    "Shanghai",
    "Zhaoxin",
}
PVR = re.compile(r"pvr\s+([0-9a-fA-F]{4})\s*([0-9a-fA-F]{4})")
# POWER generations Linux prints in the "cpu" line; little-endian Linux (ELFv2) needs POWER8, so
# an older POWER, or a PowerPC 970, runs big-endian ppc64.
_POWER_BIG_ENDIAN_ONLY = re.compile(r"^(POWER[3-7]\b|POWER[3-7]\+|PPC970|Cell)", re.IGNORECASE)
# RISC-V mvendorid (JEDEC JEP106 bank/id): Linux arch/riscv/include/asm/vendorid_list.h
# (MIPS_VENDOR_ID is 0x127 since a 2025 fix of the 0x722 first given there);
# 0x710 SpacemiT from archspec-json tests/targets/linux-spacemit-x60.
RISCV_VENDORS = {
    0x489: "SiFive",
    0x5B7: "T-HEAD",
    0x31E: "Andes",
    0x29: "Microchip",
    0x127: "MIPS",
    0x710: "SpacemiT",
}


def cpuinfo_arch(field: Callable[[str], str | None], flags: tuple[str, ...]) -> Arch:
    """The architecture a cpuinfo text is from, by the keys and values only it prints."""
    vendor = field("vendor_id")
    if vendor is not None and vendor.strip() in X86_VENDORS:
        return x86_arch(flags)
    # arch/ia64/kernel/setup.c show_cpuinfo prints "arch : IA-64" (and "vendor", not
    # "vendor_id": GenuineIntel there is no x86).
    if (field("arch") or "").strip() == "IA-64":
        return "ia64"
    if vendor is not None and vendor.startswith("IBM/S390"):
        return "s390x"
    if field("CPU implementer") is not None:
        return arm_arch(field("CPU architecture"), set(flags))
    isa = field("isa") or field("ISA") or ""
    if isa.startswith("rv64"):
        return "riscv64"
    if isa.startswith("rv32"):
        return "riscv32"
    if "loongarch" in isa.lower() or "loongson-64bit" in (field("CPU Family") or "").lower():
        return "loongarch64"
    if field("cpu model") is not None or "mips" in isa.lower():
        return "mips"
    power_cpu = field("cpu")
    if (field("type") or "").startswith("sun4") or "sparc" in (power_cpu or "").lower():
        return "sparc64"
    if power_cpu is not None and field("revision") is not None:
        return powerpc_arch(power_cpu)
    return "unknown"


def x86_arch(flags: tuple[str, ...] | frozenset[str]) -> Arch:
    """x86_64, or i686 when the CPU's flags are known and lack "lm" (long mode, CPUID
    0x80000001 EDX bit 29, Linux arch/x86/include/asm/cpufeatures.h X86_FEATURE_LM): a 32-bit
    CPU. A 32-bit kernel on a 64-bit CPU still lists "lm", and is told x86_64 by it."""
    return "i686" if flags and "lm" not in flags else "x86_64"


def powerpc_arch(cpu: str) -> Arch:
    """ppc64 (POWER7 and older, PPC970), ppc64le (POWER8+), or 32-bit ppc, by the cpu name."""
    name = cpu.strip()
    if _POWER_BIG_ENDIAN_ONLY.match(name):
        return "ppc64"
    if name.upper().startswith("POWER"):
        # POWER8 and later run either endianness; cpuinfo does not say which, and ppc64le is
        # what every current distribution ships (lscpu's Architecture decides where a
        # capture has it).
        return "ppc64le"
    return "ppc"  # 74xx, 740/750, e500, 4xx: 32-bit PowerPC


# Linux arm64 hwcaps (Documentation/arch/arm64/elf_hwcaps.rst) vs the 32-bit Arm ones
# (arch/arm/kernel/setup.c hwcap_str): "asimd" and "fp" exist only on arm64, "vfp"/"thumb" only
# on arm. archspec's captures replace "CPU architecture" with "Irrelevant".
ARM64_ONLY = {"asimd", "fp", "atomics", "cpuid", "asimdrdm", "sve", "sve2"}
ARM32_ONLY = {"thumb", "vfp", "vfpv3", "vfpv4", "neon", "half", "fastmult", "edsp"}


def arm_arch(cpu_architecture: str | None, features: set[str]) -> Arch:
    if features & ARM64_ONLY:
        return "aarch64"
    if features & ARM32_ONLY:
        return "armv7l"
    # 32-bit kernels print "CPU architecture: 7"; arm64 prints 8 (even on v9 cores), and old
    # arm64 kernels "AArch64".
    text = (cpu_architecture or "").strip()
    level = int(text) if text.isascii() and text.isdigit() and len(text) < 5 else None
    if level is not None:
        return "aarch64" if level >= 8 else "armv7l"
    return "aarch64"


def powerpc_vendor(cpu: str, pvr: int | None) -> str | None:
    """IBM for POWER, PowerPC 970/4xx/6xx/7xx; Freescale for 74xx and e500 (PVR 0x80xx)."""
    if cpu.upper().startswith(("POWER", "PPC970", "PPC4", "CELL")):
        return "IBM"
    if pvr is None:
        return None
    # Linux arch/powerpc/include/asm/reg.h: PVR_7400 0x000C and the 0x80xx versions (PVR_7450,
    # PVR_8540 e500...) are Motorola/Freescale designs; the other AIM versions below 0x8000
    # (PVR_601..PVR_750 0x0008, PVR_403GC...) are IBM's.
    if pvr >> 8 == 0x80 or pvr == 0x000C:
        return "Freescale"
    return "IBM" if pvr < 0x8000 else None


def riscv_extensions(isa: str) -> tuple[str, ...]:
    """ "rv64imafdcv_zicbom_zba" -> a c d f i m v zba zicbom: the letters, then each "_" name."""
    head, _, rest = isa.strip().lower().partition("_")
    if not head.startswith(("rv64", "rv32")):
        return ()
    letters = set(head[4:])
    return tuple(sorted(letters | {ext for ext in rest.split("_") if ext}))
