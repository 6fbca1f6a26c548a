"""Detect-time check: the driver's CUDA version against the installed TensorFlow's CUDA.

nvidia-smi prints the newest CUDA the driver supports (<cuda_version>; NVML
nvmlSystemGetCudaDriverVersion), TensorFlow's build_info.py the CUDA it was built with. A build
for a newer CUDA major than the driver's cannot load its GPU kernels at all; a newer minor of
the same major runs under CUDA minor version compatibility, without PTX JIT of newer PTX
(NVIDIA CUDA Compatibility guide). The planner says the same, with the minimum driver, for the
TensorFlow it plans (planner/cuda_compat.py).
"""

from __future__ import annotations

from hwtune.models.digits import is_ascii_digits
from hwtune.models.hardware import TensorFlowInfo
from hwtune.probes.gpu_report import GpuReport
from hwtune.probes.issues import IssueLog


def _major_minor(text: str | None) -> tuple[int, int] | None:
    parts = (text or "").strip().split(".")
    if len(parts) < 2 or not all(is_ascii_digits(p) and len(p) <= 4 for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def check_driver(report: GpuReport | None, tf: TensorFlowInfo | None, issues: IssueLog) -> None:
    """Add an issue when the driver's CUDA is older than the installed TensorFlow's."""
    if report is None or not report.gpus or tf is None or not tf.cuda_build:
        return
    have = _major_minor(report.cuda_driver_version)
    want = _major_minor(tf.cuda_version)
    if have is None or want is None or have >= want:
        return
    driver = f"driver {report.driver_version}" if report.driver_version else "driver"
    consequence = (
        "TensorFlow cannot use the GPU until the driver is upgraded"
        if have[0] < want[0]
        else "it runs under CUDA minor version compatibility, without JIT of newer PTX"
    )
    issues.add(
        "gpu",
        f"the NVIDIA {driver} supports CUDA {report.cuda_driver_version}, older than the CUDA "
        f"{tf.cuda_version} TensorFlow {tf.version} is built with: {consequence} (NVIDIA CUDA "
        "Compatibility guide)",
    )
