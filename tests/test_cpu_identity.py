"""CPU identity on every architecture Linux prints /proc/cpuinfo for (issue 13, identity half).

Captures in tests/data/cpu_identity are public excerpts (SOURCES.md there). Where no public
capture was at hand, the record is written here in the format the kernel function named beside
it prints, and says so.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.knowledge import DATA_DIR
from hwtune.models.hardware import CpuInfo, Hardware
from hwtune.planner import Knowledge, load_knowledge, plan
from hwtune.probes import detect
from hwtune.probes.arm_parts import arm_part_name, parse_key
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.microarch import _compile, load_microarchitectures
from hwtune.probes.report import render_summary
from tests.conftest import REPO

DATA = Path(__file__).parent / "data" / "cpu_identity"
REQUIRED = _compile(load_microarchitectures()).required


def root_with(tmp_path: Path, cpuinfo: str, lscpu: str | None = None) -> Path:
    (tmp_path / "proc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc" / "cpuinfo").write_text(cpuinfo)
    if lscpu is not None:
        (tmp_path / "lscpu.txt").write_text(lscpu)
    return tmp_path


def probe(root: Path) -> tuple[CpuInfo, list[str]]:
    issues = IssueLog()
    cpu = probe_cpu(root, issues)
    return cpu, [issue.reason for issue in issues]


def capture(tmp_path: Path, name: str) -> Path:
    return root_with(tmp_path, (DATA / name).read_text())


@pytest.fixture(scope="module")
def knowledge() -> Knowledge:
    return load_knowledge(extra_dirs=())


def copts(hw: Hardware, knowledge: Knowledge, tf_version: str = "2.19") -> list[str]:
    profile = plan(hw, knowledge=knowledge, tf_version=tf_version)
    assert profile.bazel is not None
    return [o.partition("=")[2] for o in profile.bazel.options if o.startswith("--copt=")]


def x86_record(vendor: str, family: int, model: int, name: str, flags: set[str]) -> str:
    """One processor block as arch/x86/kernel/cpu/proc.c show_cpuinfo() prints it."""
    return (
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        f"model name\t: {name}\nstepping\t: 0\nflags\t\t: {' '.join(sorted(flags))}\n\n"
    )


def arm_records(parts: list[int], features: str) -> str:
    """arch/arm64/kernel/cpuinfo.c c_show(): one block per CPU, no model name."""
    return "".join(
        f"processor\t: {cpu}\nBogoMIPS\t: 38.40\nFeatures\t: {features}\n"
        f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n"
        f"CPU part\t: {part:#05x}\nCPU revision\t: 0\n\n"
        for cpu, part in enumerate(parts)
    )


# --- archspec's own targets: the label archspec's test expects, as GCC names it ---------------


@pytest.mark.parametrize(
    ("name", "arch", "model_name", "microarch"),
    [
        ("archspec-amazon-graviton.cpuinfo", "aarch64", "Cortex-A72", "cortex-a72"),
        ("archspec-rhel9-neoverse_n2.cpuinfo", "aarch64", "Neoverse-N2", "neoverse-n2"),
        (
            "archspec-ubuntu24.04-neoverse_v3ae.cpuinfo",
            "aarch64",
            "Neoverse-V3AE",
            "neoverse-v3ae",
        ),
        ("archspec-spacemit-x60.cpuinfo", "riscv64", "Spacemit(R) X60", "spacemit-x60"),
        ("archspec-ubuntu22.04-ampere1a.cpuinfo", "aarch64", "Ampere-1a", "ampere1a"),
        ("archspec-ubuntu26.04-arrowlake_s.cpuinfo", "x86_64", None, "arrowlake-s"),
        ("archspec-ubuntu24.04-alderlake.cpuinfo", "x86_64", None, "arrowlake-s"),
        ("fx6350-piledriver.cpuinfo", "x86_64", "AMD FX(tm)-6350 Six-Core Processor", "bdver2"),
    ],
)
def test_archspec_targets(
    tmp_path: Path, name: str, arch: str, model_name: str | None, microarch: str
) -> None:
    cpu, _ = probe(capture(tmp_path, name))
    assert (cpu.arch, cpu.microarch) == (arch, microarch), cpu.microarch_basis
    assert cpu.model_name == (model_name or cpu.model_name) and cpu.model_name


def test_arrow_lake_s_labelled_alderlake_by_archspec_names_what_its_kernel_lacks(
    tmp_path: Path,
) -> None:
    """archspec calls this capture alderlake: its kernel lists none of Arrow Lake's new flags."""
    cpu, _ = probe(capture(tmp_path, "archspec-ubuntu24.04-alderlake.cpuinfo"))
    absent = "avx_ifma avx_ne_convert avx_vnni_int16 avx_vnni_int8 cmpccxadd sha512 sm3 sm4"
    assert absent in (cpu.microarch_basis or "")


