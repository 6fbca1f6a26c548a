"""The driver against the CUDA TensorFlow is built with, and GPUs newer than that CUDA.

A CUDA application runs on a driver of the same major release family at least as new as the
family's minimum (CUDA "minor version compatibility": 12.x needs R525+, 11.x R450+; NVIDIA
CUDA Compatibility guide); an older family's driver cannot load it at all. nvidia-smi prints
the newest CUDA the driver supports (<cuda_version>), so the check is a comparison of two
versions. A GPU whose compute capability is newer than the build's CUDA compiles SASS for
runs the build's newest PTX, JIT-compiled by the driver when the process starts.
"""

from __future__ import annotations

from hwtune.models.hardware import Gpu, Hardware
from hwtune.planner.knowledge import Knowledge, TfVersionEntry, version_tuple


def tf_cuda(hw: Hardware, planned: TfVersionEntry | None) -> tuple[str | None, str]:
    """The CUDA version the TensorFlow that will run was built with, and whose it is."""
    tf = hw.tensorflow
    if tf is not None and tf.cuda_build and tf.cuda_version:
        return tf.cuda_version, f"the installed TensorFlow {tf.version} (CUDA {tf.cuda_version})"
    if tf is not None and not tf.cuda_build:
        return None, ""
    if planned is not None:
        return planned.cuda_version, (
            f"TensorFlow {planned.key}'s GPU wheels (CUDA {planned.cuda_version})"
        )
    return None, ""


def driver_problem(
    driver: str | None, driver_cuda: str | None, needed: str, who: str, knowledge: Knowledge
) -> str | None:
    """Why this driver cannot run `needed` CUDA as well as it should; None when it can."""
    have = version_tuple(driver_cuda or "")[:2]
    want = version_tuple(needed)[:2]
    if len(have) < 2 or len(want) < 2 or have >= want:
        return None
    entry = knowledge.cuda_entry(needed)
    minimum = f"≥ {entry.min_driver}" if entry else f"for CUDA {want[0]}"
    named = f"driver {driver}" if driver else "the driver"
    if have[0] < want[0]:
        return (
            f"the NVIDIA {named} supports CUDA {driver_cuda}, older than the CUDA {want[0]}.x "
            f"of {who}: TensorFlow cannot use the GPU (CUDA driver version is insufficient "
            f"for CUDA runtime version) until the driver is upgraded ({minimum}; NVIDIA CUDA "
            "Compatibility guide, minor version compatibility)"
        )
    return (
        f"the NVIDIA {named} supports CUDA {driver_cuda}, older than the CUDA {needed} of "
        f"{who}: it runs under minor version compatibility ({minimum}; NVIDIA CUDA "
        "Compatibility guide), but PTX newer than the driver cannot be JIT-compiled by it; a "
        f"driver for CUDA {want[0]}.{want[1]} or newer lifts that"
    )


def driver_cannot_load(
    hw: Hardware, planned: TfVersionEntry | None, knowledge: Knowledge
) -> str | None:
    """Why the driver cannot load the CUDA of the TensorFlow that will run at all (its CUDA is
    of an older major release family, so minor version compatibility does not apply), or None.
    TensorFlow then finds no GPU ("CUDA driver version is insufficient for CUDA runtime
    version") and runs on the CPU."""
    needed, who = tf_cuda(hw, planned)
    return cannot_load(hw, needed, who, knowledge)


def cannot_load(hw: Hardware, needed: str | None, who: str, knowledge: Knowledge) -> str | None:
    """Why this machine's driver cannot load CUDA `needed` (of `who`) at all: its CUDA is of
    an older major release family; None when it can, or either version is unknown."""
    have = version_tuple(hw.cuda_driver_version or "")[:1]
    want = version_tuple(needed or "")[:1]
    if not needed or not have or not want or have >= want:
        return None
    return driver_problem(hw.gpu_driver, hw.cuda_driver_version, needed, who, knowledge)


def newer_than_build(
    gpus: tuple[Gpu, ...], planned: TfVersionEntry | None, who: str, knowledge: Knowledge
) -> list[str]:
    """GPUs whose compute capability the build's CUDA predates (Blackwell on CUDA 12.5)."""
    if planned is None:
        return []
    newest = version_tuple(planned.max_cuda_cc)[:2]
    notes = []
    for gpu in gpus:
        cc = version_tuple(gpu.compute_capability or "")[:2]
        if len(cc) < 2 or cc <= newest:
            continue
        first = knowledge.first_cuda_for(f"{cc[0]}.{cc[1]}")
        needs = f"CUDA ≥ {first.key} ({first.source})" if first else "a newer CUDA"
        notes.append(
            f"GPU {gpu.index} ({gpu.name}, compute capability {cc[0]}.{cc[1]}) is newer than "
            f"{who or f'TensorFlow {planned.key}'} compiles SASS for (up to "
            f"{planned.max_cuda_cc}): its compute_{newest[0]}{newest[1]} PTX is JIT-compiled "
            "by the driver when TensorFlow starts — slow the first time, then cached "
            f"(~/.nv/ComputeCache, CUDA_CACHE_MAXSIZE); native sm_{cc[0]}{cc[1]} code needs "
            f"{needs}"
        )
    return notes


def compat_warnings(
    hw: Hardware,
    gpus: tuple[Gpu, ...],
    used: tuple[Gpu, ...],
    planned: TfVersionEntry | None,
    knowledge: Knowledge,
) -> list[str]:
    """Plan warnings about the driver and the CUDA of the TensorFlow that will run.

    `gpus`: those CUDA_VISIBLE_DEVICES leaves the process, for the driver (too old a driver is
    why none of them is used); `used`: those TensorFlow will run on, for the PTX JIT note
    (TensorFlow compiles nothing for a GPU it ignores, as one in MIG mode with no MIG device)."""
    if not gpus:
        return []
    needed, who = tf_cuda(hw, planned)
    warnings = []
    if needed:
        problem = driver_problem(hw.gpu_driver, hw.cuda_driver_version, needed, who, knowledge)
        if problem:
            warnings.append(problem)
    warnings.extend(newer_than_build(used, planned, who, knowledge))
    return warnings
