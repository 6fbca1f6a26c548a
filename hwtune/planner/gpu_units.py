"""What a CUDA process can be given: a whole GPU, or one MIG device of a GPU in MIG mode.

A GPU in MIG mode is a set of slices, and a CUDA process enumerates a single MIG device
(NVIDIA MIG User Guide, "CUDA Device Enumeration": "a single CUDA process can only enumerate a
single MIG device"), named in CUDA_VISIBLE_DEVICES by its UUID: `MIG-<UUID>` from driver R470
on, `MIG-GPU-<GPU UUID>/<GPU instance>/<compute instance>` before R470. So with any GPU in MIG
mode every instance gets exactly one unit, never a MirroredStrategy across slices; and where a
slice's UUID cannot be known, instances are not split over slices at all (they would all land
on the first one CUDA enumerates).

A MIG device is a compute instance inside a GPU instance, and the compute instances of one GPU
instance share its memory (MIG User Guide, "Terminology", Compute Instance: "The CIs share
memory and engines"). Instances on different compute instances of one GPU
instance therefore share memory as instances on one device do (`GpuUnit.memory_key`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from hwtune.errors import PlanError
from hwtune.models.hardware import Gpu, Hardware, MigDevice
from hwtune.planner.knowledge import version_tuple
from hwtune.probes.cuda_visible import legacy_mig_name

# Drivers before R470 (R450 to R465) name MIG devices MIG-GPU-<uuid>/<gi>/<ci> (MIG User Guide,
# "MIG Device Names": "With drivers < R470 (for example, R450 and R460)").
_OLD_MIG_NAMING = range(450, 470)
# "1g.20gb", "3g.40gb", "1c.3g.20gb": the memory in GB ends the profile name (MIG User Guide,
# "MIG Device Names": "its total memory in GB"), before an optional media or graphics extension
# ("1g.10gb+me" on A100/H100, "+gfx" and "-me" on Blackwell; nvidia-smi mig -lgip).
_PROFILE_GB_RE = re.compile(r"\.(\d{1,4})gb(?:[+-][a-z]+(?:\.[a-z]+)?)?$", re.ASCII)
# "2c.7g.40gb": compute instance 2 of a 7g.40gb GPU instance, smaller than its GPU instance.
_CI_PROFILE_RE = re.compile(r"^\d+c\.(.+)$", re.ASCII)


@dataclass(frozen=True, slots=True)
class GpuUnit:
    """One device a process can be pointed at: a whole GPU or one MIG device."""

    gpu: Gpu
    mig: MigDevice | None = None
    name: str | None = None  # the CUDA_VISIBLE_DEVICES entry; None: a MIG UUID nobody knows
    memory_bytes: int | None = None
    memory_basis: str = ""

    @property
    def key(self) -> tuple[int, int]:
        return (self.gpu.index, -1 if self.mig is None else self.mig.index)

    @property
    def memory_key(self) -> tuple[int, str, str]:
        """The memory this unit draws on: a whole GPU's, or its GPU instance's (shared by the
        GPU instance's compute instances). Without GPU instance ids (`nvidia-smi -L` prints
        none), compute instances with the same GPU-instance profile ("1c.3g.40gb" and
        "2c.3g.40gb") are taken to share one: two GPU instances of that profile would each
        get a smaller limit than they could use, never a larger one."""
        if self.mig is None:
            return (self.gpu.index, "gpu", "")
        if self.mig.gpu_instance_id is not None:
            return (self.gpu.index, "gi", str(self.mig.gpu_instance_id))
        compute_instance = _CI_PROFILE_RE.match(self.mig.profile or "")
        if compute_instance:
            return (self.gpu.index, "gi-profile", compute_instance.group(1))
        return (self.gpu.index, "mig", str(self.mig.index))

    def describe(self) -> str:
        if self.mig is None:
            return f"GPU {self.gpu.index}"
        profile = f" {self.mig.profile}" if self.mig.profile else ""
        return f"MIG device {self.mig.index}{profile} of GPU {self.gpu.index}"


def mig_name(gpu: Gpu, mig: MigDevice, driver: str | None) -> str | None:
    """The CUDA_VISIBLE_DEVICES name of a MIG device, or None when it cannot be known."""
    if mig.uuid:
        return mig.uuid
    branch = version_tuple(driver or "")[:1]
    if branch and branch[0] in _OLD_MIG_NAMING:
        return legacy_mig_name(gpu, mig)
    return None


def visible(hw: Hardware) -> tuple[tuple[Gpu, ...], str]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves this process (`hw.gpu_visibility`; all when unset),
    a GPU in MIG mode keeping only the MIG devices it names, and the limit's reason where it
    narrowed them ("" where it did not).

    Where the variable says how many GPUs but not which (indices under CUDA's fastest-first
    order on GPUs of several models), the plan takes the least capable that many (lowest
    compute capability, then memory): what suits them does not overreach on the others."""
    seen = hw.gpu_visibility
    if seen is None:
        return hw.gpus, ""
    if seen.gpus is None:
        weakest = sorted(
            hw.gpus,
            key=lambda g: (
                version_tuple(g.compute_capability or ""),
                g.memory_bytes or 0,
                g.index,
            ),
        )[: seen.devices]
        chosen = tuple(sorted(weakest, key=lambda g: g.index))
        return chosen, f"{seen.reason}; planned for the least capable {len(chosen)}"
    by_index = {gpu.index: gpu for gpu in hw.gpus}
    found = []
    for index in seen.gpus:
        gpu = by_index.get(index)
        if gpu is None:
            continue
        named = tuple(
            mig
            for mig in gpu.mig_devices
            if {mig.uuid, legacy_mig_name(gpu, mig)} & set(seen.mig_devices)
        )
        found.append(replace(gpu, mig_devices=named) if named else gpu)
    narrowed = len(found) < len(hw.gpus) or bool(seen.mig_devices)
    return tuple(found), seen.reason if narrowed else ""


