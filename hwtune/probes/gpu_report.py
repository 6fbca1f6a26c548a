"""What the GPU probe found, from whichever source answered (NVML, nvidia-smi, captures).

Its own module so that the NVML adapter and the probe that chooses between sources can both
build one without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hwtune.models.hardware import Gpu

GpuSource = Literal["nvml", "nvidia-smi", "none"]


@dataclass(frozen=True, slots=True)
class GpuReport:
    gpus: tuple[Gpu, ...]
    driver_version: str | None
    cuda_driver_version: str | None
    source: GpuSource


NO_GPUS = GpuReport(gpus=(), driver_version=None, cuda_driver_version=None, source="none")
