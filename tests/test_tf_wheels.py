"""The TensorFlow probe on real wheels from PyPI, rebuilt small: each tests/data/tf_wheels/<dir>
holds a wheel's WHEEL, the header block of its METADATA and its build_info.py, copied verbatim,
and objects.json, the dynamic entries of its shared objects as `readelf -d -W` printed them
(DT_NEEDED, SONAME, RUNPATH). The test lays them out as pip would (the objects rebuilt as ELF
files with those entries) and checks every fact the probe tells against what the wheel says.
SOURCES.md names each wheel file, its URL and sha256."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, NamedTuple

import pytest

from hwtune.models.hardware import CpuInfo, TensorFlowInfo
from hwtune.probes.issues import IssueLog
from hwtune.probes.tensorflow import probe_tensorflow
from tests.conftest import DATA
from tests.test_elf import build_elf

WHEELS = DATA / "tf_wheels"
# tf_distributions.json's compiled_isa: tensorflow*@x86_64 (-mavx), tensorflow@aarch64 (armv8-a)
AVX = ("avx", "pni", "sse", "sse2", "sse4_1", "sse4_2", "ssse3")
ARMV8 = ("asimd", "fp")
# A Sapphire Rapids-like CPU (the guard's flags) and an Arm Neoverse V1 (Graviton3).
SPR = CpuInfo(
    arch="x86_64",
    flags=(
        *("amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512_bf16", "avx512_fp16"),
        *("avx512_vnni", "avx512f", "avx_vnni", "fma", "pni", "sse", "sse2", "sse4_1"),
        *("sse4_2", "ssse3"),
    ),
)
V1 = CpuInfo(arch="aarch64", implementer="0x41", part="0xd40", flags=ARMV8)


class Want(NamedTuple):
    """What the wheel says. distribution, version: METADATA Name/Version (PEP 503-normalised);
    cuda: build_info.py (is_cuda_build, cuda_version, cudnn_version); runtime, openmp: the
    OpenMP runtime among objects.json's DT_NEEDED (readelf); isa: tf_distributions.json for
    that distribution and the arch of WHEEL's Tag; onednn: TF's policy for that CPU."""

    distribution: str
    version: str
    cuda: tuple[bool, str | None, str | None]
    runtime: Literal["eigen", "openmp"]
    openmp: str | None
    isa: tuple[str, ...]
    onednn: bool | None
    issues: tuple[str, ...] = ()  # substrings, one per issue expected


NO_CUDA = (False, None, None)
EIGEN: Literal["eigen"] = "eigen"
WANT = {
    "tensorflow-cpu-2.12.0-x86_64": Want(
        "tensorflow-cpu", "2.12.0", NO_CUDA, EIGEN, None, AVX, True
    ),
    "tensorflow-cpu-2.15.1-x86_64": Want(
        "tensorflow-cpu", "2.15.1", NO_CUDA, EIGEN, None, AVX, True
    ),
    "tensorflow-cpu-2.16.2-x86_64": Want(
        "tensorflow-cpu", "2.16.2", NO_CUDA, EIGEN, None, AVX, True
    ),
    # build_info.py: cuda_version '12.2', cudnn_version '8', is_cuda_build True
    "tensorflow-2.15.1-x86_64": Want(
        "tensorflow", "2.15.1", (True, "12.2", "8"), EIGEN, None, AVX, True
    ),
    # build_info.py: cuda_version '12.5.1', cudnn_version '9'; libtensorflow_framework.so.2 has
    # a 20,297-byte RUNPATH (every $ORIGIN/../nvidia/*/lib) that once made it "unreadable"
    "tensorflow-2.21.0-x86_64": Want(
        "tensorflow", "2.21.0", (True, "12.5.1", "9"), EIGEN, None, AVX, True
    ),
    "tensorflow-2.21.0-aarch64": Want("tensorflow", "2.21.0", NO_CUDA, EIGEN, None, ARMV8, True),
    # METADATA Name: tf_nightly_cpu
    "tf-nightly-cpu-2.22.0.dev20260905-x86_64": Want(
        "tf-nightly-cpu", "2.22.0.dev20260905", NO_CUDA, EIGEN, None, AVX, True
    ),
    # `tensorflow` on aarch64 before 2.21: libtensorflow_cc.so.2 NEEDED libomp-<hash>.so.5 (LLVM
    # OpenMP), not the release_arm64_linux Eigen build the table describes for tensorflow@aarch64
    # (2.21.0 above is that one): its compiled ISA and oneDNN policy are unknown
    "tensorflow-2.16.1-aarch64": Want(
        "tensorflow", "2.16.1", NO_CUDA, "openmp", "libomp-e9212f90.so.5", (), None
    ),
    "tensorflow-2.20.0-aarch64": Want(
        "tensorflow", "2.20.0", NO_CUDA, "openmp", "libomp-f1025659.so.5", (), None
    ),
    # libtensorflow_cc.so.2 NEEDED libgomp-cc9055c7.so.1.0.0 (auditwheel's copy of GNU OpenMP);
    # the table leaves the compiled ISA and oneDNN policy of AWS's builds unknown
    "tensorflow-cpu-aws-2.12.0-aarch64": Want(
        "tensorflow-cpu-aws", "2.12.0", NO_CUDA, "openmp", "libgomp-cc9055c7.so.1.0.0", (), None
    ),
    # libtensorflow_cc.so.2 NEEDED libomp-54bf90fd.so.5 (LLVM OpenMP)
    "tensorflow-cpu-aws-2.15.1-aarch64": Want(
        "tensorflow-cpu-aws", "2.15.1", NO_CUDA, "openmp", "libomp-54bf90fd.so.5", (), None
    ),
    "tensorflow-aarch64-2.16.1-aarch64": Want(
        "tensorflow-aarch64", "2.16.1", NO_CUDA, "openmp", "libomp-e9212f90.so.5", (), None
    ),
    # METADATA Name: intel_tensorflow; libtensorflow_framework.so.2 NEEDED libiomp5.so;
    # --config=mkl: oneDNN always on, compiled ISA not published
    "intel-tensorflow-2.14.0-x86_64": Want(
        "intel-tensorflow",
        "2.14.0",
        NO_CUDA,
        "openmp",
        "libiomp5.so",
        (),
        True,
        ("compiled ISA unknown",),
    ),
}


def lay_out(site: Path, *wheels: str) -> Path:
    """Install the wheels' files into `site` as pip lays them out (RECORD padded to its size)."""
    for wheel in wheels:
        data = WHEELS / wheel
        spec = json.loads((data / "objects.json").read_text())
        meta = site / spec["dist_info"]
        meta.mkdir(parents=True)
        for name in ("METADATA", "WHEEL"):
            (meta / name).write_bytes((data / name).read_bytes())
        (meta / "INSTALLER").write_text("pip\n")
        (meta / "RECORD").write_bytes(b"x" * spec["record_bytes"])
        if (data / "build_info.py").exists():
            platform = site / "tensorflow" / "python" / "platform"
            platform.mkdir(parents=True, exist_ok=True)
            (platform / "build_info.py").write_bytes((data / "build_info.py").read_bytes())
            (site / "tensorflow" / "__init__.py").write_text("raise ImportError('a fake')\n")
        for path, entries in spec["objects"].items():
            (site / path).parent.mkdir(parents=True, exist_ok=True)
            (site / path).write_bytes(
                build_elf(entries["needed"], entries.get("soname"), entries.get("runpath"))
            )
    return site


