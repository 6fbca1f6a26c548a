"""The NVML adapter and the live GPU probe, through the adapter's `library` seam.

`FakeNvml` is a constructed stand-in for the pynvml module: same function names and
signatures, and its failures are the real `pynvml.NVMLError` subclasses (built from the NVML
error codes exactly as pynvml builds them). The real pynvml is also exercised: on this GPU-less
machine it cannot find libnvidia-ml.so.1, which must end as an issue.
"""

from __future__ import annotations

import dataclasses
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from hwtune.planner import plan
from hwtune.probes import nvml
from hwtune.probes.gpu import probe_gpus
from hwtune.probes.issues import IssueLog

from .conftest import DATA
from .plan_builders import make_hardware

T4_XML = DATA / "gpu" / "telegraf-tesla-t4-xml.smi"


@dataclass
class FakeGpu:
    name: str
    bus: str  # NVML style: "00000000:07:00.0"
    capability: tuple[int, int] = (8, 0)
    arch: int = 7  # NVML_DEVICE_ARCH_AMPERE
    memory: int = 40 << 30
    cpus: tuple[int, ...] = ()
    # per NVLink: the remote bus id, None for an inactive link; () for a GPU without NVLink
    nvlinks: tuple[str | None, ...] = ()
    mig: list[FakeGpu] | None = None  # None: MIG not supported; []: supported, disabled
    mig_enabled: bool = False
    nvswitch: bool = False
    ancestors: dict[int, int] = field(default_factory=dict)  # peer index -> topology level
    index: int = -1
    # a MIG device's GPU and compute instance ids (NVML numbers GPU instances from 1 or more)
    gpu_instance: int = 0
    compute_instance: int = 0