@pytest.mark.parametrize(
    ("name", "arch", "vendor", "microarch"),
    [
        ("archspec-darwin-mojave-skylake.sysctl", "x86_64", "GenuineIntel", "skylake"),
        ("archspec-darwin-mojave-haswell.sysctl", "x86_64", "GenuineIntel", "haswell"),
        ("archspec-darwin-sequoia-m3.sysctl", "aarch64", "Apple", "apple-m3"),
        ("archspec-darwin-sequoia-m4.sysctl", "aarch64", "Apple", "apple-m4"),
        ("archspec-darwin-tahoe-m5.sysctl", "aarch64", "Apple", "apple-m4"),  # by its SME flags
        ("archspec-rossetta2-monterey-core2.sysctl", "x86_64", "GenuineIntel", "core2"),
    ],
)
def test_archspec_darwin_sysctl_targets(
    tmp_path: Path, name: str, arch: str, vendor: str, microarch: str
) -> None:
    cpu, _ = probe(capture(tmp_path, name))
    assert (cpu.arch, cpu.vendor, cpu.microarch) == (arch, vendor, microarch), cpu.microarch_basis
    assert cpu.model_name


# --- util-linux's lscpu dumps: identity from lscpu alone (no Architecture line) -------------


def test_lscpu_naming_a_riscv_mvendorid_only_is_riscv(tmp_path: Path) -> None:
    """util-linux's lscpu-rv64-milkvpioneer (a Sophgo SG2042, 64 T-Head C920 harts) prints no
    Architecture or ISA line: its "Vendor ID: 0x5b7" was reported raw, the arch unknown."""
    (tmp_path / "lscpu.txt").write_text(
        (Path(__file__).parent / "data" / "cpu" / "utillinux-rv64-milkvpioneer.lscpu").read_text()
    )
    cpu, _ = probe(tmp_path)
    assert (cpu.arch, cpu.vendor, cpu.logical_cpus) == ("riscv64", "T-HEAD", 64)
    assert cpu.model_name is None  # its "Model name: -" is lscpu's "unknown", not a name


@pytest.mark.parametrize(
    ("vendor_id", "named"),
    [("0x489", "SiFive"), ("0x5b7", "T-HEAD"), ("0x127", "MIPS"), ("0x710", "SpacemiT")],
)
def test_a_riscv_lscpu_names_the_vendor_of_its_mvendorid(
    tmp_path: Path, vendor_id: str, named: str
) -> None:
    (tmp_path / "lscpu.txt").write_text(
        f"Architecture:        riscv64\nCPU(s):              4\nOn-line CPU(s) list: 0-3\n"
        f"Vendor ID:           {vendor_id}\n"
    )
    cpu, _ = probe(tmp_path)
    assert (cpu.arch, cpu.vendor) == ("riscv64", named)


@pytest.mark.parametrize(
    ("name", "arch", "vendor", "microarch"),
    [
        ("utillinux-ppc64-POWER7.lscpu", "ppc64", "IBM", "power7"),
        ("utillinux-ppc-qemu.lscpu", "ppc", "IBM", None),
        ("utillinux-s390-lpar.lscpu", "s390x", "IBM/S390", "z196"),
        ("utillinux-sparc64.lscpu", "sparc64", None, None),
        ("utillinux-rv64-visionfive2.lscpu", "riscv64", "SiFive", "sifive-u74"),
        ("utillinux-loongarch-loongson_3a5000_hv.lscpu", "loongarch64", "Loongson", None),
        ("utillinux-arm-A510-A710-A715-X3.lscpu", "aarch64", "ARM", "armv8.2-a"),
    ],
)
def test_util_linux_lscpu_identity(
    tmp_path: Path, name: str, arch: str, vendor: str | None, microarch: str | None
) -> None:
    (tmp_path / "lscpu.txt").write_text((DATA / name).read_text())
    cpu, issues = probe(tmp_path)
    assert (cpu.arch, cpu.microarch) == (arch, microarch), cpu.microarch_basis
    assert vendor is None or cpu.vendor == vendor
    if microarch is None and arch in ("ppc", "sparc64", "loongarch64"):
        assert any("is not supported" in issue for issue in issues)


