"""Common CPUs nobody tuned for: small Arm cores, Jetson and Kunpeng servers, Atom servers.

Each capture is public text (where from, in the comment above it), laid out as `hwtune detect
--root` reads a machine: /proc/cpuinfo under proc/, or lscpu's output as lscpu.txt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.probes import detect
from tests.conftest import REPO

# A Raspberry Pi 5 (BCM2712, 4 x Cortex-A76) on Raspberry Pi OS, kernel 6.12.75+rpt-rpi-2712:
# the first record of a /proc/cpuinfo published in public GitHub test data; the kernel prints
# the same record for each of the four cores (arch/arm64/kernel/cpuinfo.c c_show()).
RPI5_RECORD = (
    "processor\t: {n}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 "
    "crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\n"
    "CPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n"
)
RPI5 = "".join(RPI5_RECORD.format(n=n) for n in range(4)) + (
    "Revision\t: d04170\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n"
)

# A Huawei Cloud kc1 instance (Kunpeng 920), its /proc/cpuinfo as published in a public blog
# post on that instance type.
KUNPENG_920 = (
    "processor\t: 0\nBogoMIPS\t: 200.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
    "atomics fphp asimdhp cpuid asimdrdm jscvt fcma dcpop asimddp asimdfhm\n"
    "CPU implementer\t: 0x48\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd01\n"
    "CPU revision\t: 0\n\n"
)

# A Jetson AGX Orin (12 x Cortex-A78AE): lscpu from hu-po/warp-ik docs/specs/arm-agx.md, up to
# its NUMA lines.
JETSON_ORIN_LSCPU = """\
Architecture:                       aarch64
CPU op-mode(s):                     32-bit, 64-bit
Byte Order:                         Little Endian
CPU(s):                             12
On-line CPU(s) list:                0-11
Vendor ID:                          ARM
Model name:                         Cortex-A78AE
Model:                              1
Thread(s) per core:                 1
Core(s) per cluster:                4
Socket(s):                          -
Cluster(s):                         3
Stepping:                           r0p1
CPU max MHz:                        2201.6001
CPU min MHz:                        115.2000
BogoMIPS:                           62.50
Flags:                              fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp \
asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat ilrcpc flagm paca pacg
L1d cache:                          768 KiB (12 instances)
L1i cache:                          768 KiB (12 instances)
L2 cache:                           3 MiB (12 instances)
L3 cache:                           6 MiB (3 instances)
NUMA node(s):                       1
NUMA node0 CPU(s):                  0-11
"""

# A SuperMicro SYS-E300-9A with an Atom C3858 (Denverton, Goldmont, family 6 model 0x5f): lscpu
# from FDio/csit docs/lab/testbeds_sm_dnv_hw_bios_cfg.md (its Flags line, wrapped there, is one
# line as lscpu prints it).
DENVERTON_LSCPU = """\
Architecture:        x86_64
CPU op-mode(s):      32-bit, 64-bit
Byte Order:          Little Endian
CPU(s):              12
On-line CPU(s) list: 0-11
Thread(s) per core:  1
Core(s) per socket:  12
Socket(s):           1
NUMA node(s):        1
Vendor ID:           GenuineIntel
CPU family:          6
Model:               95
Model name:          Intel(R) Atom(TM) CPU C3858 @ 2.00GHz
Stepping:            1
CPU MHz:             2000.000
CPU max MHz:         2000.0000
CPU min MHz:         800.0000
BogoMIPS:            4000.00
Virtualization:      VT-x
L1d cache:           24K
L1i cache:           32K
L2 cache:            2048K
NUMA node0 CPU(s):   0-11
Flags:               fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca \
cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx \
pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology \
nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl \
vmx est tm2 ssse3 sdbg cx16 xtpr pdcm sse4_1 sse4_2 x2apic movbe popcnt \
tsc_deadline_timer aes xsave rdrand lahf_lm 3dnowprefetch cpuid_fault epb cat_l2 \
ssbd ibrs ibpb stibp tpr_shadow vnmi flexpriority ept vpid ept_ad fsgsbase \
tsc_adjust smep erms mpx rdt_a rdseed smap clflushopt intel_pt sha_ni xsaveopt \
xsavec xgetbv1 xsaves dtherm arat pln pts md_clear arch_capabilities
"""


def lay_out(root: Path, cpuinfo: str | None = None, lscpu: str | None = None) -> Path:
    if cpuinfo is not None:
        (root / "proc").mkdir(parents=True)
        (root / "proc" / "cpuinfo").write_text(cpuinfo)
    if lscpu is not None:
        (root / "lscpu.txt").write_text(lscpu)
    return root


@pytest.mark.parametrize(
    ("cpuinfo", "lscpu", "model_name", "microarch"),
    [
        (RPI5, None, "Cortex-A76", "cortex-a76"),
        (KUNPENG_920, None, "Kunpeng-920", "tsv110"),
        (None, JETSON_ORIN_LSCPU, "Cortex-A78AE", "cortex-a78ae"),
        (None, DENVERTON_LSCPU, "Intel(R) Atom(TM) CPU C3858 @ 2.00GHz", "goldmont"),
    ],
    ids=["raspberry-pi-5", "kunpeng-920", "jetson-agx-orin", "atom-c3858-denverton"],
)
def test_a_capture_names_its_own_core(
    tmp_path: Path, cpuinfo: str | None, lscpu: str | None, model_name: str, microarch: str
) -> None:
    """These fell back to a generic level (armv8.2-a, x86-64-v2), which -mtune'd nothing."""
    hw = detect(lay_out(tmp_path, cpuinfo, lscpu), gpus=False, tensorflow=False)
    assert (hw.cpu.model_name, hw.cpu.microarch) == (model_name, microarch), hw.cpu.microarch_basis
    assert hw.cpu.model_microarch == microarch
    assert not [i for i in hw.issues if "microarchitecture" in i.reason]


def test_detect_cli_names_the_raspberry_pi_5_core(tmp_path: Path) -> None:
    root = lay_out(tmp_path, RPI5)
    ran = subprocess.run(
        [sys.executable, "-m", "hwtune", "detect", "--root", str(root), "--json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert ran.returncode == 0, ran.stderr
    cpu = json.loads(ran.stdout)["cpu"]
    assert (cpu["arch"], cpu["vendor"], cpu["microarch"]) == ("aarch64", "ARM", "cortex-a76")
    assert cpu["threads_per_core"] == 1 and cpu["logical_cpus"] == 4


def test_a_big_little_armv8_part_is_named_by_its_big_core(tmp_path: Path) -> None:
    """RK3399-style 4 x Cortex-A53 + 2 x Cortex-A72 (records as arch/arm64/kernel/cpuinfo.c
    prints them): the A72 names the target, as GCC's cortex-a72.cortex-a53 tunes for it."""
    records = "".join(
        f"processor\t: {n}\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\n"
        f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
        f"CPU part\t: {'0xd03' if n < 4 else '0xd08'}\nCPU revision\t: 4\n\n"
        for n in range(6)
    )
    hw = detect(lay_out(tmp_path, records), gpus=False, tensorflow=False)
    assert hw.cpu.microarch == "cortex-a72", hw.cpu.microarch_basis
