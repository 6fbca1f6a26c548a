"""Distribution strategy, cross-device reduction and GPU environment from the link matrix.

NCCL all-reduce is the fast path where every pair of GPUs is NVLinked; over PCIe and the CPU
interconnect TensorFlow's own guidance is HierarchicalCopyAllReduce (tf.distribute
MirroredStrategy docs: "NcclAllReduce ... HierarchicalCopyAllReduce ... for when NCCL is not
ideal", as on PCIe-only multi-GPU boxes).
"""

from __future__ import annotations

from itertools import combinations

from hwtune.models.hardware import Gpu
from hwtune.models.profile import Distribution, Intent, LeftOut, Setting
from hwtune.planner.instances import Slice

GPU_ENV = ("TF_GPU_THREAD_MODE", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")


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


def all_nvlinked(gpus: tuple[Gpu, ...]) -> bool:
    return all((link_kind(a, b) or "").startswith("NV") for a, b in combinations(gpus, 2))


def distribution(gpus: tuple[Gpu, ...]) -> Distribution | None:
    if not gpus:
        return None
    indices = tuple(gpu.index for gpu in gpus)
    if len(gpus) == 1:
        return Distribution(
            strategy=Setting("OneDeviceStrategy", f"one GPU in this slice (GPU {indices[0]})"),
            cross_device_ops=Setting("none", "a single device reduces nothing"),
            variable_placement=Setting("gpu", "variables live next to the only replica"),
            gpus=indices,
        )
    pairs = list(combinations(gpus, 2))
    unlinked = [(a.index, b.index, link_kind(a, b)) for a, b in pairs]
    unlinked = [p for p in unlinked if not (p[2] or "").startswith("NV")]
    if not unlinked:
        ops = Setting(
            "NcclAllReduce",
            f"all {len(pairs)} GPU pairs are NVLinked: NCCL all-reduces over NVLink",
        )
    else:
        a, b, kind = unlinked[0]
        ops = Setting(
            "HierarchicalCopyAllReduce",
            f"{len(unlinked)} of {len(pairs)} GPU pairs are not NVLinked (GPU {a}↔{b}: "
            f"{kind or 'link unknown'}): hierarchical copy avoids NCCL rings over PCIe/SMP "
            "(tf.distribute: for when NCCL is not ideal)",
        )
    return Distribution(
        strategy=Setting(
            "MirroredStrategy", f"{len(gpus)} GPUs in this slice: synchronous data parallelism"
        ),
        cross_device_ops=ops,
        variable_placement=Setting(
            "gpu",
            "MirroredStrategy keeps a copy of each variable on every GPU, updated in place after "
            "the all-reduce",
        ),
        gpus=indices,
    )


def gpu_env(
    intent: Intent, mine: Slice, no_gpu_reason: str
) -> tuple[dict[str, Setting], list[LeftOut]]:
    if not mine.gpus:
        return {}, [LeftOut(name, f"left out: {no_gpu_reason}") for name in GPU_ENV]
    env = {
        "TF_GPU_THREAD_MODE": Setting(
            "gpu_private",
            "each GPU gets its own kernel-launch threads, so a busy CPU pool does not delay "
            "launches (TensorFlow GPU performance guide, TF_GPU_THREAD_MODE=gpu_private)",
        ),
        "CUDA_DEVICE_ORDER": Setting(
            "PCI_BUS_ID",
            "CUDA numbers GPUs fastest-first by default; PCI order matches nvidia-smi and NVML, "
            "so the indices hwtune plans with are the ones CUDA sees (CUDA environment variables)",
        ),
    }
    left: list[LeftOut] = []
    indices = ",".join(str(gpu.index) for gpu in mine.gpus)
    if intent.instances > 1:
        env["CUDA_VISIBLE_DEVICES"] = Setting(
            indices,
            f"instance {mine.index} of {intent.instances} owns GPU {indices}, next to its CPUs",
        )
    else:
        left.append(
            LeftOut(
                "CUDA_VISIBLE_DEVICES",
                "left out: one instance uses every GPU it can see; a scheduler's own "
                "CUDA_VISIBLE_DEVICES (Slurm, Kubernetes) is kept",
            )
        )
    return env, left