def test_lscpu_phone_without_sve_tunes_for_the_x3(tmp_path: Path, knowledge: Knowledge) -> None:
    (tmp_path / "lscpu.txt").write_text(
        (DATA / "utillinux-arm-A510-A710-A715-X3.lscpu").read_text()
    )
    hw = detect(tmp_path, gpus=False, tensorflow=False)
    march, mtune = copts(hw, knowledge)
    assert march == "-march=armv8.2-a"  # SVE is off: no Cortex -mcpu may be used
    # Which of lscpu's four "Model name" blocks names the model is the lscpu parser's choice
    # (the /proc/cpuinfo phone test pins the biggest-core rule); it must be one of them.
    assert mtune in {"-mtune=cortex-x3", "-mtune=cortex-a715", "-mtune=cortex-a710"} | {
        "-mtune=cortex-a510"
    }


# --- Arm identity -------------------------------------------------------------------------


def test_neoverse_n2_with_irrelevant_fields_is_aarch64_and_named(tmp_path: Path) -> None:
    cpu, _ = probe(capture(tmp_path, "archspec-rhel9-neoverse_n2.cpuinfo"))
    assert (cpu.arch, cpu.vendor, cpu.model_name) == ("aarch64", "ARM", "Neoverse-N2")
    assert (cpu.implementer, cpu.part, cpu.microarch) == ("0x41", "0xd49", "neoverse-n2")


def test_old_kernel_processor_line_yields_to_the_part_name(tmp_path: Path) -> None:
    # arch/arm64/kernel/cpuinfo.c before v4.4 printed "Processor : AArch64 Processor rev 4"
    text = "Processor\t: AArch64 Processor rev 4 (aarch64)\n" + arm_records([0xD03], "fp asimd")
    cpu, _ = probe(root_with(tmp_path, text))
    assert (cpu.arch, cpu.model_name) == ("aarch64", "Cortex-A53")


def test_every_aarch64_capture_gets_a_model_name() -> None:
    for root in (REPO / "tests" / "data" / "hosts").iterdir():
        cpuinfo = root / "proc" / "cpuinfo"
        if cpuinfo.is_file() and "CPU implementer" in cpuinfo.read_text():
            cpu, _ = probe(root)
            assert cpu.arch == "aarch64" and cpu.model_name, root.name
    cpu, _ = probe(REPO / "tests" / "data" / "hosts" / "archspec-amazon-graviton2")
    assert cpu.model_name == "Neoverse-N1"


def test_arm_parts_table_is_valid_and_sourced() -> None:
    raw = json.loads((DATA_DIR / "arm_parts.json").read_text())["entries"]
    keys = [entry["key"] for entry in raw]
    assert len(keys) == len(set(keys))
    for entry in raw:
        assert entry["source"] and entry["name"], entry
        implementer, part = parse_key(entry["key"])
        assert entry["key"] == f"{implementer:#04x}:{part:#05x}"  # the form cpuinfo prints
        assert arm_part_name(implementer, part) == entry["name"]
    for key in ("0x41:0xd46", "0x41:0xd47", "0x41:0xd4d", "0x41:0xd81", "0x41:0xd4e"):
        assert key in keys  # Cortex-A510, A710, A715, A720, X3
    assert arm_part_name(0x41, 0xD8E) == "Neoverse-N3" and arm_part_name(0x41, 0xD84)


PHONE = [0xD46, 0xD46, 0xD46, 0xD47, 0xD47, 0xD4D, 0xD4D, 0xD4E]  # 3xA510 2xA710 2xA715 1xX3
V9_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
    "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca "
    "pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 "
    "i8mm bf16 dgh bti"
)


def test_dynamiq_phone_is_named_by_its_biggest_core(tmp_path: Path) -> None:
    cpu, _ = probe(root_with(tmp_path, arm_records(PHONE, V9_FEATURES)))
    assert cpu.model_name == "Cortex-A510"  # CPU 0, as lscpu's first Model name
    assert cpu.microarch == "cortex-x3" and cpu.microarch != "neoverse-n1"


def test_phone_without_sve_tunes_for_its_core_and_targets_what_it_shows(
    tmp_path: Path, knowledge: Knowledge
) -> None:
    """Some SoC firmware leaves SVE off: -mcpu=cortex-x3 would emit SVE2, so -march follows."""
    no_sve = " ".join(f for f in V9_FEATURES.split() if not f.startswith("sve"))
    hw = detect(root_with(tmp_path, arm_records(PHONE, no_sve)), gpus=False, tensorflow=False)
    assert hw.cpu.model_microarch == "cortex-x3"
    assert hw.cpu.microarch == "armv8.2-a", hw.cpu.microarch_basis
    assert copts(hw, knowledge) == ["-march=armv8.2-a", "-mtune=cortex-x3"]


