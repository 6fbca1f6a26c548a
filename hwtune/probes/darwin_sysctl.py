"""`sysctl machdep.cpu hw` output from a Mac, saved as a capture (archspec's darwin targets).

macOS has no /proc/cpuinfo; archspec's test targets for it are `sysctl` dumps. Intel Macs print
`machdep.cpu.{vendor,family,model,brand_string,features,leaf7_features,extfeatures}` with
Apple's upper-case feature names (xnu osfmk/i386/cpuid.c); Apple silicon prints
`hw.optional.arm.FEAT_*` and older `hw.optional.*` booleans. Both become Linux flag names so the
same microarchitecture table applies. Rosetta 2 shows an x86 feature list on an Apple CPU.
"""

from __future__ import annotations

from hwtune.probes.cpuinfo import CpuinfoFacts

# xnu's x86 feature names -> Linux's (arch/x86/include/asm/cpufeatures.h) where they differ.
_X86_NAMES = {
    "sse3": "pni",
    "sse4.1": "sse4_1",
    "sse4.2": "sse4_2",
    "avx1.0": "avx",
    "lahf": "lahf_lm",
    "lzcnt": "abm",
    "em64t": "lm",
    "xd": "nx",
    "htt": "ht",
    "mon": "monitor",
    "clfsh": "clflush",
    "clfsopt": "clflushopt",
    "rdwrfsgs": "fsgsbase",
    "sha": "sha_ni",
    "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16",
    "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512vbmi2": "avx512_vbmi2",
    "avx512bitalg": "avx512_bitalg",
}
# sysctl prints no CPUID leaf 0xD, where XSAVEOPT/XSAVEC live; an OS-enabled XSAVE stands in for
# them, as archspec's darwin flag conversions do (the Macs with XSAVE, Sandy Bridge on, have
# XSAVEOPT; XSAVEC only matters to tell Skylake, whose model id decides first).
_X86_IMPLIED = {"xsave": ("xsaveopt", "xsavec")}
# hw.optional names -> Linux arm64 hwcaps (Documentation/arch/arm64/elf_hwcaps.rst).
_ARM_NAMES = {
    "floatingpoint": ("fp",),
    "AdvSIMD": ("asimd",),
    "neon": ("asimd",),
    "neon_hpfp": ("fphp", "asimdhp"),
    "armv8_crc32": ("crc32",),
    "armv8_1_atomics": ("atomics",),
    "armv8_2_fhm": ("asimdfhm",),
    "armv8_2_sha512": ("sha512",),
    "armv8_2_sha3": ("sha3",),
    "armv8_3_compnum": ("fcma",),
    "arm.FEAT_AES": ("aes",),
    "arm.FEAT_PMULL": ("pmull",),
    "arm.FEAT_SHA1": ("sha1",),
    "arm.FEAT_SHA256": ("sha2",),
    "arm.FEAT_SHA512": ("sha512",),
    "arm.FEAT_SHA3": ("sha3",),
    "arm.FEAT_CRC32": ("crc32",),
    "arm.FEAT_LSE": ("atomics",),
    "arm.FEAT_LSE2": ("uscat",),
    "arm.FEAT_FP16": ("fphp", "asimdhp"),
    "arm.FEAT_RDM": ("asimdrdm",),
    "arm.FEAT_JSCVT": ("jscvt",),
    "arm.FEAT_FCMA": ("fcma",),
    "arm.FEAT_LRCPC": ("lrcpc",),
    "arm.FEAT_LRCPC2": ("ilrcpc",),
    "arm.FEAT_DPB": ("dcpop",),
    "arm.FEAT_DPB2": ("dcpodp",),
    "arm.FEAT_DotProd": ("asimddp",),
    "arm.FEAT_FHM": ("asimdfhm",),
    "arm.FEAT_DIT": ("dit",),
    "arm.FEAT_FlagM": ("flagm",),
    "arm.FEAT_FlagM2": ("flagm2",),
    "arm.FEAT_SSBS": ("ssbs",),
    "arm.FEAT_SB": ("sb",),
    "arm.FEAT_PAuth": ("paca", "pacg"),
    "arm.FEAT_FRINTTS": ("frint",),
    "arm.FEAT_I8MM": ("i8mm",),
    "arm.FEAT_BF16": ("bf16",),
    "arm.FEAT_EBF16": ("ebf16",),
    "arm.FEAT_BTI": ("bti",),
    "arm.FEAT_ECV": ("ecv",),
    "arm.FEAT_AFP": ("afp",),
    "arm.FEAT_RPRES": ("rpres",),
    "arm.FEAT_WFxT": ("wfxt",),
    "arm.FEAT_CSSC": ("cssc",),
    "arm.FEAT_HBC": ("hbc",),
    "arm.FEAT_SME": ("sme",),
    "arm.FEAT_SME2": ("sme2",),
    "arm.FEAT_MTE": ("mte",),
}


def is_sysctl(text: str) -> bool:
    """A `sysctl` dump: its first key is a `machdep.` or `hw.` name."""
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    return first.startswith(("machdep.", "hw."))


def parse_sysctl(text: str) -> CpuinfoFacts:
    values: dict[str, str] = {}
    for line in text.split("\n"):
        key, colon, value = line.partition(":")
        if colon:
            values[key.strip()] = value.strip()
    brand = values.get("machdep.cpu.brand_string") or None
    x86 = " ".join(
        values.get(f"machdep.cpu.{key}", "")
        for key in ("features", "leaf7_features", "extfeatures")
    ).split()
    if x86:
        flags = {_X86_NAMES.get(name.lower(), name.lower()) for name in x86}
        for flag, implied in _X86_IMPLIED.items():
            if flag in flags:
                flags.update(implied)
        if values.get("hw.optional.x86_64") == "1":  # Rosetta 2 prints no extfeatures (EM64T)
            flags.add("lm")
        return CpuinfoFacts(
            arch="x86_64",
            # Every Intel Mac is family 6, and Rosetta 2 answers CPUID as GenuineIntel family 6:
            # older dumps print neither line.
            vendor=values.get("machdep.cpu.vendor") or "GenuineIntel",
            model_name=brand,
            family=_number(values.get("machdep.cpu.family")) or 6,
            model=_number(values.get("machdep.cpu.model")),
            stepping=_number(values.get("machdep.cpu.stepping")),
            flags=tuple(sorted(flags)),
        )
    if values.get("hw.optional.arm64") == "1" or (brand or "").startswith("Apple"):
        arm: set[str] = set()
        for name, hwcaps in _ARM_NAMES.items():
            if values.get(f"hw.optional.{name}") == "1":
                arm.update(hwcaps)
        return CpuinfoFacts(
            arch="aarch64", vendor="Apple", model_name=brand, flags=tuple(sorted(arm))
        )
    return CpuinfoFacts(model_name=brand)


def _number(value: str | None) -> int | None:
    return int(value) if value and value.isascii() and value.isdigit() and len(value) < 6 else None
