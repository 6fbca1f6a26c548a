"""CUDA_VISIBLE_DEVICES: which of the detected GPUs a CUDA process started with it would see.

NVML and nvidia-smi list every GPU of the node whatever the variable says, so a scheduler's
allocation (Slurm, Kubernetes, a user's `CUDA_VISIBLE_DEVICES=2,3`) is read here, as the CPU
affinity mask is in hwtune.probes.limits, and the planner plans on what it leaves.

The semantics are CUDA's (CUDA Programming Guide, "CUDA Environment Variables",
CUDA_VISIBLE_DEVICES; docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/
environment-variables.html):
- "If the variable is not set, all GPU devices are visible. If the variable is set to an empty
  string, no GPU devices are visible."
- "A comma-separated sequence of GPU identifiers": integer indices, GPU UUIDs as `nvidia-smi
  -L` prints them, where "abbreviated forms are allowed; simply specify enough digits from the
  beginning of the GPU UUID to uniquely identify that GPU", and MIG devices (`MIG-<UUID>`, or
  `MIG-<GPU-UUID>/<GPU instance ID>/<compute instance ID>` before driver R470: NVIDIA MIG User
  Guide, "MIG Device Names").
- "If an invalid index is encountered, only devices with indices that appear before the invalid
  index in the list are visible" (`0,2,-1,1` leaves 0 and 2): so `-1`, or Slurm's `NoDevFiles`,
  first hides every GPU.
What the guide leaves unsaid follows PyTorch's parser, written to match CUDA's
(torch/cuda/__init__.py, `_parse_visible_devices`, and its tests in test/test_cuda.py,
TestVisibleDeviceParses): entries are stripped of blanks, an index is read as strtoul reads it
(`1gpu2` is 1, `-0` is 0), and a device named twice leaves none visible ("Double mention of
ordinal returns empty set").

Integer indices follow CUDA_DEVICE_ORDER (same guide): "PCI_BUS_ID orders devices by PCI bus ID
in ascending order", nvidia-smi's order, while the default FASTEST_FIRST "causes CUDA to
enumerate the available devices in fastest to slowest order using a simple heuristic". An
index is therefore mapped to nvidia-smi's GPU of that index only under PCI_BUS_ID, or where
every GPU is the same model (then, by assumption, the heuristic has nothing to reorder; the
reason says so). Otherwise how many GPUs are visible is known, and which ones is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from hwtune.models.cpulist import format_cpulist
from hwtune.models.hardware import Gpu, GpuVisibility, MigDevice
from hwtune.models.words import plural

VARIABLE = "CUDA_VISIBLE_DEVICES"
ORDER_VARIABLE = "CUDA_DEVICE_ORDER"
PCI_ORDER = "PCI_BUS_ID"
# strtoul's reading of an entry: an optional sign and the leading digits, the rest ignored.
_INDEX_RE = re.compile(r"([+-]?)(\d+)", re.ASCII)
# A device: (GPU index, MIG device name or "" for the whole GPU).
_Device = tuple[int, str]


def cuda_ordinals(gpus: Sequence[Gpu]) -> dict[int, int]:
    """GPU index -> the integer CUDA_VISIBLE_DEVICES takes for it in a process that can open
    exactly `gpus`: its position among them in bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID).

    The two differ when some of the node's GPUs are closed to this process, as in a Slurm step
    under ConstrainDevices=yes: the device cgroup leaves CUDA only the allocated GPUs, numbered
    from 0, and Slurm writes CUDA_VISIBLE_DEVICES in those local numbers ("use_local_dev_index
    ? (*local_inx)++ : gres_device->dev_num", src/plugins/gres/common/gres_common.c), while
    NVML keeps counting every GPU of the node and refuses a handle on the others
    (nvmlDeviceGetCount_v2 "returns count of all devices in the system even if
    nvmlDeviceGetHandleByIndex_v2 returns NVML_ERROR_NO_PERMISSION", NVML API reference). The
    NVML probe leaves those GPUs out and keeps NVML's index on the rest, so with GPUs 2 and 3
    allocated CUDA calls them 0 and 1."""
    ordered = sorted(gpu.index for gpu in gpus)
    return {index: position for position, index in enumerate(ordered)}


def read_visibility(environ: Mapping[str, str], gpus: Sequence[Gpu]) -> GpuVisibility | None:
    """The GPUs `environ`'s CUDA_VISIBLE_DEVICES leaves of `gpus`; None when it is unset."""
    value = environ.get(VARIABLE)
    if value is None:
        return None
    return parse_visibility(value, environ.get(ORDER_VARIABLE), gpus)


def legacy_mig_name(gpu: Gpu, mig: MigDevice) -> str | None:
    """A MIG device's name before driver R470, `MIG-<GPU UUID>/<GPU instance>/<compute
    instance>` (NVIDIA MIG User Guide, "MIG Device Names"); None without those ids."""
    if gpu.uuid and mig.gpu_instance_id is not None and mig.compute_instance_id is not None:
        return f"MIG-{gpu.uuid}/{mig.gpu_instance_id}/{mig.compute_instance_id}"
    return None


def _mig_names(gpu: Gpu) -> dict[str, str]:
    """Every name CUDA takes for each MIG device of `gpu` -> the device's UUID (or old name)."""
    names: dict[str, str] = {}
    for mig in gpu.mig_devices:
        for name in (mig.uuid, legacy_mig_name(gpu, mig)):
            if name:
                names[name] = mig.uuid or name
    return names


def _match(entry: str, gpus: Sequence[Gpu], by_index: bool) -> tuple[_Device | None, str | None]:
    """(the device `entry` names, None) when it names one; (None, None) when which one cannot
    be known from what was detected; (None, why) when it names none, which ends CUDA's list."""
    if entry.startswith("GPU-"):
        # Driver 580.159.04 (one H200, 2026-11-28: cuInit and cuDeviceGetCount under each
        # value, tests/test_gpu_visible.py) saw the GPU for its UUID in upper case and none
        # for a bare "GPU-": the digits are compared without case, and one at least is needed.
        if entry == "GPU-":
            return None, "gives no digit of a UUID"
        if not all(gpu.uuid for gpu in gpus):
            return None, None  # a capture without UUIDs (topo -m alone) cannot tell
        wanted = entry.lower()
        found = [gpu for gpu in gpus if (gpu.uuid or "").lower().startswith(wanted)]
        if len(found) == 1:
            return (found[0].index, ""), None
        return None, "is the start of no GPU's UUID" if not found else "is ambiguous"
    if entry.startswith("MIG-"):
        for gpu in gpus:
            name = _mig_names(gpu).get(entry)
            if name:
                return (gpu.index, name), None
        if any(gpu.mig_enabled and not all(m.uuid for m in gpu.mig_devices) for gpu in gpus):
            return None, None  # MIG UUIDs not captured (nvidia-smi -q -x prints none)
        return None, "is no MIG device's UUID"
    m = _INDEX_RE.match(entry)
    if not m or (m.group(1) == "-" and int(m.group(2)) != 0):
        return None, "is no GPU index"
    index = int(m.group(2))
    if index >= len(gpus):
        return None, f"is no GPU index (the node has {plural(len(gpus), 'GPU')})"
    return ((gpus[index].index, "") if by_index else None), None


def _order_note(order: str | None, gpus: Sequence[Gpu]) -> tuple[bool, str]:
    """(whether an index names nvidia-smi's GPU of that index, and on what grounds)."""
    if order == PCI_ORDER:
        return True, ""
    shown = f"CUDA_DEVICE_ORDER={order}" if order else "CUDA_DEVICE_ORDER unset (FASTEST_FIRST)"
    names = {gpu.name for gpu in gpus}
    placeholder = any(gpu.name == f"GPU {gpu.index}" for gpu in gpus)  # no name captured
    if len(names) == 1 and not placeholder:
        return True, (
            f"; indices read in nvidia-smi's order, assuming {shown} keeps it because every GPU "
            f"is the same model, {gpus[0].name} (CUDA orders fastest first by a heuristic)"
        )
    models = "GPU models unknown" if placeholder else "GPUs of several models"
    return False, (
        f"; which ones cannot be known: {shown} orders fastest first by a heuristic, and "
        f"{models} (set CUDA_DEVICE_ORDER=PCI_BUS_ID, or name GPUs by UUID)"
    )


def parse_visibility(value: str, order: str | None, gpus: Sequence[Gpu]) -> GpuVisibility:
    """Pure: what CUDA_VISIBLE_DEVICES=`value` under CUDA_DEVICE_ORDER=`order` (None: unset)
    leaves of `gpus` (nvidia-smi's order), with a reason naming the variable."""
    gpus = sorted(gpus, key=lambda gpu: gpu.index)
    by_index, order_note = _order_note(order, gpus)
    shown = f"{VARIABLE}={value}" if value.strip() else f"{VARIABLE}={value!r}"
    found: list[_Device] = []
    unknown = 0
    named: set[object] = set()  # devices, and indices whose device is not known
    used_index = False
    stop = ""
    for raw in value.split(","):
        entry = raw.strip()
        device, why = _match(entry, gpus, by_index)
        if why is not None:
            stop = f"{entry!r}, which {why}" if entry else "an empty entry, which names no GPU"
            break
        index = _INDEX_RE.match(entry)
        used_index = used_index or index is not None
        key: object = device if device is not None or index is None else int(index.group(2))
        if key is not None:
            if key in named:
                return _hidden(value, order, f"{shown} hides every GPU: {entry!r} is named twice")
            named.add(key)
        if device is None:
            unknown += 1
        else:
            found.append(device)
    count = len(found) + unknown
    if count == 0:
        why = f": CUDA stops at {stop}" if value.strip() else ""
        return _hidden(value, order, f"{shown} hides every GPU{why}")
    indices = tuple(dict.fromkeys(gpu for gpu, _ in found))
    known = unknown == 0
    if known:
        listed = format_cpulist(indices) if len(indices) > 1 else str(indices[0])
        head = f"GPU{'s' if len(indices) > 1 else ''} {listed} of {len(gpus)}"
        mig = [name for _, name in found if name]
        if mig:
            head = f"{plural(len(mig), 'MIG device')} of {head}"
    else:
        head = f"{count} of {plural(len(gpus), 'GPU')}"
    reason = f"{head}: {shown}"
    if stop:
        reason += f" (CUDA stops at {stop})"
    if used_index and order_note:
        reason += order_note
    if not known and not (used_index and not by_index):
        reason += "; which ones cannot be known: the capture lists no UUIDs to match"
    return GpuVisibility(
        value=value,
        device_order=order,
        devices=count,
        gpus=indices if known and (by_index or not used_index) else None,
        mig_devices=tuple(name for _, name in found if name),
        reason=reason,
    )


def _hidden(value: str, order: str | None, reason: str) -> GpuVisibility:
    return GpuVisibility(value=value, device_order=order, devices=0, gpus=(), reason=reason)
