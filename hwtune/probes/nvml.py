"""The NVML adapter: the only module that imports pynvml, and only once libnvidia-ml is found.

`find_nvml_library()` looks for the driver's `libnvidia-ml.so.1` the way the dynamic loader
would (LD_LIBRARY_PATH, /etc/ld.so.cache, the usual directories) without importing anything,
so a machine without NVIDIA pays nothing for GPU detection (importing pynvml alone costs
~28 ms on a 2-vCPU EPYC VM, a fifth of the detect budget).

`probe_nvml()` takes the NVML binding as an argument (`library`, the pynvml module by default):
tests hand it a small module-like object whose functions raise the real `pynvml.NVMLError`
subclasses. Every failing call becomes an issue naming the call and the GPU, and the rest goes
on, so a lost GPU or an unsupported query leaves a partial report rather than none. The whole
session runs in a worker thread with a deadline, because a wedged driver can make NVML block
for minutes and hwtune runs before every job.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from hwtune.models.hardware import Gpu, GpuLink, MigDevice
from hwtune.probes.gpu_report import GpuReport
from hwtune.probes.issues import IssueLog
from hwtune.probes.pci import pci_sysfs_name, read_pci_locality

SONAME = "libnvidia-ml.so.1"
# Where distributions and the NVIDIA container toolkit put the driver's libraries, beyond what
# ld.so.cache lists: multiarch (Debian/Ubuntu), lib64 (RHEL/SUSE), WSL2, and the
# /usr/local/nvidia mount of the older nvidia-docker images.
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/powerpc64le-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib64",
    "lib",
    "usr/lib/wsl/lib",
    "usr/local/nvidia/lib64",
    "usr/local/nvidia/lib",
)
# nvmlInit on an 8-GPU node without persistence mode takes a few seconds; a hung driver never
# returns. 20 s is well beyond the first and bounds the second.
NVML_DEADLINE_S = 20.0

# nvmlDeviceArchitecture_t (nvml.h), spelled as `nvidia-smi -q` prints <product_architecture>.
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}
# nvmlGpuTopologyLevel_t -> the `nvidia-smi topo -m` legend. INTERNAL is two GPUs on one board
# (K80, behind the board's own PCIe switch); PIX is the nearest nvidia-smi term for it.
TOPOLOGY_KINDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# NVML error codes (nvml.h nvmlReturn_t), used when a binding lacks the named constants.
_NOT_SUPPORTED, _INVALID_ARGUMENT, _NOT_FOUND = 3, 2, 6


def find_nvml_library(
    root: Path = Path("/"), environ: Mapping[str, str] | None = None
) -> str | None:
    """Where libnvidia-ml.so.1 is: a path, the bare soname (listed in ld.so.cache) or None."""
    environ = os.environ if environ is None else environ
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    for directory in dirs:
        candidate = root / directory.lstrip("/") / SONAME
        if candidate.exists():
            return str(candidate)
    try:
        with (root / "etc/ld.so.cache").open("rb") as f:
            # The cache holds each library's soname as a plain string; a substring test is
            # enough to know whether dlopen(SONAME) would find it (glibc elf/cache.c format).
            if SONAME.encode() in f.read(64 << 20):
                return SONAME
    except OSError:
        pass
    for directory in LIBRARY_DIRS:
        candidate = root / directory / SONAME
        if candidate.exists():
            return str(candidate)
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        return None
    value = value.strip("\x00 \n")
    return value or None


def _small_int(value: Any) -> int | None:
    """An NVML id (GPU or compute instance: a handful per GPU), or None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 16:
        return None
    return value


def _bits(words: Any, width: int = 64) -> tuple[int, ...]:
    """Set bit positions of an array of `width`-bit words (NVML's CPU and node masks)."""
    return tuple(
        i * width + b for i, w in enumerate(words) for b in range(width) if int(w) >> b & 1
    )


def format_cuda_version(value: int) -> str:
    # nvmlSystemGetCudaDriverVersion returns 1000*major + 10*minor (nvml.h: "CUDA 9.2 would be
    # represented by 9020"), the same encoding as the CUDA_VERSION macro.
    return f"{value // 1000}.{value % 1000 // 10}"


