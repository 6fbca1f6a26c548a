"""spack's and archspec's /proc/cpuinfo test targets that hwtune had not been checked against
(captures in tests/data/cpu_identity, sources in its SOURCES.md).

The file name ends in the archspec target that archspec's own test expects for the capture;
`GCC_NAME` maps it to the -march/-mcpu name hwtune reports. Every other expected value is read
from the capture, and the comment beside it names the lines. All of them passed unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from hwtune.models.hardware import CpuInfo
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from tests.conftest import DATA

CAPTURES = DATA / "cpu_identity"
# archspec's target names -> GCC's (archspec microarchitectures.json: "zen" is znver1, its
# client "icelake" is GCC's icelake-client, "power8le" is -mcpu=power8).
GCC_NAME = {
    "ivybridge": "ivybridge",
    "broadwell": "broadwell",
    "skylake_avx512": "skylake-avx512",
    "icelake": "icelake-client",
    "graniterapids": "graniterapids",
    "zen": "znver1",
    "znver3": "znver3",
    "power8": "power8",
}


class Want(NamedTuple):
    arch: str
    vendor: str
    name: str  # the model name line (POWER: the cpu line)
    level: int | None  # x86-64 psABI level its flags reach
    has: frozenset[str]  # ISA flags the capture lists
    lacks: frozenset[str]  # ... and ones it does not
    sockets: int | None
    cores: int | None
    logical: int | None
    threads: int | None
    issue: str | None = None  # what a fragment must say it cannot tell


def flags(text: str) -> frozenset[str]:
    return frozenset(text.split())


AVX512 = flags("avx512f avx512bw avx512vl avx512dq avx512cd")
AMX = flags("amx_tile amx_bf16 amx_int8")
WANT = {
    # "model : 62", "E5-2650 v2"; flags with avx f16c, no fma/avx2; "physical id" 0 and 1,
    # "siblings : 8" = "cpu cores : 8", processors 0-15.
    "spack-rhel7-ivybridge.cpuinfo": Want(
        "x86_64",
        "GenuineIntel",
        "Intel(R) Xeon(R) CPU E5-2650 v2 @ 2.60GHz",
        2,
        flags("avx f16c rdrand"),
        flags("avx2 fma") | AVX512,
        2,
        16,
        16,
        1,
    ),
    # "model : 79", "E5-2690 v4"; avx2 fma adx rdseed; two packages of "siblings : 14" =
    # "cpu cores : 14" (core ids 0-6, 8-14), processors 0-27.
    "spack-rhel7-broadwell.cpuinfo": Want(
        "x86_64",
        "GenuineIntel",
        "Intel(R) Xeon(R) CPU E5-2690 v4 @ 2.60GHz",
        3,
        flags("avx2 fma adx rdseed"),
        AVX512,
        2,
        28,
        28,
        1,
    ),
    # "model : 61", "i5-5200U"; "siblings : 4", "cpu cores : 2", core ids 0 0 1 1.
    "spack-ubuntu18.04-broadwell.cpuinfo": Want(
        "x86_64",
        "GenuineIntel",
        "Intel(R) Core(TM) i5-5200U CPU @ 2.20GHz",
        3,
        flags("avx2 fma adx rdseed"),
        AVX512,
        1,
        2,
        4,
        2,
    ),
    # "model : 85", "Gold 6132", "stepping : 4"; avx512f/bw/vl/dq/cd and clwb, no
    # avx512_vnni (Cascade Lake's); two packages of 14 cores, "siblings : 14".
    "spack-rhel7-skylake_avx512.cpuinfo": Want(
        "x86_64",
        "GenuineIntel",
        "Intel(R) Xeon(R) Gold 6132 CPU @ 2.60GHz",
        4,
        AVX512 | flags("clwb fma avx2"),
        flags("avx512_vnni avx512_bf16") | AMX,
        2,
        28,
        28,
        1,
    ),
    # "model : 126", "i7-1065G7"; avx512_vnni avx512_vbmi2 gfni vaes, no avx512_bf16. One
    # record of "siblings : 8" / "cpu cores : 4": two threads a core, the rest unknown.
    "spack-fedora32-icelake.cpuinfo": Want(
        "x86_64",
        "GenuineIntel",
        "Intel(R) Core(TM) i7-1065G7 CPU @ 1.30GHz",
        4,
        AVX512 | flags("avx512_vnni avx512_vbmi2 avx512ifma gfni vaes"),
        flags("avx512_bf16") | AMX,
        None,
        None,
        None,
        2,
        "only 1 of >=8 processors present",
    ),
    # "model : 173", "Xeon(R) 6972P"; avx512_bf16 avx512_fp16 amx_tile/bf16/int8, but no
    # amx_fp16 (its RHEL 9 kernel predates the flag). One record, "siblings : 96" =
    # "cpu cores : 96".
    "archspec-rhel9-graniterapids.cpuinfo": Want(
        "x86_64",
        "GenuineIntel",
        "Intel(R) Xeon(R) 6972P",
        4,
        AVX512 | AMX | flags("avx512_bf16 avx512_fp16 avx_vnni"),
        flags("amx_fp16"),
        None,
        None,
        None,
        1,
        "only 1 of >=96 processors present",
    ),
    # "cpu family : 23", "model : 1", "EPYC 7301"; avx2 fma sha_ni clzero; "physical id" 0 and
    # 1, "siblings : 32", "cpu cores : 16": processors 0-31 the first threads, 32-63 the second.
    "spack-rhel7-zen.cpuinfo": Want(
        "x86_64",
        "AuthenticAMD",
        "AMD EPYC 7301 16-Core Processor",
        3,
        flags("avx2 fma sha_ni clzero"),
        AVX512,
        2,
        32,
        64,
        2,
    ),
    # "cpu family : 25", "model : 33", "Ryzen 9 5950X"; vaes vpclmulqdq; "siblings : 32",
    # "cpu cores : 16", one package.
    "archspec-ubuntu20.04-znver3.cpuinfo": Want(
        "x86_64",
        "AuthenticAMD",
        "AMD Ryzen 9 5950X 16-Core Processor",
        3,
        flags("avx2 fma vaes vpclmulqdq"),
        AVX512,
        1,
        16,
        32,
        2,
    ),
    # "cpu : POWER8NVL (raw), altivec supported", "pvr 004c 0100", processors 0-127; POWER
    # prints no flags and no physical id / core id, so neither sockets, cores nor SMT.
    "spack-centos7-power8.cpuinfo": Want(
        "ppc64le",
        "IBM",
        "POWER8NVL (raw), altivec supported",
        None,
        frozenset(),
        frozenset(),
        None,
        None,
        128,
        None,
        "no physical id / core id lines",
    ),
}


def probe(tmp_path: Path, name: str) -> tuple[CpuInfo, list[str]]:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_bytes((CAPTURES / name).read_bytes())
    issues = IssueLog()
    cpu = probe_cpu(tmp_path, issues)
    return cpu, [issue.reason for issue in issues]


def test_every_capture_is_listed_in_sources() -> None:
    sources = (CAPTURES / "SOURCES.md").read_text()
    assert all(f"| {name} |" in sources for name in WANT)


@pytest.mark.parametrize("name", sorted(WANT))
def test_identity_and_microarchitecture(tmp_path: Path, name: str) -> None:
    want = WANT[name]
    cpu, _ = probe(tmp_path, name)
    target = Path(name).stem.rsplit("-", 1)[1]
    assert (cpu.arch, cpu.vendor, cpu.model_name) == (want.arch, want.vendor, want.name)
    assert cpu.microarch == GCC_NAME[target], cpu.microarch_basis
    assert cpu.model_microarch == cpu.microarch
    assert cpu.x86_64_level == want.level


@pytest.mark.parametrize("name", sorted(WANT))
def test_isa_flags(tmp_path: Path, name: str) -> None:
    want = WANT[name]
    cpu, _ = probe(tmp_path, name)
    assert want.has <= set(cpu.flags), sorted(want.has - set(cpu.flags))
    assert not want.lacks & set(cpu.flags), sorted(want.lacks & set(cpu.flags))
    assert bool(cpu.flags) == bool(want.has)


@pytest.mark.parametrize("name", sorted(WANT))
def test_counts(tmp_path: Path, name: str) -> None:
    want = WANT[name]
    cpu, issues = probe(tmp_path, name)
    got = (cpu.sockets, cpu.physical_cores, cpu.logical_cpus, cpu.threads_per_core)
    assert got == (want.sockets, want.cores, want.logical, want.threads)
    if want.threads is not None:
        assert cpu.smt_enabled == (want.threads > 1)
    if want.issue is not None:
        assert any(want.issue in issue for issue in issues), issues
    else:
        assert not any("topology unknown" in issue for issue in issues), issues


def test_granite_rapids_names_the_amx_flag_its_kernel_does_not_list(tmp_path: Path) -> None:
    cpu, _ = probe(tmp_path, "archspec-rhel9-graniterapids.cpuinfo")
    assert "Granite Rapids" in (cpu.microarch_basis or "")
    assert "not visible to this system" in (cpu.microarch_basis or "")
    assert "amx_fp16" in (cpu.microarch_basis or "")