def test_armv7_gets_arch_vendor_and_an_unsupported_issue(tmp_path: Path) -> None:
    # arch/arm/kernel/setup.c c_show() on a Raspberry Pi 3 running a 32-bit kernel
    text = (
        "processor\t: 0\nmodel name\t: ARMv7 Processor rev 4 (v7l)\nBogoMIPS\t: 38.40\n"
        "Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae "
        "evtstrm crc32\nCPU implementer\t: 0x41\nCPU architecture: 7\nCPU variant\t: 0x0\n"
        "CPU part\t: 0xd03\nCPU revision\t: 4\n\nHardware\t: BCM2835\n"
    )
    cpu, issues = probe(root_with(tmp_path, text))
    assert (cpu.arch, cpu.vendor, cpu.model_name) == (
        "armv7l",
        "ARM",
        "Cortex-A53",  # lscpu names the core from its part, not the kernel's "ARMv7 Processor"
    )
    assert any("32-bit Arm (armv7l) is not supported" in i for i in issues)


# --- microarchitecture coverage -------------------------------------------------------------


def test_piledriver_keeps_avx_and_fma(tmp_path: Path, knowledge: Knowledge) -> None:
    root = capture(tmp_path, "fx6350-piledriver.cpuinfo")
    cpu, _ = probe(root)
    assert (cpu.microarch, cpu.x86_64_level) == ("bdver2", 2), cpu.microarch_basis
    assert copts(detect(root, gpus=False, tensorflow=False), knowledge) == ["-march=bdver2"]


def words(text: str) -> set[str]:
    return set(text.split())


# A family 0x10 record's flags as Linux names them (arch/x86/include/asm/cpufeatures.h)
K10_FLAGS = words(
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx "
    "fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm 3dnowext 3dnow "
    "constant_tsc rep_good nopl nonstop_tsc extd_apicid pni monitor cx16 popcnt lahf_lm "
    "cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit"
)


@pytest.mark.parametrize(
    ("family", "model", "flags", "expected"),
    [
        (16, 0x04, K10_FLAGS, "amdfam10"),  # Opteron 23xx/Phenom II (Shanghai/Deneb)
        (16, 0x04, K10_FLAGS - {"3dnow"}, "x86-64"),  # a K10 without 3DNow! is not amdfam10
        (
            21,
            0x01,
            K10_FLAGS | words("ssse3 sse4_1 sse4_2 avx xsave aes pclmulqdq xop fma4"),
            "bdver1",
        ),
        (21, 0x30, REQUIRED["bdver3"], "bdver3"),
        (21, 0x60, REQUIRED["bdver4"], "bdver4"),
    ],
)
def test_amd_k10_and_bulldozer_families(
    tmp_path: Path, family: int, model: int, flags: set[str], expected: str
) -> None:
    text = x86_record("AuthenticAMD", family, model, "AMD Opteron(tm) Processor", set(flags))
    cpu, _ = probe(root_with(tmp_path, text))
    assert cpu.microarch == expected, cpu.microarch_basis


def test_hygon_dhyana_compiles_as_znver1(tmp_path: Path, knowledge: Knowledge) -> None:
    text = x86_record(
        "HygonGenuine", 24, 0, "Hygon C86 7185 32-core Processor", set(REQUIRED["dhyana"])
    )
    root = root_with(tmp_path, text)
    cpu, _ = probe(root)
    assert (cpu.vendor, cpu.microarch) == ("HygonGenuine", "dhyana")
    assert copts(detect(root, gpus=False, tensorflow=False), knowledge) == ["-march=znver1"]


def _power(cpu_line: str, pvr: str) -> str:
    # arch/powerpc/kernel/setup-common.c show_cpuinfo(): processor/cpu/clock/revision, trailer
    return (
        f"processor\t: 0\ncpu\t\t: {cpu_line}\nclock\t\t: 3550.000000MHz\n"
        f"revision\t: 2.1 (pvr {pvr})\n\ntimebase\t: 512000000\nplatform\t: pSeries\n"
    )


def test_power7_is_big_endian_ppc64(tmp_path: Path) -> None:
    cpu, _ = probe(
        root_with(tmp_path, _power("POWER7 (architected), altivec supported", "003f 0201"))
    )
    assert (cpu.arch, cpu.vendor, cpu.microarch) == ("ppc64", "IBM", "power7")


