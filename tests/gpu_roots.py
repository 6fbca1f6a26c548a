"""Roots for GPU plan tests, assembled from real captures (tests/data/gpu, tests/data/hosts).

Each root is one CPU capture (an `lscpu` or `/proc/cpuinfo` of tests/data/hosts) next to GPU
captures (`nvidia-smi -q -x`, `topo -m`, `-L`) laid out under the names `hwtune snapshot`
writes. The parts of a root come from different machines where SOURCES.md says so; nothing in
them is invented.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hwtune.models.hardware import Hardware
from hwtune.probes import detect
from hwtune.probes.nvidia_smi import TOPO_NAME, XML_NAME
from hwtune.probes.nvidia_smi_list import LIST_NAME
from tests.conftest import DATA

GPU = DATA / "gpu"
HOSTS = DATA / "hosts"

T4_XML = GPU / "telegraf-tesla-t4-xml.smi"
A100_MIG_XML = GPU / "telegraf-a100-sxm4-80gb-mig-v12.smi"
BLACKWELL_XML = GPU / "telegraf-rtx-pro-6000-blackwell-v13.smi"
MIG_LIST = GPU / "cuiliang-8xa100-80gb-mig-1g20gb.L"
MIXED_MIG_LIST = GPU / "cuiliang-8xa100-80gb-mig-mixed.L"
A100_TOPO = GPU / "cuiliang-8xa100-80gb.topo"
P4D_TOPO = GPU / "trainingoneks-aws-p4d.24xlarge-8xA100.topo"
H100_TOPO = GPU / "trainingoneks-aws-p5.48xlarge-8xH100.topo"
L40S_TOPO = GPU / "nccltests273-8xL40S.topo"
K80_LIST = GPU / "ec2-p2-1xK80.L"

EPYC = HOSTS / "utillinux-x86_64-epyc_7451"  # lscpu.txt: 2 × 24 cores, 96 CPUs
HASWELL = HOSTS / "spack-rhel7-haswell"  # proc/cpuinfo: 2 × 12 cores
T4_HOST = HOSTS / "haswell-tesla-t4-gpu"
P4D_HOST = HOSTS / "epyc7451-p4d-8xa100-gpu"


def root(
    tmp_path: Path,
    cpu: Path,
    *,
    xml: Path | None = None,
    topo: Path | None = None,
    listing: Path | None = None,
) -> Path:
    """A snapshot-shaped root: the CPU capture of `cpu` plus the given GPU captures."""
    dest = tmp_path / "root"
    dest.mkdir()
    if (cpu / "lscpu.txt").is_file():
        shutil.copyfile(cpu / "lscpu.txt", dest / "lscpu.txt")
    else:
        (dest / "proc").mkdir()
        shutil.copyfile(cpu / "proc" / "cpuinfo", dest / "proc" / "cpuinfo")
    for source, name in ((xml, XML_NAME), (topo, TOPO_NAME), (listing, LIST_NAME)):
        if source is not None:
            shutil.copyfile(source, dest / name)
    return dest


def hardware(
    tmp_path: Path,
    cpu: Path,
    *,
    xml: Path | None = None,
    topo: Path | None = None,
    listing: Path | None = None,
) -> Hardware:
    return detect(root(tmp_path, cpu, xml=xml, topo=topo, listing=listing))
