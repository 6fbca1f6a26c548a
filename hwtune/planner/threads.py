"""Intra-op and inter-op thread counts for one instance's slice (rules only; the planner layers
measured results and user overrides on top).

Intra-op: one thread per physical core of the slice, capped by the slice's effective CPUs
(affinity ∩ cpuset ∩ cgroup quota). SMT siblings are not counted: two GEMM/convolution threads
on one core share its vector units, and every CPU guide hwtune follows sizes compute pools by
physical cores (Intel's TF inference BKMs "exercise all the physical cores"; ONNX Runtime's
default intra-op count is the physical cores; PyTorch's CPU tuning guide: avoid logical
cores). Where SMT does help is the input pipeline, which waits on memory and I/O: tf.data's
private pool gets the siblings (see data.py). The tuner may still measure SMT for intra-op and
win (source "measured").

Hybrid parts: in latency mode only performance cores count (a single op is as slow as its
slowest shard; OpenVINO's LATENCY hint also schedules on P-cores); throughput uses all cores.

Inter-op: latency mode runs one op at a time with every intra-op thread (1, as the ITEX and
IPEX launchers and Intel's real-time-inference BKM use). Throughput mode depends on the runtime
the ops' threads come from:
- TensorFlow's own thread pool (stock wheels, oneDNN on Eigen): as many inter-op threads as
  intra-op threads. TensorFlow's performance guide gives both pools the logical CPUs by default
  and names "both pools equal to the number of physical cores" as the common alternative
  (tensorflow/docs site/en/r1/guide/performance/overview.md, "Optimizing for CPU"); sizing
  both from the slice's cores keeps TF's breadth while staying inside a quota. Two inter-op
  threads trained a transformer encoder block with XLA off 1.16× faster than one, and the
  other jobs measured were level within noise (`MEASURED_INTER_OP`).
- An OpenMP build (intel-tensorflow, `--config=mkl`): one op per socket the slice spans, the
  advice that guide and Intel Model Zoo's launch_benchmark give for MKL builds, where every op
  runs an OpenMP team over all intra-op threads and concurrent ops oversubscribe the cores;
  NUMA nodes when sockets are unknown; never more than intra-op threads.
"""

from __future__ import annotations

import dataclasses

from hwtune.models.hardware import Hardware
from hwtune.models.profile import Intent, Setting
from hwtune.models.words import plural
from hwtune.planner.instances import (
    Slice,
    cpus_assumed,
    cpus_named,
    kinds_note,
    sibling_note,
)

# bench/paired_arms.py, two inter-op threads against one with two intra-op threads, 16
# paired rounds per workload (bench/results/inter-op-amd-epyc-znver4-2cpu-kvm.md).
MEASURED_INTER_OP = (
    "two inter-op threads against one trained a transformer encoder block with XLA off 1.16x "
    "[1.08-1.25] faster, and were level within noise for a small CNN (1.02x [0.97-1.07]), a "
    "tf.data pipeline (0.95x [0.89-1.02]) and, with XLA, the transformer (1.01x [0.98-1.04]) "
    "and a 3x512 MLP (0.98x [0.92-1.04]) (16 paired rounds each on a 2-vCPU EPYC Zen 4 VM, "
    "TF 2.21)"
)