def test_ppc64_from_lscpu_architecture_not_assumed(tmp_path: Path) -> None:
    text = _power("POWER8 (raw), altivec supported", "004d 0200")
    assert probe(root_with(tmp_path, text))[0].arch == "ppc64le"  # what distributions ship
    lscpu = (
        "Architecture:        ppc64\nByte Order:          Big Endian\n"
        "Model name:          POWER8 (raw), altivec supported\n"
    )
    assert probe(root_with(tmp_path, text, lscpu))[0].arch == "ppc64"


def test_32bit_powerpc_is_reported_unsupported(tmp_path: Path) -> None:
    cpu, issues = probe(root_with(tmp_path, _power("7447A, altivec supported", "8003 0101")))
    assert (cpu.arch, cpu.vendor) == ("ppc", "Freescale")
    assert any("32-bit PowerPC (ppc) is not supported" in i for i in issues)


@pytest.mark.parametrize(
    "name", ["archspec-spacemit-x60.cpuinfo", "archspec-debian13-x60.cpuinfo"]
)
def test_riscv_isa_uarch_and_vendor_ids(tmp_path: Path, name: str) -> None:
    cpu, _ = probe(capture(tmp_path, name))
    assert (cpu.arch, cpu.vendor, cpu.model_name) == ("riscv64", "SpacemiT", "Spacemit(R) X60")
    assert {"i", "m", "a", "f", "d", "c", "v", "zba", "zicbom"} <= set(cpu.flags)
    assert cpu.microarch == "spacemit-x60", cpu.microarch_basis


def test_riscv_generic_core_gets_the_gcc_isa_target(tmp_path: Path) -> None:
    # arch/riscv/kernel/cpu.c c_show() of an older kernel: no uarch or vendor ids
    text = "processor\t: 0\nhart\t\t: 1\nisa\t\t: rv64imafdc\nmmu\t\t: sv39\n\n"
    cpu, _ = probe(root_with(tmp_path, text))
    assert (cpu.arch, cpu.microarch) == ("riscv64", "rv64gc")


S390 = (  # arch/s390/kernel/processor.c show_cpu_summary() on a z13 LPAR
    "vendor_id       : IBM/S390\n# processors    : 2\nbogomips per cpu: 3033.00\n"
    "max thread id   : 0\nfeatures\t: esan3 zarch stfle msa ldisp eimm dfp edat etf3eh "
    "highgprs te vx sie\nfacilities      : 0 1 2 3 4 6 7 8 9 10\n"
    "processor 0: version = FF,  identification = 0133E8,  machine = 2964\n"
    "processor 1: version = FF,  identification = 0133E8,  machine = 2964\n\n"
    "cpu number      : 0\ncpu MHz dynamic : 5000\ncpu MHz static  : 5000\n"
)


def test_s390_processor_lines_are_records(tmp_path: Path) -> None:
    cpu, issues = probe(root_with(tmp_path, S390))
    assert not any("no 'processor' records" in i for i in issues)
    assert (cpu.arch, cpu.vendor, cpu.microarch) == ("s390x", "IBM/S390", "z13")


@pytest.mark.parametrize(
    ("text", "arch", "vendor", "what"),
    [
        (  # arch/loongarch/kernel/proc.c show_cpuinfo()
            "system type\t\t: generic-loongson-machine\n\nprocessor\t\t: 0\npackage\t\t\t: 0\n"
            "core\t\t\t: 0\nCPU Family\t\t: Loongson-64bit\nModel Name\t\t: Loongson-3A5000\n"
            "ISA\t\t\t: loongarch32 loongarch64\n"
            "Features\t\t: cpucfg lam ual fpu lsx lasx crc32\n",
            "loongarch64",
            "Loongson",
            "LoongArch",
        ),
        (  # arch/sparc/kernel/cpu.c show_cpuinfo() on a T2
            "cpu\t\t: UltraSparc T2 (Niagara2)\nfpu\t\t: UltraSparc T2 integrated FPU\n"
            "pmu\t\t: niagara2\nprom\t\t: OBP 4.30.4.d\ntype\t\t: sun4v\nncpus probed\t: 64\n",
            "sparc64",
            "Oracle",
            "SPARC",
        ),
    ],
)
def test_other_architectures_get_arch_vendor_and_an_issue(
    tmp_path: Path, text: str, arch: str, vendor: str, what: str
) -> None:
    cpu, issues = probe(root_with(tmp_path, text))
    assert (cpu.arch, cpu.vendor) == (arch, vendor)
    assert any(f"{what} ({arch}) is not supported" in i for i in issues)