class FakeNvml:
    """A module-like NVML binding; `faults` maps "function" or "function:gpu" to an NVML code."""

    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        faults: dict[str, int] | None = None,
        block: dict[str, threading.Event] | None = None,
    ) -> None:
        for name in dir(pynvml):
            if name.startswith("NVML_") and isinstance(getattr(pynvml, name), int):
                setattr(self, name, getattr(pynvml, name))
        for i, gpu in enumerate(gpus):
            gpu.index = i
        self.gpus = gpus
        self.faults = faults or {}
        self.block = block or {}
        self.shut_down = False

    def _check(self, fn: str, gpu: FakeGpu | None = None) -> None:
        keys = [fn] if gpu is None else [fn, f"{fn}:{gpu.index}"]
        for key in keys:
            if key in self.block:
                self.block[key].wait(30)
            if key in self.faults:
                raise pynvml.NVMLError(self.faults[key])

    def nvmlInit(self) -> None:
        self._check("nvmlInit")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check("nvmlDeviceGetHandleByIndex", self.gpus[index])
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: FakeGpu) -> bytes:
        self._check("nvmlDeviceGetName", h)
        return h.name.encode()  # older pynvml returned bytes; the adapter takes both

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._check("nvmlDeviceGetUUID", h)
        return f"GPU-{h.bus}"

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        self._check("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(total=h.memory, used=0, free=h.memory)

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        self._check("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=h.bus.encode())

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability", h)
        return h.capability

    def nvmlDeviceGetArchitecture(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetArchitecture", h)
        return h.arch

    def nvmlDeviceGetCpuAffinity(self, h: FakeGpu, words: int) -> list[int]:
        self._check("nvmlDeviceGetCpuAffinity", h)
        mask = [0] * max(words, 2)
        for cpu in h.cpus:
            mask[cpu // 64] |= 1 << (cpu % 64)
        return mask

    def nvmlDeviceGetMemoryAffinity(self, h: FakeGpu, words: int, scope: int) -> list[int]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._check("nvmlDeviceGetMigMode", h)
        if h.mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [int(h.mig_enabled), int(h.mig_enabled)]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        return 7  # A100: up to seven instances

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, slot: int) -> FakeGpu:
        assert h.mig is not None
        if slot >= len(h.mig):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return h.mig[slot]

    def nvmlDeviceGetGpuInstanceId(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetGpuInstanceId", h)
        return h.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, h: FakeGpu) -> int:
        self._check("nvmlDeviceGetComputeInstanceId", h)
        return h.compute_instance

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkState", h)
        if not h.nvlinks:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= len(h.nvlinks):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if h.nvlinks[link] else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: FakeGpu, link: int) -> Any:
        return SimpleNamespace(busId=h.nvlinks[link])

    def nvmlDeviceGetP2PStatus(self, a: FakeGpu, b: FakeGpu, index: int) -> int:
        assert index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        ok = a.nvswitch and b.nvswitch
        return pynvml.NVML_P2P_STATUS_OK if ok else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeGpu, b: FakeGpu) -> int:
        self._check("nvmlDeviceGetTopologyCommonAncestor", a)
        return a.ancestors.get(b.index, pynvml.NVML_TOPOLOGY_SYSTEM)


BUS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0"]


def four_gpu_box() -> list[FakeGpu]:
    """Two NVLink bridges: 0-1 with four links, 2-3 with two; PCIe across NUMA nodes between."""
    return [
        FakeGpu(
            "NVIDIA A100-SXM4-40GB",
            BUS[0],
            cpus=tuple(range(0, 8)),
            nvlinks=(BUS[1], BUS[1], BUS[1], BUS[1], None),
            ancestors={1: 30},
        ),
        FakeGpu(
            "NVIDIA A100-SXM4-40GB",
            BUS[1],
            cpus=tuple(range(0, 8)),
            nvlinks=(BUS[0], BUS[0], BUS[0], BUS[0]),
            ancestors={0: 30},
        ),
        FakeGpu(
            "NVIDIA A100-SXM4-40GB",
            BUS[2],
            cpus=tuple(range(64, 72)),
            nvlinks=(BUS[3], BUS[3]),
            ancestors={3: 10},
        ),
        FakeGpu(
            "NVIDIA A100-SXM4-40GB",
            BUS[3],
            cpus=tuple(range(64, 72)),
            nvlinks=(BUS[2], BUS[2]),
            ancestors={2: 10},
        ),
    ]


def reasons(issues: IssueLog) -> str:
    return "\n".join(i.reason for i in issues)


def sysfs_root(tmp_path: Path, nodes: dict[str, int]) -> Path:
    """A root with sys/bus/pci/devices/<bdf>/numa_node for the given sysfs names."""
    for bdf, node in nodes.items():
        device = tmp_path / "sys/bus/pci/devices" / bdf
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{node}\n")
        (device / "local_cpulist").write_text("0-3\n")
    return tmp_path


# ------------------------------------------------------------------ happy paths


def test_nvlink_cliques_affinity_and_versions(tmp_path: Path) -> None:
    lib = FakeNvml(four_gpu_box())
    root = sysfs_root(tmp_path, {"0000:07:00.0": 0, "0000:0f:00.0": 0, "0000:47:00.0": 1})
    issues = IssueLog()
    report = nvml.probe_nvml(issues, root, library=lib)
    assert report is not None and list(issues) == []
    assert (report.source, report.driver_version, report.cuda_driver_version) == (
        "nvml",
        "550.54.15",
        "12.4",
    )
    assert lib.shut_down
    g0, g1, g2, g3 = report.gpus
    assert (g0.name, g0.compute_capability, g0.compute_capability_basis, g0.architecture) == (
        "NVIDIA A100-SXM4-40GB",
        "8.0",
        "nvml",
        "Ampere",
    )
    assert g0.memory_bytes == 40 << 30 and g0.uuid == f"GPU-{BUS[0]}"
    assert [g.nvlink_peers for g in report.gpus] == [(1,), (0,), (3,), (2,)]
    assert [(link.peer, link.kind, link.nvlinks) for link in g0.links] == [
        (1, "NV4", 4),
        (2, "SYS", 0),
        (3, "SYS", 0),
    ]
    assert [(link.peer, link.kind) for link in g2.links] == [(0, "SYS"), (1, "SYS"), (3, "NV2")]
    # NUMA from sysfs where the device has a node; unknown for the one missing there
    assert [g.numa_node for g in report.gpus] == [0, 0, 1, None]
    assert g3.cpu_affinity == tuple(range(64, 72))  # NVML's mask, beyond the first 64-bit word
    assert g1.mig_enabled is False  # MIG not supported: like nvidia-smi's "N/A"


def test_nvswitch_peers_through_p2p_status() -> None:
    switch = "00000000:C1:00.0"  # an NVSwitch, not a GPU
    gpus = [
        FakeGpu("NVIDIA H100 80GB HBM3", BUS[i], (9, 0), 9, nvlinks=(switch,) * 18, nvswitch=True)
        for i in range(3)
    ]
    report = nvml.probe_nvml(IssueLog(), Path("/nonexistent"), library=FakeNvml(gpus))
    assert report is not None
    assert [g.nvlink_peers for g in report.gpus] == [(1, 2), (0, 2), (0, 1)]
    assert {link.kind for g in report.gpus for link in g.links} == {"NV18"}
    assert report.gpus[0].architecture == "Hopper"


def test_mig_devices() -> None:
    parent = FakeGpu(
        "NVIDIA A100-SXM4-40GB",
        BUS[0],
        mig_enabled=True,
        mig=[
            FakeGpu("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "", memory=20 << 30, gpu_instance=2),
            FakeGpu("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "", memory=5 << 30, gpu_instance=9),
        ],
    )
    issues = IssueLog()
    report = nvml.probe_nvml(issues, Path("/nonexistent"), library=FakeNvml([parent]))
    assert report is not None
    (gpu,) = report.gpus
    assert gpu.mig_enabled is True
    assert [
        (m.index, m.profile, m.memory_bytes, m.gpu_instance_id, m.compute_instance_id)
        for m in gpu.mig_devices
    ] == [(0, "3g.20gb", 20 << 30, 2, 0), (1, "1g.5gb", 5 << 30, 9, 0)]
    assert list(issues) == []


def test_compute_instances_of_one_gpu_instance_share_its_memory() -> None:
    """Three compute instances of one 7g.40gb GPU instance (the MIG User Guide's "MIG Device
    Names" example): NVML gives each the GPU instance's memory and id, so three instances on
    them get growth and a third of it each, not 40 GB each."""
    parent = FakeGpu(
        "NVIDIA A100-SXM4-40GB",
        BUS[0],
        mig_enabled=True,
        mig=[
            FakeGpu(
                f"NVIDIA A100-SXM4-40GB MIG {ci + 1}c.7g.40gb",
                "",
                memory=40 << 30,
                gpu_instance=0,
                compute_instance=ci,
            )
            for ci in range(3)
        ],
    )
    report = nvml.probe_nvml(IssueLog(), Path("/nonexistent"), library=FakeNvml([parent]))
    assert report is not None
    hw = dataclasses.replace(
        make_hardware(cores_per_socket=8),
        gpus=report.gpus,
        gpu_driver=report.driver_version,
        cuda_driver_version=report.cuda_driver_version,
    )
    for k in range(3):
        profile = plan(hw, instances=3, instance=k)
        assert profile.env["TF_FORCE_GPU_ALLOW_GROWTH"].value == "true"
        assert (
            "3 instances share the memory of MIG device"
            in profile.env["TF_FORCE_GPU_ALLOW_GROWTH"].reason
        )
        assert profile.gpu_memory is not None
        limit = profile.gpu_memory.value
        assert isinstance(limit, int) and 0 < limit * (1 << 20) < (40 << 30) // 3


# ------------------------------------------------------------------ faults


def test_real_pynvml_without_the_library_is_an_issue() -> None:
    if nvml.find_nvml_library() is not None:
        pytest.skip("this machine has libnvidia-ml.so.1")
    issues = IssueLog()
    assert nvml.probe_nvml(issues, library=pynvml) is None
    (issue,) = list(issues)
    assert issue.reason.startswith("nvmlInit failed: NVML Shared Library Not Found")
    assert "NVMLError_LibraryNotFound" in issue.reason


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVMLError_DriverNotLoaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVMLError_LibRmVersionMismatch"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "NVMLError_NoPermission"),
    ],
)
def test_init_failure_returns_none_with_issue(code: int, name: str) -> None:
    issues = IssueLog()
    assert nvml.probe_nvml(issues, library=FakeNvml(four_gpu_box(), {"nvmlInit": code})) is None
    (issue,) = list(issues)
    assert issue.reason.startswith("nvmlInit failed") and name in issue.reason


def test_lost_gpu_is_left_out_and_the_rest_kept() -> None:
    lib = FakeNvml(four_gpu_box(), {"nvmlDeviceGetHandleByIndex:2": pynvml.NVML_ERROR_GPU_IS_LOST})
    issues = IssueLog()
    report = nvml.probe_nvml(issues, library=lib)
    assert report is not None
    assert [g.index for g in report.gpus] == [0, 1, 3]
    assert report.gpus[2].nvlink_peers == ()  # its only NVLink peer is gone
    assert reasons(issues) == (
        "nvmlDeviceGetHandleByIndex on GPU 2 failed: GPU is lost (NVMLError_GpuIsLost)"
    )


def test_single_call_failures_leave_partial_gpus() -> None:
    faults = {
        "nvmlDeviceGetMemoryInfo:0": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetCudaComputeCapability:1": pynvml.NVML_ERROR_TIMEOUT,
        "nvmlDeviceGetName:3": pynvml.NVML_ERROR_UNKNOWN,
        "nvmlDeviceGetTopologyCommonAncestor:2": pynvml.NVML_ERROR_GPU_IS_LOST,
        "nvmlSystemGetCudaDriverVersion": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
    issues = IssueLog()
    report = probe_gpus(
        Path("/nonexistent"), issues, live=True, nvml_library=FakeNvml(four_gpu_box(), faults)
    )
    g0, g1, g2, g3 = report.gpus
    assert g0.memory_bytes is None and g0.compute_capability == "8.0"
    # CC from the name table when NVML's call times out
    assert (g1.compute_capability, g1.compute_capability_basis) == ("8.0", "name table: A100")
    assert g3.name == "GPU 3" and g3.compute_capability == "8.0"
    assert [link.peer for link in g2.links] == [3]  # PCIe levels to 0 and 1 unknown
    assert report.cuda_driver_version is None and report.driver_version == "550.54.15"
    text = reasons(issues)
    for call, gpu, error in [
        ("nvmlDeviceGetMemoryInfo", 0, "NVMLError_NotSupported"),
        ("nvmlDeviceGetCudaComputeCapability", 1, "NVMLError_Timeout"),
        ("nvmlDeviceGetName", 3, "NVMLError_Unknown"),
        ("nvmlDeviceGetTopologyCommonAncestor", 2, "NVMLError_GpuIsLost"),
    ]:
        assert f"{call} on GPU {gpu} failed" in text and error in text
    assert "nvmlSystemGetCudaDriverVersion failed" in text


def test_binding_without_a_function_is_an_issue() -> None:
    class OldBinding(FakeNvml):
        nvmlDeviceGetCudaComputeCapability = None  # type: ignore[assignment]

    issues = IssueLog()
    report = nvml.probe_nvml(issues, library=OldBinding([four_gpu_box()[0]]))
    assert report is not None and report.gpus[0].compute_capability is None
    assert "nvmlDeviceGetCudaComputeCapability is missing from this pynvml" in reasons(issues)


def test_hung_call_is_abandoned_at_the_deadline() -> None:
    release = threading.Event()
    lib = FakeNvml(four_gpu_box(), block={"nvmlDeviceGetName:1": release})
    issues = IssueLog()
    try:
        report = nvml.probe_nvml(issues, library=lib, deadline_s=2.0)
    finally:
        release.set()
    assert report is not None
    assert [g.index for g in report.gpus] == [0]  # read before the hang
    assert "did not answer within 2 s (stuck in nvmlDeviceGetName on GPU 1)" in reasons(issues)


# ------------------------------------------------------------------ the live probe


def fake_nvidia_smi(tmp_path: Path, xml: Path) -> str:
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\ncase "$1" in\n -q) cat "{xml}";;\n *) exit 3;;\nesac\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_live_falls_back_to_nvidia_smi_when_nvml_fails(tmp_path: Path) -> None:
    lib = FakeNvml([], {"nvmlInit": pynvml.NVML_ERROR_UNINITIALIZED})
    issues = IssueLog()
    report = probe_gpus(
        tmp_path, issues, live=True, nvml_library=lib, nvidia_smi=fake_nvidia_smi(tmp_path, T4_XML)
    )
    assert report.source == "nvidia-smi"
    assert [(g.name, g.compute_capability) for g in report.gpus] == [("Tesla T4", "7.5")]
    assert "nvmlInit failed" in reasons(issues)


