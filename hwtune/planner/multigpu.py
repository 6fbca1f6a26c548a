"""Distribution strategy, cross-device reduction and the GPU environment of one instance.

NCCL all-reduce is TensorFlow's default for MirroredStrategy on GPUs and the plan keeps it on
every topology: NCCL builds its rings and trees from the real links (NVLink, NVSwitch, PCIe,
the CPU interconnect), including the DGX-1 hybrid cube mesh. HierarchicalCopyAllReduce "is a
reduction created for Nvidia DGX-1 ... If you have different GPU inter-connections, it is
likely that it would be slower than tf.distribute.ReductionToOneDevice"
(tensorflow/python/distribute/cross_device_ops.py); the alternatives are for `hwtune tune` to
measure, not for a rule to guess. A MIG device is one CUDA device per process, so an instance
on a MIG slice runs OneDeviceStrategy and reduces nothing across slices.
"""

from __future__ import annotations

from itertools import combinations

from hwtune.models.hardware import Gpu, GpuVisibility
from hwtune.models.profile import Distribution, Intent, LeftOut, Setting
from hwtune.planner.instances import Slice

GPU_ENV = ("TF_GPU_THREAD_MODE", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")
NCCL_WHY = (
    "NCCL all-reduce, TensorFlow's default for MirroredStrategy on GPUs: NCCL routes its rings "
    "over whatever links exist; HierarchicalCopyAllReduce was made for the DGX-1 and "
    "tensorflow/python/distribute/cross_device_ops.py calls it likely slower elsewhere "
    "(`hwtune tune` can measure the alternatives)"
)


def link_kind(a: Gpu, b: Gpu) -> str | None:
    """How `a` reaches `b` in nvidia-smi topo terms (NV12, PIX, SYS…), from either side."""
    for src, dst in ((a, b), (b, a)):
        for link in src.links:
            if link.peer == dst.index:
                return (
                    f"NV{link.nvlinks}"
                    if link.nvlinks and not link.kind.startswith("NV")
                    else link.kind
                )
        if dst.index in src.nvlink_peers:
            return "NV"
    return None


def _links(gpus: tuple[Gpu, ...]) -> str:
    pairs = list(combinations(gpus, 2))
    kinds = sorted({link_kind(a, b) or "unknown" for a, b in pairs})
    nvlinked = sum(1 for a, b in pairs if (link_kind(a, b) or "").startswith("NV"))
    return f"{nvlinked} of {len(pairs)} GPU pairs NVLinked (links seen: {', '.join(kinds)})"


def _within(limit: str) -> str:
    """How CUDA_VISIBLE_DEVICES narrowed the GPUs, to end a reason with ("" where it did not)."""
    return f" ({limit})" if limit else ""


def distribution(mine: Slice, limit: str = "") -> Distribution | None:
    """The slice's strategy; `limit`: how CUDA_VISIBLE_DEVICES narrowed the GPUs, said in the
    strategy's reason ("" where it did not)."""
    gpus = mine.gpus
    if not gpus:
        return None
    indices = tuple(gpu.index for gpu in gpus)
    within = _within(limit)
    if mine.mig:
        unit = mine.units[0]
        return Distribution(
            strategy=Setting(
                "OneDeviceStrategy",
                f"{unit.describe()}: a CUDA process sees a single MIG device (NVIDIA MIG User "
                f"Guide, CUDA Device Enumeration), so no MirroredStrategy across slices{within}",
            ),
            cross_device_ops=Setting(
                "none", "one MIG device reduces nothing; NCCL does not span MIG slices"
            ),
            variable_placement=Setting("gpu", "variables live next to the only replica"),
            gpus=indices,
        )
    if len(gpus) == 1:
        return Distribution(
            strategy=Setting(
                "OneDeviceStrategy", f"one GPU in this slice (GPU {indices[0]}){within}"
            ),
            cross_device_ops=Setting("none", "a single device reduces nothing"),
            variable_placement=Setting("gpu", "variables live next to the only replica"),
            gpus=indices,
        )
    return Distribution(
        strategy=Setting(
            "MirroredStrategy",
            f"{len(gpus)} GPUs in this slice: synchronous data parallelism{within}",
        ),
        cross_device_ops=Setting("NcclAllReduce", f"{_links(gpus)}: {NCCL_WHY}"),
        variable_placement=Setting(
            "gpu",
            "MirroredStrategy keeps a copy of each variable on every GPU, updated in place after "
            "the all-reduce",
        ),
        gpus=indices,
    )


def gpu_env(
    intent: Intent,
    mine: Slice,
    no_gpu_reason: str,
    seen: GpuVisibility | None = None,
    limit: str = "",
) -> tuple[dict[str, Setting], list[LeftOut]]:
    """The GPU variables of this instance. `seen`: the caller's CUDA_VISIBLE_DEVICES as read
    (`Hardware.gpu_visibility`); `limit`: how it narrowed the GPUs ("" where it did not)."""
    if not mine.gpus:
        return {}, [LeftOut(name, f"left out: {no_gpu_reason}") for name in GPU_ENV]
    env = {
        "TF_GPU_THREAD_MODE": Setting(
            "gpu_private",
            "each GPU gets its own kernel-launch threads, so a busy CPU pool does not delay "
            "launches (TensorFlow GPU performance guide, TF_GPU_THREAD_MODE=gpu_private)",
        ),
    }
    left: list[LeftOut] = []
    within = _within(limit)
    unknown = seen is not None and seen.gpus is None
    if unknown:
        # The caller's indices are read in the caller's order: bus order would make them
        # name other GPUs, possibly ones outside its allocation.
        left.append(
            LeftOut(
                "CUDA_DEVICE_ORDER",
                "left out: PCI_BUS_ID would change which GPUs the caller's "
                f"CUDA_VISIBLE_DEVICES names{within}",
            )
        )
    else:
        env["CUDA_DEVICE_ORDER"] = Setting(
            "PCI_BUS_ID",
            "CUDA numbers GPUs fastest-first by default; PCI order matches nvidia-smi and NVML, "
            "so the indices hwtune plans with are the ones CUDA sees (CUDA environment variables)",
        )
    names = [unit.name for unit in mine.units if unit.name]
    if unknown:
        left.append(
            LeftOut(
                "CUDA_VISIBLE_DEVICES",
                "left out: the caller's CUDA_VISIBLE_DEVICES is kept, since no GPU it leaves "
                f"can be named for an instance{within}",
            )
        )
    elif intent.instances > 1 and len(names) == len(mine.units):
        shown = ",".join(names)
        plural = "s" if len(names) > 1 else ""
        indices = ",".join(str(unit.gpu.index) for unit in mine.units)
        what = mine.units[0].describe() if mine.mig else f"GPU{plural} {indices}"
        reason = f"instance {mine.index} of {intent.instances} owns {what}, next to its CPUs"
        if not mine.mig and shown != indices:
            reason += (
                f"; CUDA numbers {'them' if plural else 'it'} {shown}, counting only the GPUs "
                "this process may open (a Slurm step under ConstrainDevices, a device cgroup)"
            )
        if mine.mig:
            reason += (
                "; a MIG device is named by its UUID (NVIDIA MIG User Guide: MIG-<UUID> from "
                "driver R470, MIG-GPU-<UUID>/<GI>/<CI> before it)"
            )
        if mine.sharers > 1:
            reason += f", its memory shared by {mine.sharers} instances"
        if limit:
            reason += f"; divided among the GPUs the caller's CUDA_VISIBLE_DEVICES leaves{within}"
        env["CUDA_VISIBLE_DEVICES"] = Setting(shown, reason)
    elif mine.mig:
        left.append(
            LeftOut(
                "CUDA_VISIBLE_DEVICES",
                "left out: one instance runs on the first MIG device CUDA enumerates (a process "
                "sees one MIG device); a scheduler's own CUDA_VISIBLE_DEVICES is kept — use "
                "--instances N to give each MIG slice its own process",
            )
        )
    else:
        left.append(
            LeftOut(
                "CUDA_VISIBLE_DEVICES",
                "left out: one instance uses every GPU it can see; a scheduler's own "
                f"CUDA_VISIBLE_DEVICES (Slurm, Kubernetes) is kept{within}",
            )
        )
    return env, left