# --- the model id and the flags, one rule -----------------------------------------------------

ZEN5_MASKED = {"rdseed", "movdiri", "movdir64b"}


def zen5_guest(tmp_path: Path) -> Path:
    flags = set(REQUIRED["znver5"]) - ZEN5_MASKED | {"hypervisor"}
    return root_with(tmp_path, x86_record("AuthenticAMD", 26, 0x11, "AMD EPYC 9B45", flags))


def test_zen5_guest_targets_visible_flags_and_tunes_for_the_model(
    tmp_path: Path, knowledge: Knowledge
) -> None:
    hw = detect(zen5_guest(tmp_path), gpus=False, tensorflow=False)
    assert (hw.cpu.microarch, hw.cpu.model_microarch) == ("x86-64-v4", "znver5")
    assert copts(hw, knowledge, "2.19") == ["-march=x86-64-v4", "-mtune=znver4"]  # clang 18
    profile = plan(hw, knowledge=knowledge, tf_version="2.19")
    assert profile.bazel is not None
    reasons = "\n".join(profile.bazel.reasons)
    assert "rdseed" in reasons and "znver5 (clang ≥ 19)" in reasons
    newer = dataclasses.replace(knowledge.tf_by_version["2.19"], clang="19.1.7")
    knowledge19 = dataclasses.replace(knowledge, tf_versions=(*knowledge.tf_versions[:0], newer))
    profile19 = plan(hw, knowledge=knowledge19, tf_version="2.19")
    assert profile19.bazel is not None
    assert "--copt=-mtune=znver5" in profile19.bazel.options


def test_detect_summary_names_the_masked_flags(tmp_path: Path) -> None:
    hw = detect(zen5_guest(tmp_path), gpus=False, tensorflow=False)
    summary = render_summary(hw)
    assert "Zen 5, rdseed movdiri movdir64b masked -> x86-64-v4" in summary
    assert "x86-64-v4, x86-64-v4" not in summary


def test_arrow_lake_s_on_an_older_kernel_names_the_absent_flags(tmp_path: Path) -> None:
    text = (DATA / "archspec-ubuntu26.04-arrowlake_s.cpuinfo").read_text()
    full, _ = probe(root_with(tmp_path / "new", text))
    assert full.microarch == "arrowlake-s" and "not visible" not in (full.microarch_basis or "")
    older = text.replace(" sha512 sm3 sm4", "").replace(" avx_vnni_int16", "")
    cpu, _ = probe(root_with(tmp_path / "old", older))
    assert cpu.microarch == "arrowlake-s"
    assert "avx_vnni_int16 sha512 sm3 sm4" in (cpu.microarch_basis or "")


def test_detect_imports_no_heavy_modules(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from hwtune.probes import detect; "
        f"detect(Path({str(zen5_guest(tmp_path))!r}), gpus=False, tensorflow=False); "
        "heavy = ('pydantic', 'psutil', 'cpuinfo', 'tensorflow'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_flags_line_tunes_for_the_model_and_keeps_the_baseline(
    tmp_path: Path, knowledge: Knowledge
) -> None:
    # lscpu's summary (util-linux sys-utils/lscpu.c print_summary) pasted without its Flags line
    lscpu = (
        "Architecture:            x86_64\nCPU(s):                  2\n"
        "Vendor ID:               AuthenticAMD\nModel name:              AMD EPYC 9R14\n"
        "CPU family:              25\nModel:                   17\nStepping:                1\n"
    )
    (tmp_path / "lscpu.txt").write_text(lscpu)
    hw = detect(tmp_path, gpus=False, tensorflow=False)
    assert hw.cpu.model_microarch == "znver4" and not hw.cpu.flags
    assert "no flags" in (hw.cpu.microarch_basis or "")
    assert copts(hw, knowledge) == ["-march=x86-64", "-mtune=znver4"]  # x86-64 needs no flag
    profile = plan(hw, knowledge=knowledge, tf_version="2.19")
    assert profile.bazel is not None
    assert any("flags are unknown" in reason for reason in profile.bazel.reasons)


def test_a_raspberry_pi_3_plans_its_own_core_not_another(
    tmp_path: Path, knowledge: Knowledge
) -> None:
    """Cortex-A53 (0xd03) was not in the table: its flags fit cortex-a72, and the plan emitted
    --copt=-mcpu=cortex-a72 for it, then a generic armv8-a. Its own entry names it now."""
    features = "fp asimd evtstrm crc32 cpuid"
    hw = detect(
        root_with(tmp_path, arm_records([0xD03] * 4, features)), gpus=False, tensorflow=False
    )
    assert (hw.cpu.model_name, hw.cpu.microarch) == ("Cortex-A53", "cortex-a53")
    assert copts(hw, knowledge) == ["-mcpu=cortex-a53"]