def test_nvidia_smi_with_one_gpu_reads_its_locality_from_sysfs(tmp_path: Path) -> None:
    """One GPU gets no `topo -m` run: its NUMA node and CPUs come from the PCI device."""
    device = tmp_path / "sys/bus/pci/devices/0000:00:1e.0"  # the T4 capture's 00000000:00:1E.0
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    (device / "local_cpulist").write_text("8-11\n")
    lib = FakeNvml([], {"nvmlInit": pynvml.NVML_ERROR_UNINITIALIZED})
    report = probe_gpus(
        tmp_path,
        IssueLog(),
        live=True,
        nvml_library=lib,
        nvidia_smi=fake_nvidia_smi(tmp_path, T4_XML),
    )
    assert [(g.numa_node, g.cpu_affinity) for g in report.gpus] == [(1, (8, 9, 10, 11))]
    # The same capture read as a snapshot's files: the same locality.
    (tmp_path / "nvidia-smi-q.xml").write_bytes(T4_XML.read_bytes())
    report = probe_gpus(tmp_path, IssueLog(), live=False)
    assert [(g.numa_node, g.cpu_affinity) for g in report.gpus] == [(1, (8, 9, 10, 11))]
    # -1 is the kernel's "no locality", and a missing list is no CPUs: both stay unknown.
    (device / "numa_node").write_text("-1\n")
    (device / "local_cpulist").unlink()
    report = probe_gpus(tmp_path, IssueLog(), live=False)
    assert [(g.numa_node, g.cpu_affinity) for g in report.gpus] == [(None, ())]


