"""GPU memory for one instance: growth, a per-instance limit and the allocator.

TensorFlow reserves nearly all of a GPU's memory when it starts (gpu_device.cc: available
memory less `MinSystemMemory`), which is right for a process that owns the device and fatal for
the second of two processes sharing one. So instances that share a GPU, a MIG slice or the
memory of one MIG GPU instance (its compute instances share it: planner/gpu_units.py) get
TF_FORCE_GPU_ALLOW_GROWTH=true and a limit of their share of the device, less the memory
TensorFlow keeps free per process for the CUDA context and libraries; the limit is applied by
`hwtune.configure()` (tf.config.set_logical_device_configuration) and by tf_config.pbtxt
(gpu_options.per_process_gpu_memory_fraction, of the device's total memory).
"""

from __future__ import annotations

from hwtune.models.hardware import Hardware
from hwtune.models.profile import LeftOut, Setting
from hwtune.planner.instances import Slice
from hwtune.planner.knowledge import version_tuple

MEMORY_ENV = ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR")
MIB = 1 << 20
# gpu_cudamallocasync_allocator.cc refuses to start without memory pools: "request SM60+" and
# "request CUDA11.2+" (xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc).
ASYNC_MIN_CUDA = (11, 2)
ASYNC_MIN_CC = (6, 0)


def min_system_memory(available: int, cc_major: int | None) -> int:
    """What TensorFlow leaves free on a GPU for the CUDA context and libraries (bytes).

    MinSystemMemory in tensorflow/core/common_runtime/gpu/gpu_device.cc: 225 MiB below 2 GiB,
    else 500 MiB up to compute capability 6.x, 1050 MiB for 7.x, 1536 MiB for 8.x and 1800 MiB
    above; an unknown capability takes the largest.
    """
    if available < 2 << 30:
        return 225 * MIB
    if cc_major is None or cc_major > 8:
        return 1800 * MIB
    return {6: 500, 7: 1050, 8: 1536}.get(max(cc_major, 6), 500) * MIB


def plan_memory(
    hw: Hardware, mine: Slice, tf_cuda: str | None, no_gpu_reason: str
) -> tuple[dict[str, Setting], list[LeftOut], Setting | None]:
    """(environment, left out, the per-device memory limit in MiB) for this instance."""
    if not mine.gpus:
        return {}, [LeftOut(name, f"left out: {no_gpu_reason}") for name in MEMORY_ENV], None
    what = (
        mine.units[0].describe()
        if len(mine.units) == 1
        else f"GPUs {','.join(str(u.gpu.index) for u in mine.units)}"
    )
    memory = mine.gpu_memory_bytes
    # A device whose memory is unknown, where there is one, says so ("GPU memory unknown").
    basis = next(
        (u.memory_basis for u in mine.units if not u.memory_bytes), mine.units[0].memory_basis
    )
    shown = f"{memory // MIB} MiB, {basis}" if memory else basis
    if mine.sharers <= 1:
        alone = [
            LeftOut(
                "TF_FORCE_GPU_ALLOW_GROWTH",
                f"left out: no other instance shares {what} ({shown}); TensorFlow's default, "
                "reserving the device's memory at start, avoids fragmentation",
            ),
            LeftOut(
                "TF_GPU_ALLOCATOR",
                "left out: one process per device keeps TensorFlow's default BFC allocator",
            ),
        ]
        return {}, alone, Setting(None, f"{what}: this instance's alone ({shown})")
    n = mine.sharers
    env = {
        "TF_FORCE_GPU_ALLOW_GROWTH": Setting(
            "true",
            f"{n} instances share the memory of {what}: each grows its memory as it needs it "
            "instead of reserving most of the device at start (TensorFlow GPU guide, 'Limiting "
            "GPU memory growth': TF_FORCE_GPU_ALLOW_GROWTH=true)",
        )
    }
    left: list[LeftOut] = []
    allocator, why_not = _async_allocator(hw, mine, tf_cuda, n, what)
    if allocator is not None:
        env["TF_GPU_ALLOCATOR"] = allocator
    else:
        left.append(LeftOut("TF_GPU_ALLOCATOR", f"left out: {why_not}"))
    return env, left, _limit(mine, memory, shown, n, what)


def _limit(mine: Slice, memory: int | None, shown: str, n: int, what: str) -> Setting:
    if memory is None:
        return Setting(
            None,
            f"{n} instances share the memory of {what}, but it is unknown ({shown}): no limit, "
            "growth only — a capture with nvidia-smi -q -x gives it",
        )
    majors = [m[0] for u in mine.units if (m := version_tuple(u.gpu.compute_capability or ""))]
    # one unknown capability takes the largest reserve (min_system_memory(…, None))
    cc_major = min(majors) if len(majors) == len(mine.units) else None
    share = memory // n
    reserve = min_system_memory(share, cc_major)
    limit = max(share - reserve, 0) // MIB
    return Setting(
        limit,
        f"{n} instances share the memory of {what} ({shown}): each may use {limit} MiB, its "
        f"1/{n} share less the {reserve // MIB} MiB TensorFlow keeps free per process "
        "(MinSystemMemory, tensorflow/core/common_runtime/gpu/gpu_device.cc); applied by "
        "hwtune.configure() (tf.config.set_logical_device_configuration) and tf_config.pbtxt "
        "(per_process_gpu_memory_fraction)",
    )


def _async_allocator(
    hw: Hardware, mine: Slice, tf_cuda: str | None, n: int, what: str
) -> tuple[Setting | None, str]:
    driver = version_tuple(hw.cuda_driver_version or "")[:2]
    built = version_tuple(tf_cuda or "")[:2]
    ccs = [version_tuple(u.gpu.compute_capability or "")[:2] for u in mine.units]
    if len(driver) < 2:
        return None, (
            "the driver's CUDA version is unknown, so cuda_malloc_async (CUDA ≥ 11.2) cannot "
            "be vouched for; TensorFlow's BFC allocator enforces the limit"
        )
    if driver < ASYNC_MIN_CUDA or (len(built) == 2 and built < ASYNC_MIN_CUDA):
        return None, (
            f"cuda_malloc_async needs CUDA ≥ 11.2 (driver CUDA {hw.cuda_driver_version}, "
            f"TensorFlow CUDA {tf_cuda or 'unknown'})"
        )
    if any(len(cc) < 2 or cc < ASYNC_MIN_CC for cc in ccs):
        return (
            None,
            "cuda_malloc_async needs compute capability ≥ 6.0, which is not known for this GPU",
        )
    return Setting(
        "cuda_malloc_async",
        f"{n} instances share the memory of {what}: cudaMallocAsync allocates from the "
        "driver's memory pool and returns what an instance frees beyond its limit (the pool's "
        "release threshold) to the others, where the BFC allocator keeps all it ever grew "
        "to; the limit is then a release threshold, not a hard cap "
        "(xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc) — unset it for BFC's "
        f"hard cap. Supported: driver CUDA {hw.cuda_driver_version} and TensorFlow CUDA "
        f"{tf_cuda or 'unknown'} ≥ 11.2, compute capability ≥ 6.0",
    ), ""
