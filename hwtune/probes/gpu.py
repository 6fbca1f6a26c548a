"""NVIDIA GPUs: NVML on the live machine, `nvidia-smi` captures under a root; compute capability.

Sources, in order:
- live root: NVML through `hwtune.probes.nvml` (pynvml), imported only once libnvidia-ml.so.1
  is found on disk; when NVML is unavailable, `nvidia-smi -q -x` and `nvidia-smi topo -m` are
  run and parsed instead. A machine with no NVIDIA driver and no NVIDIA PCI display device
  gets no GPUs and no issue: nothing is wrong with a CPU machine.
- any other root: ROOT/nvidia-smi-q.xml, ROOT/nvidia-smi-topo.txt and ROOT/nvidia-smi-L.txt
  (what `hwtune snapshot` saves), merged by GPU index; any may be absent. `-L` is the only one
  that names MIG devices by the UUID CUDA_VISIBLE_DEVICES takes.
With nvidia-smi, a GPU's NUMA node and local CPUs missing from `topo -m` are read from
ROOT/sys/bus/pci/devices/<bus id>/ (numa_node, local_cpulist), as the NVML path does.

`nvidia-smi -q` does not print the compute capability, so where NVML does not give it, it is
looked up from the product name in the `gpus` knowledge table (hwtune/knowledge/data/gpus.json,
after NVIDIA's https://developer.nvidia.com/cuda-gpus), and `compute_capability_basis` says so.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hwtune.models.hardware import Gpu
from hwtune.probes.gpu_report import NO_GPUS, GpuReport
from hwtune.probes.issues import IssueLog
from hwtune.probes.pci import read_pci_locality
from hwtune.probes.root import list_dir, read_text

NVIDIA_PCI_VENDOR = "0x10de"  # PCI-SIG vendor ID of NVIDIA Corporation (pci.ids)
# nvidia-smi initialises every GPU when persistence mode is off, which takes seconds on a big
# node; a wedged driver makes it hang for good. 30 s bounds both.
NVIDIA_SMI_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class GpuEntry:
    """A row of the `gpus` knowledge table: which product names have which capability."""

    key: str  # "A100"
    patterns: tuple[str, ...]  # regular expressions, searched case-insensitively in the name
    compute_capability: str  # "8.0"
    architecture: str  # spelled as nvidia-smi's <product_architecture>: "Ampere"
    source: str


_CAPABILITY_RE = re.compile(r"^\d{1,4}\.\d{1,4}$", re.ASCII)  # "8.0"; ASCII digits only


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def gpu_table(issues: IssueLog) -> tuple[GpuEntry, ...]:
    """The shipped table plus user entries; a broken user file becomes an issue, not a crash."""
    from hwtune.errors import KnowledgeError
    from hwtune.knowledge import load_table

    try:
        entries = load_table("gpus", GpuEntry)
    except KnowledgeError as err:
        issues.add("gpu", f"GPU name table not loaded: {err}")
        return ()
    good = []
    for entry in entries:
        try:
            for pattern in entry.patterns:
                _compiled(pattern)
        except re.error as err:
            issues.add("gpu", f"gpus table entry {entry.key!r}: bad pattern: {err}")
            continue
        if not _CAPABILITY_RE.match(entry.compute_capability):
            issues.add(
                "gpu",
                f"gpus table entry {entry.key!r}: compute capability "
                f"{entry.compute_capability!r} is not MAJOR.MINOR",
            )
            continue
        good.append(entry)
    return tuple(good)


def match_gpu_name(name: str, table: tuple[GpuEntry, ...]) -> GpuEntry | None:
    """The entry whose pattern matches the longest part of `name` (the most specific wins;
    on a tie, the later entry, so a user's entry beats a shipped one)."""
    best: tuple[int, GpuEntry] | None = None
    for entry in table:
        for pattern in entry.patterns:
            m = _compiled(pattern).search(name)
            if m and (best is None or len(m.group(0)) >= best[0]):
                best = (len(m.group(0)), entry)
    return best[1] if best else None


def _placeholder(gpu: Gpu) -> bool:
    return gpu.name == f"GPU {gpu.index}"


def identify(gpus: tuple[Gpu, ...], issues: IssueLog) -> tuple[Gpu, ...]:
    """Fill compute capability and architecture from the name table where nobody told them."""

    def wanted(gpu: Gpu) -> bool:
        return not _placeholder(gpu) and not (gpu.compute_capability and gpu.architecture)

    if not any(wanted(g) for g in gpus):
        return gpus
    table = gpu_table(issues)
    done = []
    for gpu in gpus:
        if not wanted(gpu):
            done.append(gpu)
            continue
        entry = match_gpu_name(gpu.name, table)
        if entry is None:
            if not gpu.compute_capability:
                issues.add(
                    "gpu",
                    f"GPU {gpu.index} {gpu.name!r}: compute capability unknown "
                    "(the name is not in the gpus table; add an entry in "
                    "$HWTUNE_KNOWLEDGE_DIR/gpus.json)",
                )
            done.append(gpu)
        elif gpu.compute_capability:
            done.append(replace(gpu, architecture=gpu.architecture or entry.architecture))
        else:
            done.append(
                replace(
                    gpu,
                    compute_capability=entry.compute_capability,
                    compute_capability_basis=f"name table: {entry.key}",
                    architecture=gpu.architecture or entry.architecture,
                )
            )
    return tuple(done)


def find_executable(name: str) -> str | None:
    """`shutil.which` for the one case needed here, without importing shutil (~2.5 ms)."""
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def count_nvidia_displays(root: Path) -> int:
    """NVIDIA PCI functions of class 0x03 (display: VGA or 3D controller) under ROOT/sys."""
    found = 0
    try:
        pci = root / "sys/bus/pci/devices"
        devices = [pci / name for name in list_dir(root, pci)]  # inside the root
    except OSError:
        return 0
    for device in devices:
        try:
            if read_text(root, device / "vendor").strip() != NVIDIA_PCI_VENDOR:
                continue
            # PCI class code 0x03xxxx: display controller (PCI Code and ID Assignment spec);
            # NVSwitches (0x0680) and HDMI audio functions (0x0403) are not GPUs.
            if read_text(root, device / "class").strip().startswith("0x03"):
                found += 1
        except OSError:
            continue
    return found


def with_pci_locality(root: Path, gpus: Sequence[Gpu]) -> tuple[Gpu, ...]:
    """Each GPU's NUMA node and local CPUs from sysfs where nvidia-smi gave none: one GPU
    gets no `topo -m` run (it has no links), and older drivers' matrix has no NUMA column,
    yet a job on a two-socket host with one GPU still wants the CPUs next to it."""
    filled = []
    for gpu in gpus:
        if gpu.numa_node is None or not gpu.cpu_affinity:
            node, cpus = read_pci_locality(root, gpu.pci_bus_id)
            gpu = replace(
                gpu,
                numa_node=node if gpu.numa_node is None else gpu.numa_node,
                cpu_affinity=gpu.cpu_affinity or cpus,
            )
        filled.append(gpu)
    return tuple(filled)


def _from_files(root: Path, issues: IssueLog) -> GpuReport:
    from hwtune.probes import nvidia_smi, nvidia_smi_list, nvidia_topo

    log = nvidia_smi.read_smi_xml(root, issues)
    listed = nvidia_smi_list.read_smi_list(root, issues)
    topo = nvidia_topo.read_topo(root, issues)
    if log is None and topo is None and listed is None:
        return NO_GPUS
    gpus = log.gpus if log else ()
    if listed:
        gpus = nvidia_smi_list.merge_list(gpus, listed, issues)
    if topo is not None:
        if log is None and not listed and topo.rows:
            issues.add(
                "gpu",
                f"{nvidia_smi.XML_NAME} absent: GPU names, memory and compute "
                f"capability unknown (only {nvidia_smi.TOPO_NAME} was found)",
            )
        gpus = nvidia_topo.merge_topo(gpus, topo, issues)
    if log is None and listed:
        issues.add(
            "gpu",
            f"{nvidia_smi.XML_NAME} absent: the driver, its CUDA version and GPU memory are "
            f"unknown (names and MIG UUIDs come from {nvidia_smi_list.LIST_NAME})",
        )
    return GpuReport(
        gpus=with_pci_locality(root, gpus),
        driver_version=log.driver_version if log else None,
        cuda_driver_version=log.cuda_version if log else None,
        source="nvidia-smi" if gpus or log else "none",
    )


def run_nvidia_smi(
    executable: str, args: Sequence[str], issues: IssueLog, *, timeout_s: float
) -> bytes | None:
    """Run `nvidia-smi ARGS` and return its stdout, or None with an issue saying why."""
    import subprocess

    command = " ".join(["nvidia-smi", *args])
    try:
        done = subprocess.run(
            [executable, *args],
            capture_output=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        issues.add(
            "nvidia-smi",
            f"`{command}` did not finish within {timeout_s:g} s (a hung driver?)",
            path=executable,
        )
        return None
    except OSError as err:
        issues.add("nvidia-smi", f"cannot run `{command}`: {err.strerror or err}", path=executable)
        return None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode("utf-8", errors="replace").strip()
        issues.add(
            "nvidia-smi", f"`{command}` exited {done.returncode}: {said[:300]}", path=executable
        )
        return None
    return done.stdout


def _from_nvidia_smi(root: Path, executable: str, issues: IssueLog, timeout_s: float) -> GpuReport:
    from hwtune.probes import nvidia_smi, nvidia_topo

    xml = run_nvidia_smi(executable, ["-q", "-x"], issues, timeout_s=timeout_s)
    if xml is None:
        return NO_GPUS
    log = nvidia_smi.parse_smi_xml(xml, "nvidia-smi -q -x", issues)
    gpus = log.gpus
    if any(gpu.mig_enabled for gpu in gpus):  # -q -x names no MIG UUIDs; -L does
        from hwtune.probes import nvidia_smi_list

        listing = run_nvidia_smi(executable, ["-L"], issues, timeout_s=timeout_s)
        if listing is not None:
            listed_text = listing.decode("utf-8", "replace")
            listed = nvidia_smi_list.parse_smi_list(listed_text, "nvidia-smi -L", issues)
            gpus = nvidia_smi_list.merge_list(gpus, listed, issues)
    if len(gpus) > 1:  # one GPU has no links; spare the second run
        text = run_nvidia_smi(executable, ["topo", "-m"], issues, timeout_s=timeout_s)
        if text is not None:
            topo = nvidia_topo.parse_topo(
                text.decode("utf-8", "replace"), "nvidia-smi topo -m", issues
            )
            gpus = nvidia_topo.merge_topo(gpus, topo, issues)
    gpus = with_pci_locality(root, gpus)
    return GpuReport(gpus, log.driver_version, log.cuda_version, "nvidia-smi")


def probe_gpus(
    root: Path,
    issues: IssueLog,
    *,
    live: bool,
    nvml_library: object | None = None,
    nvidia_smi: str | None = None,
    timeout_s: float | None = None,
) -> GpuReport:
    """The NVIDIA GPUs under `root`; failures become issues and the rest is kept.

    Args:
        root: "/" (with live=True) or a snapshot directory.
        issues: the detect issue log.
        live: use NVML / run nvidia-smi rather than reading captured files.
        nvml_library: an NVML binding to use instead of finding and importing pynvml (tests).
        nvidia_smi: the nvidia-smi executable to fall back to (default: found on PATH).
        timeout_s: the limit for each nvidia-smi run.
    """
    if not live:
        report = _from_files(root, issues)
    else:
        report = _live(root, issues, nvml_library, nvidia_smi, timeout_s)
    return replace(report, gpus=identify(report.gpus, issues))


def _live(
    root: Path,
    issues: IssueLog,
    nvml_library: object | None,
    nvidia_smi: str | None,
    timeout_s: float | None,
) -> GpuReport:
    from hwtune.probes import nvml

    library_file = nvml.find_nvml_library(root) if nvml_library is None else None
    if nvml_library is not None or library_file is not None:
        report = nvml.probe_nvml(issues, root, library=nvml_library, library_file=library_file)
        if report is not None:
            return report
    executable = nvidia_smi or find_executable("nvidia-smi")
    if executable:
        return _from_nvidia_smi(root, executable, issues, timeout_s or NVIDIA_SMI_TIMEOUT_S)
    if nvml_library is None and library_file is None:
        displays = count_nvidia_displays(root)
        if displays:
            issues.add(
                "gpu",
                f"no NVIDIA driver: {nvml.SONAME} not found (LD_LIBRARY_PATH, "
                f"/etc/ld.so.cache, /usr/lib*) and no nvidia-smi on PATH, yet "
                f"{displays} NVIDIA GPU(s) are on the PCI bus",
                path=nvml.SONAME,
            )
    return NO_GPUS


def _write_atomic(path: Path, data: bytes) -> None:
    """Write `path` via a new temporary file beside it, renamed into place (0644 whatever the
    umask). The temporary is created O_EXCL|O_NOFOLLOW, 0600 until written: a link or file
    planted at its name is an error (FileExistsError), never written through or removed."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, 0o644)  # a snapshot file, whatever the umask
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # ours: O_EXCL made it
        raise


def save_gpu_snapshot(
    dest: Path,
    issues: IssueLog,
    *,
    nvidia_smi: str | None = None,
    timeout_s: float | None = None,
    write: Callable[[str, bytes], None] | None = None,
) -> None:
    """Save `nvidia-smi -q -x`, `topo -m` and `-L` output into DEST for `detect --root`.

    `write(name, data)`, when given, writes each file instead (`hwtune snapshot` passes one
    that writes through the snapshot directory's open descriptor)."""
    from hwtune.probes import nvidia_smi as smi
    from hwtune.probes.nvidia_smi_list import LIST_NAME

    executable = nvidia_smi or find_executable("nvidia-smi")
    if not executable:
        displays = count_nvidia_displays(Path("/"))
        seen = (
            f"{displays} NVIDIA GPU(s) are on the PCI bus"
            if displays
            else "no NVIDIA GPU is on the PCI bus either"
        )
        issues.add("gpu", f"nvidia-smi not found on PATH: GPUs not captured ({seen})")
        return
    limit = timeout_s or NVIDIA_SMI_TIMEOUT_S
    captures = ((["-q", "-x"], smi.XML_NAME), (["topo", "-m"], smi.TOPO_NAME), (["-L"], LIST_NAME))
    for args, name in captures:
        output = run_nvidia_smi(executable, args, issues, timeout_s=limit)
        if output is not None:
            try:
                if write is not None:
                    write(name, output)
                else:
                    _write_atomic(dest / name, output)
            except OSError as err:
                issues.add("gpu", f"cannot write: {err.strerror or err}", path=str(dest / name))