def probe(site: Path, cpu: CpuInfo) -> tuple[TensorFlowInfo | None, list[str]]:
    issues = IssueLog()
    info = probe_tensorflow(Path("/"), issues, cpu, live=True, search_path=[str(site)])
    return info, [i.reason for i in issues]


def check(info: TensorFlowInfo | None, issues: list[str], want: Want) -> None:
    assert info is not None
    cuda = (info.cuda_build, info.cuda_version, info.cudnn_version)
    assert (info.distribution, info.version, cuda) == (want.distribution, want.version, want.cuda)
    assert (info.threading_runtime, info.openmp_library) == (want.runtime, want.openmp), (
        info.threading_runtime_basis
    )
    if want.openmp is None:  # Eigen told from the binaries, not from the table
        assert info.threading_runtime_basis.startswith("no OpenMP runtime among the DT_NEEDED")
    assert info.compiled_isa == want.isa, info.compiled_isa_basis
    assert info.onednn_default is want.onednn
    assert len(issues) == len(want.issues), issues
    for reason, expected in zip(issues, want.issues, strict=True):
        assert expected in reason


@pytest.mark.parametrize("wheel", sorted(WANT))
def test_the_probe_tells_what_the_wheel_says(tmp_path: Path, wheel: str) -> None:
    cpu = V1 if wheel.endswith("aarch64") else SPR
    info, issues = probe(lay_out(tmp_path, wheel), cpu)
    check(info, issues, WANT[wheel])


