"""What TensorFlow itself decides from the CPU: cpu_feature_guard's list, and oneDNN's default.

Pure functions of a version string and a `CpuInfo`, plus the `TfDistribution` entry of
`knowledge/data/tf_distributions.json` (how each wheel is built). The tables here restate
TensorFlow's own C++ (`cpu_feature_guard.cc`, `util/port.cc`), so they live next to the code
that mirrors that logic rather than in a data file a user would edit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from hwtune.models.hardware import CpuInfo


@dataclass(frozen=True, slots=True)
class TfDistribution:
    """One entry of tf_distributions.json: a pip distribution of TensorFlow on one architecture."""

    key: str  # "<distribution>@<arch>"
    distribution: str  # PEP 503-normalised project name: tensorflow-cpu, tf-nightly, …
    arch: str  # the wheel's architecture: x86_64, aarch64
    source: str
    compiled_isa: tuple[str, ...] | None = None  # kernel flag names; None = not verified
    build: str = ""  # the build configuration in words
    threading_runtime: Literal["eigen", "openmp"] | None = None  # expected; DT_NEEDED wins
    onednn: Literal["cpu-policy", "always"] | None = None


def load_distributions() -> tuple[TfDistribution, ...]:
    from hwtune.knowledge import load_table

    return load_table("tf_distributions", TfDistribution)


# cpu_feature_guard.cc InfoAboutUnusedCPUFeatures(): each feature TF checks with CPUID, in the
# order it prints them, with the kernel's /proc/cpuinfo name for it (SSE3 is "pni" there).
# Source: tensorflow/core/platform/cpu_feature_guard.cc (the newest copy read lists the 19 below;
# older copies stop at AMX_BF16, the oldest at AVX512F).
GUARD_FLAG = {
    "SSE": "sse",
    "SSE2": "sse2",
    "SSE3": "pni",
    "SSE4.1": "sse4_1",
    "SSE4.2": "sse4_2",
    "AVX": "avx",
    "AVX2": "avx2",
    "AVX512F": "avx512f",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AVX512_FP16": "avx512_fp16",
    "AVX_VNNI": "avx_vnni",
    "AVX_VNNI_INT8": "avx_vnni_int8",  # most kernels do not show this one in /proc/cpuinfo
    "AVX_NE_CONVERT": "avx_ne_convert",  # nor this one (KVM-only names in arch/x86/kvm)
    "AMX_TILE": "amx_tile",
    "AMX_INT8": "amx_int8",
    "AMX_BF16": "amx_bf16",
    "AMX_FP16": "amx_fp16",
    "FMA": "fma",
}
_GUARD_FP16_ERA = ("AVX512_FP16", "AVX_VNNI_INT8", "AVX_NE_CONVERT", "AMX_FP16")
_GUARD_NN_ERA = ("AVX512_VNNI", "AVX512_BF16", "AVX_VNNI", "AMX_TILE", "AMX_INT8", "AMX_BF16")
# (first TF version, features checked), newest first.
# - 2.16: user logs from cpu_feature_guard.cc:210 (2.16+) on Sapphire Rapids list AVX512_FP16;
#   logs from cc:182 (2.13-2.15) on the same CPU do not (user logs in public GitHub issues).
#   The four FP16-era names arrived together in the copy read.
# - 2.9: a TF 2.9 log (tensorflow/tensorflow#56350, June 2022) already lists AVX_VNNI and AMX_*;
#   the exact first release is an estimate (M): older copies list only SSE..AVX512F and FMA.
GUARD_FEATURES: tuple[tuple[tuple[int, int], tuple[str, ...]], ...] = (
    ((2, 16), tuple(GUARD_FLAG)),
    ((2, 9), tuple(f for f in GUARD_FLAG if f not in _GUARD_FP16_ERA)),
    ((0, 0), tuple(f for f in GUARD_FLAG if f not in _GUARD_FP16_ERA + _GUARD_NN_ERA)),
)

# util/port.cc DefaultOneDnnPolicy(): on Linux, oneDNN is on by default when the CPU has one of
# these (TF 2.9 release notes, PR tensorflow/tensorflow#56039). Before 2.9 it was
# opt-in (TF_ENABLE_ONEDNN_OPTS=1, TF 2.5-2.8).
ONEDNN_X86_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
# ...and on aarch64 ACL builds, on Arm Neoverse V1 cores (implementer 0x41, part 0xd40):
# PR tensorflow/tensorflow#60353 "Make oneDNN ACL default on Neoverse V1 cores", approved
# 2023-07-27, so in 2.15 for certain (the port.cc that added the Windows default, PR #61878 of
# 2023-09, has it) and 2.14 unsure.
NEOVERSE_V1 = ("0x41", "0xd40")


def parse_version(version: str) -> tuple[int, int] | None:
    """(major, minor) of "2.21.0", "2.16.0rc1", "2.17.0.dev20240301"; None when unparsable."""
    # Bounded ASCII digits: int() refuses over 4300 digits with a bare ValueError, and a
    # str pattern's \d would also match Unicode digits no version string holds.
    match = re.match(r"\s*v?(\d{1,9})\.(\d{1,9})", version, re.ASCII)
    return (int(match[1]), int(match[2])) if match else None


def guard_features(version: tuple[int, int] | None) -> tuple[str, ...]:
    """The features cpu_feature_guard checks in this version (the newest list when unknown)."""
    for since, names in GUARD_FEATURES:
        if version is None or version >= since:
            return names
    return GUARD_FEATURES[-1][1]


def guard_flags(version: tuple[int, int] | None) -> tuple[str, ...]:
    return tuple(GUARD_FLAG[name] for name in guard_features(version))


def missing_isa(
    compiled: tuple[str, ...], cpu: CpuInfo, version: tuple[int, int] | None
) -> tuple[str, ...]:
    """The guard's "To enable the following instructions" list, as sorted kernel flag names.

    What TensorFlow would print: each feature its guard checks that the CPU has and the build
    was not compiled for. Only x86 has such checks; elsewhere the guard never prints a list.
    """
    if cpu.arch != "x86_64":
        return ()
    have = set(cpu.flags)
    return tuple(sorted(f for f in guard_flags(version) if f in have and f not in compiled))


def onednn_default(
    policy: Literal["cpu-policy", "always"] | None, version: tuple[int, int] | None, cpu: CpuInfo
) -> tuple[bool | None, str]:
    """(on by default?, why) for this build, TF version and CPU; None when it cannot be told."""
    if policy == "always":
        return True, "a --config=mkl build (ENABLE_MKL): oneDNN is on unless TF_DISABLE_MKL=1"
    if policy is None:
        return None, "how this distribution is built is not known"
    if version is None:
        return None, "TensorFlow version unknown"
    if cpu.arch == "x86_64":
        if not cpu.flags:
            return None, "CPU flags unknown"
        if version < (2, 9):
            return False, "before TF 2.9 oneDNN is opt-in (TF_ENABLE_ONEDNN_OPTS=1)"
        hits = [f for f in ONEDNN_X86_FLAGS if f in cpu.flags]
        if hits:
            return True, f"TF >= 2.9 on a Linux x86 CPU with {', '.join(hits)}"
        return False, f"the CPU has none of {', '.join(ONEDNN_X86_FLAGS)} (TF's default policy)"
    if cpu.arch == "aarch64":
        if cpu.implementer is None or cpu.part is None:
            return None, "CPU part unknown"
        if (cpu.implementer.lower(), cpu.part.lower()) != NEOVERSE_V1:
            return False, "TF's aarch64 default is on only for Neoverse V1 cores"
        if version >= (2, 15):
            return True, "TF >= 2.15 on a Neoverse V1 core (oneDNN+ACL)"
        if version == (2, 14):
            return None, "Neoverse V1 default landed around TF 2.14 (PR #60353); not verified"
        return False, "before TF 2.14 oneDNN+ACL on aarch64 is opt-in (TF_ENABLE_ONEDNN_OPTS=1)"
    return False, f"TF turns oneDNN on by default only on x86 and aarch64, not {cpu.arch}"
