"""GPU utilisation and memory while the job runs, from NVML (nvmlDeviceGetUtilizationRates:
the percent of the last sample period in which a kernel ran; nvmlDeviceGetMemoryInfo).

Only when hwtune's NVML probe finds the driver's library (hwtune.probes.nvml, without
importing anything); pynvml is imported here, lazily, and a failure means "no GPU samples".
"""

from __future__ import annotations

import contextlib
from typing import Any

from hwtune.doctor.samples import GpuSample


def _load_pynvml() -> Any | None:
    from hwtune.probes.nvml import find_nvml_library

    library_file = find_nvml_library()
    if library_file is None:
        return None
    if "/" in library_file:  # as probe_nvml: so pynvml's dlopen finds it
        import ctypes

        ctypes.CDLL(library_file)
    import pynvml

    return pynvml


class GpuSampler:
    """Opens NVML once; `sample()` reads every GPU; `close()` shuts NVML down.

    `library` is the NVML binding (pynvml when None, once the driver's library is found), as
    for `probe_nvml`: tests hand it a module-like object.
    """

    def __init__(self, library: Any | None = None) -> None:
        self._lib: Any = None
        self._handles: list[tuple[int, Any]] = []
        try:
            lib = library if library is not None else _load_pynvml()
            if lib is None:
                return
            lib.nvmlInit()
            count = lib.nvmlDeviceGetCount()
            self._handles = [(i, lib.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
            self._lib = lib
        except Exception:  # noqa: BLE001 - no binding, no driver: the doctor goes on without GPUs
            self._lib = None

    @property
    def available(self) -> bool:
        return self._lib is not None and bool(self._handles)

    def sample(self) -> tuple[GpuSample, ...]:
        if not self.available:
            return ()
        found = []
        for index, handle in self._handles:
            try:
                rates = self._lib.nvmlDeviceGetUtilizationRates(handle)
                memory = self._lib.nvmlDeviceGetMemoryInfo(handle)
            except Exception:  # noqa: BLE001 - a GPU lost mid-run: skip it this time
                continue
            found.append(GpuSample(index, int(rates.gpu), int(memory.used), int(memory.total)))
        return tuple(found)

    def close(self) -> None:
        if self._lib is not None:
            with contextlib.suppress(Exception):  # shutting down: nothing left to do
                self._lib.nvmlShutdown()
            self._lib = None