def test_every_wheel_in_the_data_is_checked() -> None:
    dirs = {p.name for p in WHEELS.iterdir() if p.is_dir()}
    assert dirs == set(WANT) | set(LAYERED), "a tests/data/tf_wheels directory nobody checks"


# Wheels that are installed only together with another one.
LAYERED = {
    # METADATA: Requires-Dist tensorflow-cpu-aws (==2.12.0) on Linux aarch64; its RECORD lists
    # 4 files and no tensorflow/ package (a metadata-only shim)
    "tensorflow-2.12.0-aarch64",
    # Intel Extension for TensorFlow's CPU build: a plugin, not a TensorFlow
    "intel-extension-for-tensorflow-lib-2.15.0.0.0-x86_64",
}


def test_the_aarch64_shim_defers_to_tensorflow_cpu_aws(tmp_path: Path) -> None:
    site = lay_out(tmp_path, "tensorflow-2.12.0-aarch64", "tensorflow-cpu-aws-2.12.0-aarch64")
    info, issues = probe(site, V1)
    check(info, issues, WANT["tensorflow-cpu-aws-2.12.0-aarch64"])


def test_itex_on_tensorflow_cpu_names_the_openmp_runtime_its_onednn_links(tmp_path: Path) -> None:
    """ITEX's METADATA (extra "cpu") pins intel_extension_for_tensorflow_lib==x.y.z.w.0 over
    `tensorflow`; its tensorflow-plugins/libitex_cpu.so links no OpenMP itself, its oneDNN
    libraries link libiomp5.so (objects.json): the runtime is OpenMP, the library Intel's."""
    site = lay_out(
        tmp_path,
        "tensorflow-cpu-2.15.1-x86_64",
        "intel-extension-for-tensorflow-lib-2.15.0.0.0-x86_64",
    )
    info, issues = probe(site, SPR)
    want = WANT["tensorflow-cpu-2.15.1-x86_64"]
    check(info, issues, want._replace(runtime="openmp", openmp="libiomp5.so"))
    assert info is not None and "ITEX_OMP_THREADPOOL" in info.threading_runtime_basis
    assert "libonednn_cpu_so.so links libiomp5.so" in info.threading_runtime_basis


@pytest.mark.parametrize("wheel", ["tensorflow-2.16.1-aarch64", "tensorflow-2.20.0-aarch64"])
def test_a_build_the_table_does_not_describe_says_so(tmp_path: Path, wheel: str) -> None:
    info, _ = probe(lay_out(tmp_path, wheel), V1)
    assert info is not None
    assert "links libomp-" in info.compiled_isa_basis
    assert "tensorflow@aarch64 is described as an Eigen-threadpool build" in (
        info.compiled_isa_basis
    )


@pytest.mark.parametrize(
    "wheel", ["tensorflow-cpu-aws-2.12.0-aarch64", "tensorflow-aarch64-2.16.1-aarch64"]
)
def test_unreadable_aws_and_linaro_builds_are_expected_to_be_openmp(
    tmp_path: Path, wheel: str
) -> None:
    """Every such wheel read links OpenMP (objects.json), so the table expects it of them."""
    site = lay_out(tmp_path, wheel)
    for path in json.loads((WHEELS / wheel / "objects.json").read_text())["objects"]:
        (site / path).write_bytes(b"truncated")
    info, issues = probe(site, V1)
    assert info is not None and info.threading_runtime == "openmp", issues
    assert info.threading_runtime_basis.startswith("binaries unreadable; expected of")


def test_the_aarch64_shim_alone_says_what_is_missing(tmp_path: Path) -> None:
    info, issues = probe(lay_out(tmp_path, "tensorflow-2.12.0-aarch64"), V1)
    assert info is not None and info.location is None
    # METADATA: Requires-Dist tensorflow-cpu-aws (Linux aarch64), tensorflow-intel (Windows);
    # RECORD: 314 bytes
    assert issues == [
        "tensorflow 2.12.0 is a metadata-only wheel that installs no tensorflow/ package; "
        "the TensorFlow it requires (tensorflow-cpu-aws or tensorflow-intel, as its platform "
        "markers pick) is not installed"
    ]
