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


# TensorFlow 2.14 is the last release built with CUDA 11 (11.8, cuDNN 8.7: tensorflow.org/install
# /source, "Tested build configurations"; 2.15 moved to CUDA 12.2). The T4 capture's driver
# (515.105.01, CUDA 11.7) cannot load the CUDA 12 of 2.15 and later, so a plan that runs on its
# GPU needs such a TensorFlow installed; under it the driver runs CUDA 11.8 by minor version
# compatibility.
CUDA_11_BUILD_INFO = (
    "import collections\nbuild_info = collections.OrderedDict([('cpu_compiler', "
    "'/usr/lib/llvm-16/bin/clang'), ('cuda_compute_capabilities', ['sm_35', 'sm_50', 'sm_60', "
    "'sm_70', 'sm_75', 'compute_80']), ('cuda_version', '11.8'), ('cudnn_version', '8'), "
    "('is_cuda_build', True), ('is_rocm_build', False), ('is_tensorrt_build', True)])\n"
)


def add_cuda_11_tensorflow(dest: Path, site: Path) -> None:
    """Write `dest/tensorflow.json` for a TensorFlow 2.14.1 CUDA build (CUDA 11.8) in `site`."""
    from hwtune.probes.issues import IssueLog
    from hwtune.probes.tensorflow import save_tf_snapshot
    from tests.test_probe_tensorflow import make_site

    make_site(site, dist="tensorflow", version="2.14.1", build_info=CUDA_11_BUILD_INFO)
    save_tf_snapshot(dest, IssueLog(), search_path=[str(site)])


def t4_under_cuda_11(tmp_path: Path) -> Path:
    """The T4 host capture with a TensorFlow 2.14.1 CUDA build (CUDA 11.8) installed."""
    dest = tmp_path / "t4-tf214"
    shutil.copytree(T4_HOST, dest)
    (dest / "expected_profile.json").unlink(missing_ok=True)
    add_cuda_11_tensorflow(dest, tmp_path / "site-tf214")
    return dest