class _Missing:
    def __init__(self, why: str) -> None:
        self.why = why


FAILED = _Missing("failed")  # the call raised; an issue was recorded
QUIET = _Missing("quiet")  # the call raised an error that means "feature absent"


class _Session:
    """One NVML session, run in a worker thread; results are read back by the caller."""

    def __init__(self, library: Any, root: Path) -> None:
        self.lib = library
        self.root = root
        self.issues = IssueLog()
        self.gpus: list[Gpu] = []
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        self.initialised = False
        self.stage = "nvmlInit"

    def code(self, name: str, default: int) -> int:
        value = getattr(self.lib, name, default)
        return value if isinstance(value, int) else default

    def call(
        self, fn_name: str, *args: Any, gpu: int | None = None, quiet: tuple[int, ...] = ()
    ) -> Any:
        """lib.fn_name(*args), or FAILED (with an issue) or QUIET (an expected absence)."""
        where = f" on GPU {gpu}" if gpu is not None else ""
        self.stage = f"{fn_name}{where}"
        fn = getattr(self.lib, fn_name, None)
        if fn is None:
            version = getattr(self.lib, "__version__", "?")
            self.issues.add("nvml", f"{fn_name} is missing from this pynvml ({version})")
            return FAILED
        try:
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - any binding or driver failure is an issue
            if getattr(err, "value", None) in quiet:
                return QUIET
            self.issues.add("nvml", f"{fn_name}{where} failed: {err} ({type(err).__name__})")
            return FAILED

    def run(self) -> None:
        try:
            self.lib.nvmlInit()
        except Exception as err:  # noqa: BLE001 - library missing, driver not loaded…
            self.issues.add("nvml", f"nvmlInit failed: {err} ({type(err).__name__})", path=SONAME)
            return
        self.initialised = True
        try:
            self._collect()
        finally:
            with contextlib.suppress(Exception):
                self.lib.nvmlShutdown()

    def _collect(self) -> None:
        self.driver_version = _text(self.call("nvmlSystemGetDriverVersion"))
        cuda = self.call("nvmlSystemGetCudaDriverVersion")
        self.cuda_version = format_cuda_version(cuda) if isinstance(cuda, int) else None
        count = self.call("nvmlDeviceGetCount")
        if not isinstance(count, int):
            return
        handles: list[tuple[int, Any]] = []
        for index in range(count):
            handle = self.call("nvmlDeviceGetHandleByIndex", index, gpu=index)
            if isinstance(handle, _Missing):
                continue  # a GPU without a handle (lost, unreachable) is left out
            self.gpus.append(self._device(index, handle))
            handles.append((index, handle))
        self._links(handles)

    def _device(self, index: int, h: Any) -> Gpu:
        unsupported = (self.code("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),)
        name = _text(self.call("nvmlDeviceGetName", h, gpu=index))
        memory = self.call("nvmlDeviceGetMemoryInfo", h, gpu=index)
        pci = self.call("nvmlDeviceGetPciInfo", h, gpu=index)
        bus_id = _text(getattr(pci, "busId", None))
        capability = self.call("nvmlDeviceGetCudaComputeCapability", h, gpu=index)
        cc = None
        if isinstance(capability, (tuple, list)) and len(capability) == 2:
            cc = f"{int(capability[0])}.{int(capability[1])}"
        arch = self.call("nvmlDeviceGetArchitecture", h, gpu=index, quiet=unsupported)
        node, local_cpus = read_pci_locality(self.root, bus_id)
        mig_enabled, mig_devices = self._mig(index, h)
        return Gpu(
            index=index,
            name=name or f"GPU {index}",
            uuid=_text(self.call("nvmlDeviceGetUUID", h, gpu=index)),
            compute_capability=cc,
            compute_capability_basis="nvml" if cc else None,
            architecture=ARCHITECTURES.get(arch) if isinstance(arch, int) else None,
            memory_bytes=int(memory.total) if hasattr(memory, "total") else None,
            pci_bus_id=bus_id,
            numa_node=node if node is not None else self._memory_node(index, h),
            cpu_affinity=self._cpu_affinity(index, h) or local_cpus,
            mig_enabled=mig_enabled,
            mig_devices=mig_devices,
        )

    def _cpu_affinity(self, index: int, h: Any) -> tuple[int, ...]:
        words = -(-(os.cpu_count() or 1) // 64)  # an array of 64-bit masks covering every CPU
        mask = self.call(
            "nvmlDeviceGetCpuAffinity",
            h,
            words,
            gpu=index,
            quiet=(self.code("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),),
        )
        return () if isinstance(mask, _Missing) else _bits(mask)

    def _memory_node(self, index: int, h: Any) -> int | None:
        # The NUMA node nearest the GPU (what `topo -m` calls "NUMA Affinity"), for when sysfs
        # has no numa_node. Not nvmlDeviceGetNumaNodeId: that is the GPU's own memory as a node
        # on coherent platforms (GH200), `topo -m`'s "GPU NUMA ID".
        scope = self.code("NVML_AFFINITY_SCOPE_NODE", 0)
        mask = self.call(
            "nvmlDeviceGetMemoryAffinity",
            h,
            1,
            scope,
            gpu=index,
            quiet=(self.code("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),),
        )
        nodes = () if isinstance(mask, _Missing) else _bits(mask)
        return nodes[0] if len(nodes) == 1 else None

    def _mig(self, index: int, h: Any) -> tuple[bool | None, tuple[MigDevice, ...]]:
        unsupported = self.code("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED)
        mode = self.call("nvmlDeviceGetMigMode", h, gpu=index, quiet=(unsupported,))
        if mode is QUIET:
            return False, ()  # a GPU that cannot be partitioned (nvidia-smi: "N/A")
        if isinstance(mode, _Missing) or not mode:
            return None, ()
        if mode[0] != self.code("NVML_DEVICE_MIG_ENABLE", 1):
            return False, ()
        slots = self.call("nvmlDeviceGetMaxMigDeviceCount", h, gpu=index)
        devices = []
        for slot in range(slots if isinstance(slots, int) else 0):
            mig = self.call(
                "nvmlDeviceGetMigDeviceHandleByIndex",
                h,
                slot,
                gpu=index,
                quiet=(self.code("NVML_ERROR_NOT_FOUND", _NOT_FOUND),),
            )
            if isinstance(mig, _Missing):
                continue  # an empty slot
            # MIG device names end in the profile: "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
            name = _text(self.call("nvmlDeviceGetName", mig, gpu=index)) or ""
            profile = re.search(r"MIG\s+(\S+)\s*$", name)
            memory = self.call("nvmlDeviceGetMemoryInfo", mig, gpu=index)
            # The compute instances of one GPU instance share its memory (planner/gpu_units.py).
            gpu_instance = self.call("nvmlDeviceGetGpuInstanceId", mig, gpu=index)
            compute_instance = self.call("nvmlDeviceGetComputeInstanceId", mig, gpu=index)
            devices.append(
                MigDevice(
                    index=slot,
                    uuid=_text(self.call("nvmlDeviceGetUUID", mig, gpu=index)),
                    profile=profile.group(1) if profile else None,
                    memory_bytes=int(memory.total) if hasattr(memory, "total") else None,
                    gpu_instance_id=_small_int(gpu_instance),
                    compute_instance_id=_small_int(compute_instance),
                )
            )
        return True, tuple(devices)

    def _nvlinks(
        self, index: int, h: Any, peers_by_bus: Mapping[str, int]
    ) -> tuple[int, Counter[int]]:
        """(active links, links per peer GPU) from each link's state and remote PCI address."""
        quiet = (
            self.code("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
            self.code("NVML_ERROR_INVALID_ARGUMENT", _INVALID_ARGUMENT),
        )
        active, per_peer = 0, Counter[int]()
        for link in range(self.code("NVML_NVLINK_MAX_LINKS", 18)):
            state = self.call("nvmlDeviceGetNvLinkState", h, link, gpu=index, quiet=quiet)
            if isinstance(state, _Missing):
                break  # no NVLink (not supported) or past this GPU's last link
            if state != self.code("NVML_FEATURE_ENABLED", 1):
                continue
            active += 1
            remote = self.call("nvmlDeviceGetNvLinkRemotePciInfo", h, link, gpu=index)
            peer = peers_by_bus.get(pci_sysfs_name(_text(getattr(remote, "busId", None))) or "")
            if peer is not None and peer != index:
                per_peer[peer] += 1
        return active, per_peer

    def _links(self, handles: list[tuple[int, Any]]) -> None:
        positions = {gpu.index: pos for pos, gpu in enumerate(self.gpus)}
        peers_by_bus = {
            name: gpu.index for gpu in self.gpus if (name := pci_sysfs_name(gpu.pci_bus_id))
        }
        nvlink_index = self.code("NVML_P2P_CAPS_INDEX_NVLINK", 2)
        p2p_ok = self.code("NVML_P2P_STATUS_OK", 0)
        for index, h in handles:
            active, per_peer = self._nvlinks(index, h, peers_by_bus)
            links = []
            for peer, peer_handle in handles:
                if peer == index:
                    continue
                if per_peer[peer]:
                    links.append(GpuLink(peer, f"NV{per_peer[peer]}", per_peer[peer]))
                    continue
                if active:
                    # Links that end on an NVSwitch (HGX boards) reach every GPU on the
                    # switch; nvidia-smi shows those pairs as NV<links of the GPU>.
                    status = self.call(
                        "nvmlDeviceGetP2PStatus", h, peer_handle, nvlink_index, gpu=index
                    )
                    if status == p2p_ok:
                        links.append(GpuLink(peer, f"NV{active}", active))
                        continue
                level = self.call("nvmlDeviceGetTopologyCommonAncestor", h, peer_handle, gpu=index)
                if isinstance(level, int) and level in TOPOLOGY_KINDS:
                    links.append(GpuLink(peer, TOPOLOGY_KINDS[level]))
            gpu = self.gpus[positions[index]]
            self.gpus[positions[index]] = replace(
                gpu,
                links=tuple(links),
                nvlink_peers=tuple(sorted(link.peer for link in links if link.nvlinks)),
            )


def probe_nvml(
    issues: IssueLog,
    root: Path = Path("/"),
    *,
    library: Any | None = None,
    library_file: str | None = None,
    deadline_s: float = NVML_DEADLINE_S,
) -> GpuReport | None:
    """GPUs through NVML; None when NVML cannot start (so the caller may try nvidia-smi).

    Args:
        issues: where every failed NVML call is recorded.
        root: where sysfs is read for NUMA node and local CPUs ("/" on the live machine).
        library: the NVML binding; the pynvml module when None.
        library_file: what `find_nvml_library()` found; a path is loaded first, so that
            pynvml's dlopen("libnvidia-ml.so.1") finds it outside the loader's search path.
        deadline_s: how long the NVML session may take before it is abandoned.
    """
    if library is None:
        if library_file and "/" in library_file:
            import ctypes

            try:
                ctypes.CDLL(library_file)
            except OSError as err:
                issues.add("nvml", f"cannot load: {err}", path=library_file)
                return None
        try:
            import pynvml
        except ImportError as err:
            issues.add("nvml", f"nvidia-ml-py (module pynvml) is not installed: {err}")
            return None
        library = pynvml
    session = _Session(library, root)
    worker = threading.Thread(target=session.run, name="hwtune-nvml", daemon=True)
    worker.start()
    worker.join(deadline_s)
    for issue in session.issues.freeze():
        issues.add(issue.probe, issue.reason, path=issue.path, line=issue.line)
    gpus = tuple(session.gpus)
    if worker.is_alive():
        issues.add(
            "nvml",
            f"NVML did not answer within {deadline_s:g} s (stuck in "
            f"{session.stage}); kept the {len(gpus)} GPU(s) read before",
        )
    elif not session.initialised:
        return None
    return GpuReport(
        gpus=gpus,
        driver_version=session.driver_version,
        cuda_driver_version=session.cuda_version,
        source="nvml",
    )