def intra_op(hw: Hardware, intent: Intent, mine: Slice) -> Setting:
    cores = list(mine.cores)
    hybrid_note = ""
    if intent.mode == "latency" and any(core.kind == "performance" for core in cores):
        others = [core for core in cores if core.kind != "performance"]
        cores = [core for core in cores if core.kind == "performance"]
        if others:
            hybrid_note = (
                f"; latency mode leaves out the {len(others)} efficiency cores (an op waits for "
                "its slowest shard; OpenVINO's LATENCY hint also uses P-cores)"
            )
    elif kinds_note(cores):
        # Throughput on a hybrid part: every core gets a thread, and the reason says which.
        hybrid_note = f"; a hybrid part: this slice holds {kinds_note(cores)}, each given a thread"
        if any(core.kind == "performance" for core in cores):
            hybrid_note += " in throughput mode (latency mode uses only the performance cores)"
    physical = len(cores)
    guessed = [core for core in cores if not core.known]
    per_core = hw.cpu.threads_per_core or 1
    assumed = cpus_assumed(hw)
    if guessed and per_core > 1 and not assumed:
        # No per-CPU core ids (an lscpu summary without its table): count cores from the
        # summary's threads per core rather than take every CPU for a core.
        physical = physical - len(guessed) + max(1, -(-len(guessed) // per_core))
        hybrid_note += (
            f"; per-CPU core ids unknown: {plural(len(guessed), 'CPU')} at {per_core} threads "
            "per core"
        )
    if any(core.inferred for core in cores):
        hybrid_note += f"; {sibling_note(hw)}"
    where = cpus_named(mine.cpus, assumed)
    if mine.numa_nodes:
        where += f", NUMA node{'s' if len(mine.numa_nodes) > 1 else ''} " + ",".join(
            str(n) for n in mine.numa_nodes
        )
    smt = sum(len(core.cpus) for core in cores) > physical and not guessed
    smt_note = (
        "; SMT siblings are left to tf.data: two GEMM threads on one core share its vector units"
        if smt
        else ""
    )
    if mine.budget < physical:
        return Setting(
            mine.budget,
            f"capped at the slice's {mine.budget_reason}, below its {physical} physical cores "
            f"({where}): more threads than CPU time only adds CFS throttling{hybrid_note}",
        )
    return Setting(
        physical,
        f"one thread per physical core: {physical} in this slice ({where}){smt_note}"
        f"{hybrid_note} (Intel TF BKMs; ONNX Runtime's default is physical cores)",
    )


def inter_op(
    hw: Hardware, intent: Intent, mine: Slice, intra: int, *, ceiling: int | None = None
) -> Setting:
    """`intra`: the intra-op threads planned (a user's or a measured count included);
    `ceiling`: the rule's own intra-op count (the slice's physical cores, or its CPU budget
    when that is smaller), which a larger given count does not raise the inter-op pool beyond."""
    if intent.mode == "latency" and mine.gpus:
        # Intel's one-inter-op-thread rule is for CPU inference; nothing backs it for a slice
        # whose math runs on GPUs, so the throughput rule holds there.
        throughput = dataclasses.replace(intent, mode="throughput")
        kept = inter_op(hw, throughput, mine, intra, ceiling=ceiling)
        count = len(mine.gpus)
        return Setting(
            kept.value,
            f"latency mode on a slice with {count} GPU{'s' if count > 1 else ''}: the "
            "one-inter-op-thread rule is for CPU inference, where each op uses every "
            f"intra-op thread; here the math runs on the GPU{'s' if count > 1 else ''} and the "
            "inter-op pool schedules ops around it (kernel launches, ops without a GPU "
            "kernel), so the throughput rule is kept — " + kept.reason,
        )
    if intent.mode == "latency":
        return Setting(
            1,
            "latency mode: one op at a time, each using every intra-op thread (Intel's "
            "real-time-inference BKM; the ITEX and IPEX launchers set 1)",
        )
    tf = hw.tensorflow
    if tf is None or tf.threading_runtime != "openmp":
        runtime = (
            "no TensorFlow found: planned for stock TensorFlow, whose ops run on its own pool"
            if tf is None
            else f"{tf.distribution} {tf.version} runs its ops on its own pool, no OpenMP"
        )
        value = min(intra, ceiling) if ceiling else intra
        capped = (
            f", capped at {value}, the intra-op count the rules give this slice (its physical "
            "cores or CPU budget): a larger intra-op count does not add concurrent ops"
            if value < intra
            else ""
        )
        return Setting(
            value,
            f"{intent.mode} mode: as many inter-op threads as intra-op threads ({intra}){capped}, "
            f"so independent ops run side by side ({runtime}; TensorFlow's performance guide: "
            "both pools default to the logical CPUs, or both equal the physical cores; its "
            "one-per-socket advice is for MKL builds); " + MEASURED_INTER_OP,
        )
    sockets = len(mine.sockets)
    if not sockets and hw.cpu.sockets and len(mine.cpus) == len(hw.cpu.online_cpus or mine.cpus):
        sockets = hw.cpu.sockets  # no per-CPU socket ids, but the slice is the whole machine
    if sockets:
        count, unit = sockets, "socket"
    elif mine.numa_nodes:
        count, unit = len(mine.numa_nodes), "NUMA node"
    else:
        count, unit = 1, "socket"
    value = max(1, min(count, intra))
    return Setting(
        value,
        f"{intent.mode} mode on an OpenMP build ({tf.distribution} {tf.version}): one concurrent "
        f"op per {unit} the slice spans ({plural(count, unit)}), as each op runs an OpenMP "
        "team over every intra-op thread (TensorFlow's performance guide for MKL builds; Intel "
        "Model Zoo: inter-op = number of sockets)"
        + (f", capped at the {intra} intra-op threads" if value < count else ""),
    )
