"""`nvidia-smi -L`: the GPUs and their MIG devices with the UUIDs CUDA_VISIBLE_DEVICES takes.

`nvidia-smi -q -x` lists MIG devices without their UUIDs, and a CUDA process in MIG mode can
only be pointed at a slice by UUID (NVIDIA MIG User Guide, "CUDA Device Enumeration":
`MIG-<UUID>` from driver R470 on, `MIG-GPU-<GPU UUID>/<GI>/<CI>` on R450/R460). `-L` prints
both forms as the driver knows them, so `hwtune snapshot` saves it as ROOT/nvidia-smi-L.txt:

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-15d4f017-b14e-d7cb-4d10-e893a6abd5dc)
      MIG 1g.20gb     Device  0: (UUID: MIG-190b983f-88d5-5629-9434-2a97925f4032)

Parsing is pure and never raises: a line it cannot read becomes an issue naming the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hwtune.models.hardware import Gpu, MigDevice
from hwtune.probes.issues import IssueLog
from hwtune.probes.nvidia_smi import known

LIST_NAME = "nvidia-smi-L.txt"
# One line per GPU and per MIG device, ~90 bytes each: 1 MiB is thousands of GPUs.
MAX_LIST_BYTES = 1 << 20
MAX_GPUS = 256  # as for `-q -x` (nvidia_smi.MAX_GPUS)

_GPU_RE = re.compile(r"^GPU (\d{1,9}): (.+?) \(UUID: (GPU-[0-9A-Za-z-]{1,64})\)\s*$", re.ASCII)
_MIG_RE = re.compile(
    r"^\s+MIG (\S{1,32})\s+Device\s+(\d{1,9}): \(UUID: (MIG-[0-9A-Za-z/-]{1,100})\)\s*$",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class ListedGpu:
    index: int
    name: str
    uuid: str
    mig_devices: tuple[MigDevice, ...] = ()


def parse_smi_list(text: str, path: str, issues: IssueLog) -> tuple[ListedGpu, ...]:
    """The GPUs of `nvidia-smi -L` output, each with the MIG devices listed under it."""
    gpus: list[ListedGpu] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        gpu = _GPU_RE.match(line)
        if gpu:
            if len(gpus) >= MAX_GPUS:
                issues.add("nvidia-smi", f"more than {MAX_GPUS} GPUs; kept the first", path=path)
                break
            gpus.append(ListedGpu(int(gpu.group(1)), gpu.group(2), gpu.group(3)))
            continue
        mig = _MIG_RE.match(line)
        if mig and gpus:
            device = MigDevice(index=int(mig.group(2)), uuid=mig.group(3), profile=mig.group(1))
            gpus[-1] = replace(gpus[-1], mig_devices=(*gpus[-1].mig_devices, device))
            continue
        issues.add(
            "nvidia-smi", f"not an `nvidia-smi -L` line: {line.strip()[:80]!r}", path, number
        )
    return tuple(gpus)


def merge_list(
    gpus: Sequence[Gpu], listed: Sequence[ListedGpu], issues: IssueLog
) -> tuple[Gpu, ...]:
    """Add names, UUIDs and MIG devices (UUID, profile) from `-L` to the GPUs of the same index.

    With no XML (`gpus` empty) the list alone gives the GPUs. A GPU whose UUID differs between
    the two files is not merged: they were captured on different machines or after a reset.
    """
    by_index = {g.index: g for g in gpus}
    merged = dict(by_index)
    for entry in listed:
        base = by_index.get(entry.index)
        if base is None:
            if by_index:
                issues.add(
                    "nvidia-smi",
                    f"GPU {entry.index} is in {LIST_NAME} but not in nvidia-smi-q.xml; ignored",
                    path=LIST_NAME,
                )
                continue
            # A failed name query prints as NVML's error string ("Unknown Error"), not a name.
            base = Gpu(index=entry.index, name=known(entry.name) or f"GPU {entry.index}")
        if base.uuid and base.uuid != entry.uuid:
            issues.add(
                "nvidia-smi",
                f"GPU {entry.index}: UUID {entry.uuid} in {LIST_NAME} is not the "
                f"{base.uuid} of nvidia-smi-q.xml (another machine?); its MIG devices "
                "were not taken from the list",
                path=LIST_NAME,
            )
            continue
        merged[entry.index] = replace(
            base,
            uuid=entry.uuid,
            mig_enabled=True if entry.mig_devices else base.mig_enabled,
            mig_devices=_merge_mig(base.mig_devices, entry.mig_devices),
        )
    return tuple(merged[i] for i in sorted(merged))


def _merge_mig(
    known: tuple[MigDevice, ...], listed: tuple[MigDevice, ...]
) -> tuple[MigDevice, ...]:
    if not listed:
        return known
    by_index = {m.index: m for m in known}
    out = []
    for device in listed:
        base = by_index.get(device.index)
        if base is None:
            out.append(device)
        else:
            out.append(replace(base, uuid=device.uuid, profile=device.profile or base.profile))
    return tuple(out)


def read_smi_list(root: Path, issues: IssueLog) -> tuple[ListedGpu, ...] | None:
    """Parse ROOT/nvidia-smi-L.txt; None when the file is absent."""
    from hwtune.probes.nvidia_smi import read_bounded

    path = root / LIST_NAME
    if not path.exists():
        return None
    data = read_bounded(root, MAX_LIST_BYTES, issues, LIST_NAME)
    if data is None:
        return ()
    return parse_smi_list(data.decode("utf-8", errors="replace"), LIST_NAME, issues)