def _intel_cpuinfo(model: int, threads_per_core: tuple[int, ...]) -> str:
    """/proc/cpuinfo of one Intel socket whose cores have these thread counts, as the kernel
    prints it (processor, vendor_id, cpu family, model, physical id, siblings, core id, cpu
    cores); the flags of an x86-64-v3 part."""
    siblings = sum(threads_per_core)
    records, cpu = [], 0
    for core, threads in enumerate(threads_per_core):
        for _ in range(threads):
            records.append(
                f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                f"model\t\t: {model}\nmodel name\t: Intel(R) test part\nphysical id\t: 0\n"
                f"siblings\t: {siblings}\ncore id\t\t: {core}\ncpu cores\t: "
                f"{len(threads_per_core)}\nflags\t\t: fpu lm sse sse2 ssse3 sse4_1 sse4_2 avx "
                "avx2 fma bmi1 bmi2 movbe popcnt xsave f16c lzcnt abm\n"
            )
            cpu += 1
    return "\n".join(records)


@pytest.mark.parametrize(
    ("model", "threads", "unknown"),
    [
        (0xC6, (1,) * 20, True),  # Arrow Lake-S: no Hyper-Threading on any core
        (0x97, (1,) * 16, True),  # Alder Lake with Hyper-Threading off in the firmware
        (0x97, (2,) * 6, False),  # i5-12400-like: every core has 2 threads, so all P-cores
        (0x97, (2,) * 8 + (1,) * 8, False),  # told by SMT: P-cores 2 threads, E-cores 1
        (0xBE, (1,) * 8, False),  # Alder Lake-N: E-cores only (intel-family.h ATOM_GRACEMONT)
        (0x8F, (1,) * 16, False),  # Sapphire Rapids: no hybrid parts
    ],
)
def test_an_intel_hybrid_model_nothing_tells_apart_has_unknown_core_types(
    tmp_path: Path, model: int, threads: tuple[int, ...], unknown: bool
) -> None:
    """Uniform is a guess where the model is one of Intel's hybrids and every core has one
    thread: the report says the core types are unknown instead."""
    cpu, reasons = probe(root_with(tmp_path, _intel_cpuinfo(model, threads)))
    said = [r for r in reasons if "is listed among Intel's hybrid parts" in r]
    assert bool(said) is unknown, reasons
    if unknown:
        assert cpu.core_types == () and "one thread on every core" in said[0]


def test_the_real_arrow_lake_capture_says_its_core_types_are_unknown(tmp_path: Path) -> None:
    # archspec's arrowlake_s capture is one record of a Core Ultra 9 285 (model 198 = 0xc6).
    _, reasons = probe(capture(tmp_path, "archspec-ubuntu26.04-arrowlake_s.cpuinfo"))
    said = [r for r in reasons if "is listed among Intel's hybrid parts" in r]
    assert said and "6:0xc6 (Arrow Lake-S)" in said[0] and "no per-core topology" in said[0]


def test_a_hybrid_id_outside_the_entrys_ids_is_refused() -> None:
    from hwtune.errors import KnowledgeError
    from hwtune.probes.microarch import MicroarchEntry, hybrid_model

    entry = MicroarchEntry(
        key="x", arch="x86_64", name="X", source="s", vendor="GenuineIntel",
        x86_ids=("6:0x97",), hybrid_x86_ids=("6:0x98",),
    )  # fmt: skip
    with pytest.raises(KnowledgeError, match="hybrid id 6:0x98 is not one of its x86_ids"):
        hybrid_model("GenuineIntel", 6, 0x98, entries=(entry,))