def _mig_memory(mig: MigDevice) -> tuple[int | None, str]:
    if mig.memory_bytes:
        return mig.memory_bytes, "the MIG device's own memory"
    m = _PROFILE_GB_RE.search(mig.profile or "")
    if m:
        return int(m.group(1)) * 10**9, f"nominal, from the profile name {mig.profile}"
    return None, "MIG device memory unknown"


def mig_without_devices(gpu: Gpu) -> str | None:
    """Why CUDA cannot run on `gpu`, when it is in MIG mode with no MIG device yet (the state
    right after `nvidia-smi -mig 1`, MIG User Guide, "Getting Started"); else None."""
    if not gpu.mig_enabled or gpu.mig_devices:
        return None
    return (
        f"GPU {gpu.index} is in MIG mode without MIG devices: CUDA cannot run on it until GPU "
        "and compute instances are created (nvidia-smi mig -cgi ... -C)"
    )


def units(
    gpus: tuple[Gpu, ...], driver: str | None, ordinals: Mapping[int, int] | None = None
) -> tuple[list[GpuUnit], list[str]]:
    """The units of `gpus` in the given order, and notes on GPUs that offer none. `ordinals`:
    GPU index -> CUDA's number for it in this process (`cuda_visible.cuda_ordinals` of every
    GPU detected), which names a whole GPU; None: the index itself."""
    found: list[GpuUnit] = []
    notes: list[str] = []
    for gpu in gpus:
        if not gpu.mig_enabled:
            memory = gpu.memory_bytes
            basis = "the GPU's memory" if memory else "GPU memory unknown"
            ordinal = ordinals.get(gpu.index, gpu.index) if ordinals else gpu.index
            found.append(GpuUnit(gpu, None, str(ordinal), memory, basis))
            continue
        idle = mig_without_devices(gpu)
        if idle:
            notes.append(idle)
            continue
        for mig in gpu.mig_devices:
            memory, basis = _mig_memory(mig)
            found.append(GpuUnit(gpu, mig, mig_name(gpu, mig, driver), memory, basis))
    return found, notes


def deal(found: list[GpuUnit], instances: int) -> tuple[list[tuple[GpuUnit, ...]], list[int]]:
    """Each instance's units and how many instances share their memory (the same GPU, or
    compute instances of the same GPU instance).

    Whole GPUs are dealt in contiguous runs (fewer GPUs than instances: instances share them,
    i -> GPU i*G//N). With MIG, every instance gets one unit: instance i takes unit i, or unit
    i*U//N when instances outnumber units.
    """
    count = len(found)
    if count == 0:
        return [() for _ in range(instances)], [0] * instances
    shares: list[tuple[GpuUnit, ...]]
    if any(unit.mig is not None for unit in found) or count < instances:
        shares = [
            (found[i if instances <= count else i * count // instances],) for i in range(instances)
        ]
        _refuse_unnamed(shares, instances)
    else:
        shares = []
        start = 0
        for i in range(instances):
            size = count // instances + (1 if i < count % instances else 0)
            shares.append(tuple(found[start : start + size]))
            start += size
    users: dict[tuple[int, str, str], int] = {}
    for share in shares:
        for memory_key in {unit.memory_key for unit in share}:
            users[memory_key] = users.get(memory_key, 0) + 1
    sharers = [max((users[unit.memory_key] for unit in share), default=0) for share in shares]
    return shares, sharers


def _refuse_unnamed(shares: list[tuple[GpuUnit, ...]], instances: int) -> None:
    if instances < 2:
        return
    unnamed = [unit for share in shares for unit in share if unit.name is None]
    if unnamed:
        unit = unnamed[0]
        raise PlanError(
            f"{unit.describe()} has no known UUID (nvidia-smi -q -x does not print MIG UUIDs), "
            f"so CUDA_VISIBLE_DEVICES cannot give each of the {instances} instances its own "
            "slice; they would all run on the first MIG device CUDA enumerates",
            hint="save `nvidia-smi -L` as nvidia-smi-L.txt next to the capture (`hwtune "
            "snapshot` does), or plan on the machine itself (NVML names the slices)",
        )
