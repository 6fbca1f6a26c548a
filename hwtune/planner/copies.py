"""How many copies `--mode batch` runs when the user did not say.

Batch mode is for work whose requests or batches are independent (batch inference, scoring,
offline prediction): the job's throughput is the sum over copies, so the node is split into
copies, each with its own slice and pools, instead of one process whose intra-op threads wait
for each other at every op. `hwtune exec --mode batch -- CMD` starts them; an explicit
`--instances N`, a launcher's ranks or a measured count still win.

Rules (issue 17), in the order they bind:
- GPUs: one copy per GPU, or per MIG device, TensorFlow can use. Triton Inference Server's
  default is the same: "a single instance for each available GPU in the system" (Triton docs,
  Concurrent Model Execution).
- CPUs: one copy per `cores` physical cores, as OpenVINO's THROUGHPUT hint groups the cores into
  streams (src/plugins/intel_cpu/docs/performance_hint_and_threads_scheduling.md: 1 core per
  stream for models of least memory pressure, 2 for less, 3-5 for normal). OpenVINO measures a
  model's memory pressure; hwtune knows only the model kind, so a convolutional model gets 1
  core a copy and dense or unknown models 4, the middle of OpenVINO's 3-5 (PyTorch's run_cpu
  and the ITEX launcher also give an instance 4 cores in their latency mode).
- A CPU quota caps copies at its whole CPUs, one core's worth each; a copy with less idles.
- Memory: every copy loads TensorFlow and the model, so copies are capped at half the memory
  (the share tf.data's autotuner takes by default) over `COPY_BYTES`.
"""

from __future__ import annotations

from hwtune.models.hardware import Gpu, Hardware
from hwtune.models.profile import ModelKind, Setting
from hwtune.models.words import plural
from hwtune.planner import gpu_units
from hwtune.planner.data import usable_memory
from hwtune.planner.instances import physical_cores, usable_cpus

# Physical cores a copy gets, per model kind (see the module docstring for the sources).
CORES_PER_COPY: dict[ModelKind, int] = {"conv": 1, "dense": 4, "unknown": 4}
# Peak resident memory (VmHWM) of one copy of `hwtune tune`'s builtin:inference workload (a
# small Keras CNN exported as a SavedModel, batches of 256 images): 635 MiB, TF 2.21 with
# Keras 3, on a 2-vCPU EPYC Zen 4 VM. The TensorFlow runtime is most of it; a larger model
# adds its weights and activations on top, so the cap is a floor, not an estimate.
COPY_BYTES = 635 * 2**20
# The measurement behind the 1-core rule for convolutional models (bench/results/
# amd-epyc-znver4-2cpu-kvm-c81eefa.md and s7-tune-confirm-amd-epyc-znver4-2cpu-kvm.md).
MEASURED_COPIES = (
    "on a 2-vCPU EPYC Zen 4 VM (TF 2.21), two one-thread copies of a small CNN's SavedModel "
    "inference, each pinned to its own CPU, ran 1.17x [1.10-1.25] and, in a confirmation run, "
    "1.14x [1.06-1.23] the throughput of one process with two intra-op threads (24 paired "
    "rounds each)"
)


def batch_copies(hw: Hardware, model: ModelKind, tf_gpus: tuple[Gpu, ...]) -> Setting:
    """The number of copies batch mode plans, and why (`tf_gpus`: the GPUs TensorFlow can
    use, as the planner found them)."""
    cores = len(physical_cores(hw, usable_cpus(hw)))
    found, _ = gpu_units.units(tf_gpus, hw.gpu_driver) if tf_gpus else ([], [])
    if found:
        what = "MIG device" if any(unit.mig is not None for unit in found) else "GPU"
        count = len(found)
        why = [
            f"one copy per {what} TensorFlow can use ({plural(count, what)}), as Triton "
            "Inference Server gives a model one instance per available GPU by default (Triton "
            "docs, Concurrent Model Execution)"
        ]
        if cores < count:  # every copy needs a core of its own (planner/instances.py)
            count = max(1, cores)
            why.append(f"capped at {count}: copies never share a physical core")
    else:
        count, why = _cpu_copies(hw, model, cores)
    memory, basis = usable_memory(hw)
    if memory:
        fits = max(1, memory // 2 // COPY_BYTES)
        if fits < count:
            count = fits
            why.append(
                f"capped at {count} by memory: half of the {memory / 2**30:.1f} GiB {basis} "
                "over the "
                f"{COPY_BYTES // 2**20} MiB one TensorFlow copy of a small CNN peaked at (on a "
                "2-vCPU EPYC Zen 4 VM, TF 2.21)"
            )
    start = "; `hwtune exec --mode batch -- CMD` starts them" if count > 1 else ""
    return Setting(
        count,
        f"batch mode: {count} {'copy' if count == 1 else 'copies'} ({'; '.join(why)}){start}; "
        "`hwtune tune` measures other counts",
    )


def _cpu_copies(hw: Hardware, model: ModelKind, cores: int) -> tuple[int, list[str]]:
    """Copies on CPUs alone: by cores a copy for the model kind, capped by the CPU quota."""
    per_copy = CORES_PER_COPY[model]
    count = max(1, cores // per_copy)
    openvino = (
        "1 core a stream for models of least memory pressure"
        if per_copy == 1
        else "3-5 cores a stream for models of normal memory pressure"
    )
    kind = {"conv": "a convolutional model", "dense": "a dense model"}.get(
        model, "a model of unknown kind"
    )
    why = [
        f"{plural(cores, 'usable physical core')}, {plural(per_copy, 'core')} a copy for "
        f"{kind}, as OpenVINO's THROUGHPUT hint runs {openvino}"
    ]
    if model == "conv":
        why.append(MEASURED_COPIES)
    quota = hw.limits.effective_cpus if hw.limits.known else None
    if quota is not None and quota < cores and max(1, quota // per_copy) < count:
        count = max(1, quota // per_copy)
        why.append(f"capped at {count} by the CPU budget of {plural(quota, 'effective CPU')}")
    return count, why