# An Atom N270 netbook (Diamondville, no long mode), record 0 of a /proc/cpuinfo posted in a
# public report on webkit2gtk's i386 build (it cites Debian bug 930935); record 1, cut off
# there, is record 0 with the second thread's ids, as arch/x86/kernel/cpu/proc.c prints it.
ATOM_N270_RECORD = (
    "processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 28\n"
    "model name\t: Intel(R) Atom(TM) CPU N270   @ 1.60GHz\nstepping\t: 2\nmicrocode\t: 0x218\n"
    "cpu MHz\t\t: 858.303\ncache size\t: 512 KB\nphysical id\t: 0\nsiblings\t: 2\n"
    "core id\t\t: 0\ncpu cores\t: 1\napicid\t\t: {n}\ninitial apicid\t: {n}\nfdiv_bug\t: no\n"
    "f00f_bug\t: no\ncoma_bug\t: no\nfpu\t\t: yes\nfpu_exception\t: yes\ncpuid level\t: 10\n"
    "wp\t\t: yes\nflags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat "
    "clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe nx constant_tsc arch_perfmon pebs bts "
    "cpuid aperfmperf pni dtes64 monitor ds_cpl est tm2 ssse3 xtpr pdcm movbe lahf_lm dtherm\n"
    "bugs\t\t:\nbogomips\t: 3192.00\nclflush size\t: 64\ncache_alignment\t: 64\n"
    "address sizes\t: 32 bits physical, 32 bits virtual\npower management:\n\n"
)
# util-linux tests/ts/lscpu/dumps/i386-xenpara/proc/cpuinfo, record 0: a 32-bit kernel (its
# fdiv_bug lines) on a 64-bit Xeon L5420, whose flags list "lm".
XEN_I386_ON_XEON = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 23\n"
    "model name\t: Intel(R) Xeon(R) CPU           L5420  @ 2.50GHz\nstepping\t: 6\n"
    "cpu MHz\t\t: 2493.776\ncache size\t: 6144 KB\nfdiv_bug\t: no\nhlt_bug\t\t: no\n"
    "f00f_bug\t: no\ncoma_bug\t: no\nfpu\t\t: yes\nfpu_exception\t: yes\ncpuid level\t: 10\n"
    "wp\t\t: yes\nflags\t\t: fpu tsc msr pae mce cx8 apic mca cmov pat pse36 clflush dts acpi "
    "mmx fxsr sse sse2 ss ht tm pbe nx lm constant_tsc pni monitor ds_cpl vmx est tm2 cx16 "
    "xtpr lahf_lm\nbogomips\t: 6236.83\n\n"
)


def test_a_32_bit_x86_cpu_is_i686_not_x86_64(tmp_path: Path) -> None:
    """No "lm" flag: no long mode, so no x86-64 target applies (it was reported x86_64 and
    got a 64-bit -march)."""
    text = "".join(ATOM_N270_RECORD.format(n=n) for n in range(2))
    cpu, issues = probe(root_with(tmp_path, text))
    assert (cpu.arch, cpu.vendor, cpu.family, cpu.model) == ("i686", "GenuineIntel", 6, 28)
    assert cpu.microarch is None
    assert any("32-bit x86 (i686) is not supported" in reason for reason in issues), issues


def test_a_32_bit_kernel_on_a_64_bit_cpu_stays_x86_64(tmp_path: Path) -> None:
    cpu, _ = probe(root_with(tmp_path, XEN_I386_ON_XEON))
    # Xen PV hides ssse3: the flags give nocona, the model still tunes for Core 2.
    assert (cpu.arch, cpu.model_microarch) == ("x86_64", "core2"), cpu.microarch_basis


@pytest.mark.parametrize(
    ("architecture", "op_modes", "flags"),
    [
        ("Architecture:        i686\n", "32-bit", "fpu vme de pse tsc msr pae mce cx8 sep"),
        ("Architecture:        i386\n", "32-bit, 64-bit", "fpu lm cmov"),
        ("", "32-bit", ""),  # util-linux's dumps print no Architecture line
        ("", "32-bit, 64-bit", "fpu vme de pse tsc msr pae mce cx8 sep"),
    ],
    ids=["i686-line", "i386-line", "op-modes-32-only", "flags-without-lm"],
)
def test_lscpu_of_a_32_bit_x86_machine_is_i686(
    tmp_path: Path, architecture: str, op_modes: str, flags: str
) -> None:
    """lscpu's summary as util-linux prints it (sys-utils/lscpu.c print_summary)."""
    (tmp_path / "lscpu.txt").write_text(
        f"{architecture}CPU op-mode(s):      {op_modes}\nByte Order:          Little Endian\n"
        "CPU(s):              2\nOn-line CPU(s) list: 0,1\nVendor ID:           GenuineIntel\n"
        "CPU family:          6\nModel:               28\n"
        "Model name:          Intel(R) Atom(TM) CPU N270   @ 1.60GHz\n"
        + (f"Flags:               {flags}\n" if flags else "")
    )
    cpu, _ = probe(tmp_path)
    assert (cpu.arch, cpu.family, cpu.model) == ("i686", 6, 28)