def test_live_without_any_nvidia_is_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    issues = IssueLog()
    report = probe_gpus(tmp_path, issues, live=True)
    assert (report.gpus, report.source) == ((), "none")
    assert list(issues) == []


def test_live_nvidia_device_without_driver_is_one_issue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    for bdf, cls in [("0000:3b:00.0", "0x030200"), ("0000:3b:00.1", "0x040300")]:
        device = tmp_path / "sys/bus/pci/devices" / bdf
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text(f"{cls}\n")  # a 3D controller and its audio function
    issues = IssueLog()
    assert probe_gpus(tmp_path, issues, live=True).gpus == ()
    (issue,) = list(issues)
    assert issue.reason.startswith("no NVIDIA driver: libnvidia-ml.so.1 not found")
    assert "1 NVIDIA GPU(s) are on the PCI bus" in issue.reason


def test_find_library(tmp_path: Path) -> None:
    assert nvml.find_nvml_library(tmp_path, environ={}) is None
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").write_bytes(b"glibc-ld.so.cache1.1\0libc.so.6\0")
    assert nvml.find_nvml_library(tmp_path, environ={}) is None
    (tmp_path / "etc/ld.so.cache").write_bytes(b"glibc-ld.so.cache1.1\0libnvidia-ml.so.1\0")
    assert nvml.find_nvml_library(tmp_path, environ={}) == "libnvidia-ml.so.1"
    custom = tmp_path / "opt/nv/lib"
    custom.mkdir(parents=True)
    (custom / "libnvidia-ml.so.1").write_bytes(b"\x7fELF")
    found = nvml.find_nvml_library(tmp_path, environ={"LD_LIBRARY_PATH": "relative:/opt/nv/lib"})
    assert found == str(custom / "libnvidia-ml.so.1")


def test_found_library_that_cannot_load_is_an_issue(tmp_path: Path) -> None:
    bogus = tmp_path / "libnvidia-ml.so.1"
    bogus.write_bytes(b"not an ELF file")
    issues = IssueLog()
    assert nvml.probe_nvml(issues, library_file=str(bogus)) is None
    assert "cannot load" in reasons(issues)


@pytest.mark.parametrize(
    ("bus", "sysfs"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00000001:C1:00.0", "0001:c1:00.0"),
        ("0000:3B:00.0", "0000:3b:00.0"),
        ("GPU-1234", None),
        (None, None),
    ],
)
def test_pci_names(bus: str | None, sysfs: str | None) -> None:
    assert nvml.pci_sysfs_name(bus) == sysfs


def test_cuda_version_format() -> None:
    assert [nvml.format_cuda_version(v) for v in (12040, 11070, 9020, 13000)] == [
        "12.4",
        "11.7",
        "9.2",
        "13.0",
    ]
