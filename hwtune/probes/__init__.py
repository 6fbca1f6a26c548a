"""`detect(root)`: run every probe under a root path and merge the facts into one `Hardware`.

Each probe module splits reading (`read_*`, the only code that touches files) from parsing
(`parse_*`, pure functions of text). A probe that fails or sees only part of what it looks for
records a `ProbeIssue` and returns what it could; a probe that raises anyway is caught here and
recorded too, so `detect()` never raises for anything the machine (or a snapshot) contains.

Under the live root ("/") GPUs come from NVML and TensorFlow from the running interpreter's
site-packages; under any other root they come from the files a snapshot holds
(`nvidia-smi-q.xml`, `nvidia-smi-topo.txt`, `nvidia-smi-L.txt`, `tensorflow.json`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from hwtune.models.hardware import Hardware, ProbeIssue
from hwtune.probes.issues import IssueLog
from hwtune.probes.root import is_live, live_environ

T = TypeVar("T")


def _guarded(issues: IssueLog, probe: str, fallback: T, run: Callable[[], T]) -> T:
    try:
        return run()
    except Exception as err:  # noqa: BLE001 - a probe bug must not break detection
        issues.add(probe, f"probe failed unexpectedly: {type(err).__name__}: {err}")
        return fallback


def detect(
    root: str | os.PathLike[str] = "/",
    *,
    gpus: bool = True,
    tensorflow: bool = True,
    pid: str = "self",
    environ: Mapping[str, str] | None = None,
) -> Hardware:
    """Probe the machine under `root` and return its `Hardware`.

    Example:
        >>> hw = detect("/")
        >>> hw.limits.effective_cpus >= 1
        True

    Args:
        root: "/" for this machine, or a directory laid out as one (`hwtune snapshot` makes one).
        gpus: probe NVIDIA GPUs (NVML live, nvidia-smi captures under a root).
        tensorflow: look for an installed TensorFlow (never imports it).
        pid: whose CPU affinity and cgroup limits are read ("self": this process's; `hwtune
            verify --pid` gives the job's).
        environ: the environment whose CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER) limits the
            GPUs (`Hardware.gpu_visibility`). Default: os.environ under the live root, none under
            any other: a snapshot's limits are its own files', as its CPU affinity is its
            proc/self/status and never the caller's. Given, it applies to any root.
    """
    from hwtune.models.hardware import CpuInfo, Limits, Memory, NumaNode
    from hwtune.probes.cpu import probe_cpu
    from hwtune.probes.limits import probe_limits
    from hwtune.probes.memory import probe_memory
    from hwtune.probes.numa import probe_numa

    # Absolute (not normalised: a `..` after a link means what the kernel says): probes join
    # paths onto the root, and a relative root would be joined twice.
    base = Path(root).absolute()
    live = is_live(base)
    issues = IssueLog()
    cpu = _guarded(issues, "cpu", CpuInfo(), lambda: probe_cpu(base, issues))
    no_nodes: tuple[NumaNode, ...] = ()
    numa = _guarded(issues, "numa", no_nodes, lambda: probe_numa(base, issues, cpu))
    memory = _guarded(issues, "memory", Memory(), lambda: probe_memory(base, issues))
    limits = _guarded(
        issues,
        "limits",
        Limits(),
        lambda: probe_limits(base, issues, cpu, memory, live=live, pid=pid),
    )
    gpu_report = None
    if gpus:
        from hwtune.probes.gpu import probe_gpus

        gpu_report = _guarded(issues, "gpu", None, lambda: probe_gpus(base, issues, live=live))
    tf_info = None
    if tensorflow:
        from hwtune.probes.tensorflow import probe_tensorflow

        tf_info = _guarded(
            issues, "tensorflow", None, lambda: probe_tensorflow(base, issues, cpu, live=live)
        )
    visibility = None
    if gpu_report is not None and gpu_report.gpus:
        from hwtune.probes.cuda_visible import read_visibility

        if environ is not None:
            seen: Mapping[str, str] = environ
        elif live:
            seen = os.environ
        else:  # a snapshot: what `hwtune snapshot` recorded of the process that took it
            from hwtune.probes.cuda_visible_snapshot import read_snapshot

            seen = read_snapshot(base, issues)
        visibility = _guarded(issues, "gpu", None, lambda: read_visibility(seen, gpu_report.gpus))
    if gpu_report is not None and tf_info is not None:
        from hwtune.probes.cuda_check import check_driver

        check_driver(gpu_report, tf_info, issues)
    return Hardware(
        root=str(base),
        cpu=cpu,
        numa=numa,
        limits=limits,
        memory=memory,
        gpus=gpu_report.gpus if gpu_report else (),
        gpu_driver=gpu_report.driver_version if gpu_report else None,
        cuda_driver_version=gpu_report.cuda_driver_version if gpu_report else None,
        gpu_source=gpu_report.source if gpu_report else "none",
        gpu_visibility=visibility,
        tensorflow=tf_info,
        issues=issues.freeze(),
    )


__all__ = ["Hardware", "ProbeIssue", "detect", "is_live", "live_environ"]
