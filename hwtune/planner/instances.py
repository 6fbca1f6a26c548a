"""Split the usable CPUs and GPUs of a node into `instances` slices, one per process.

Rules (issue 3): slices never share a physical core; slices follow NUMA nodes where the
counts allow (cores are dealt in NUMA-node order, so N instances on N equal nodes get one node
each); when GPUs exist, an instance takes the cores local to its GPUs first (the NUMA node
or `cpu_affinity` nvidia-smi reports), as PyTorch's run_cpu and NVIDIA's guidance bind data
loaders next to their GPU. GPUs are dealt as units (planner/gpu_units.py): whole GPUs, or one
MIG device per instance when a GPU is in MIG mode. Each slice also gets its share of the CPU
budget: with a cgroup quota, `limits.effective_cpus` is split in proportion to the slice's CPUs.

Pinning (issue 17, `pinning()`): N > 1 instances are each pinned to their slice, as Intel's
multi-instance launchers bind them (numactl --physcpubind, or --cpunodebind/--membind for whole
NUMA nodes). One-CPU slices included: a paired test of pinned against unpinned one-thread
copies found pinning level or ahead for every workload measured (see `MEASURED_PINNING`).
Where no CPU list was detected (`cpus_assumed`) nothing is pinned: the numbers are made up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hwtune.errors import PlanError
from hwtune.models.cpulist import MAX_CPU, name_cpus
from hwtune.models.hardware import Gpu, Hardware, LogicalCpu
from hwtune.models.overrides import FROM_LAUNCHER, describe_origin
from hwtune.models.profile import InstanceSlice
from hwtune.models.words import plural
from hwtune.planner import gpu_units
from hwtune.planner.gpu_units import GpuUnit
from hwtune.probes.cuda_visible import cuda_ordinals


@dataclass(frozen=True, slots=True)
class Core:
    """One physical core as far as this process may use it: its usable logical CPUs."""

    cpus: tuple[int, ...]
    node: int | None
    socket: int | None
    kind: str | None
    known: bool = True  # False: no topology for this CPU, so it stands for itself
    # Siblings paired by numbering (`sibling_offset`), not read from per-CPU core ids.
    inferred: bool = False


@dataclass(frozen=True, slots=True)
class Slice:
    """An instance's share: its cores, its GPUs and its CPU budget (logical CPUs, quota-capped)."""

    index: int
    cores: tuple[Core, ...]
    gpus: tuple[Gpu, ...]
    budget: int  # effective CPUs of this slice: what its thread pools may use at once
    budget_reason: str
    units: tuple[GpuUnit, ...] = ()  # whole GPUs or one MIG device (planner/gpu_units.py)
    sharers: int = 0  # how many instances share this slice's GPU or MIG device
    cpus_assumed: bool = False  # `cpus_assumed(hw)`: the CPU numbers are made up

    @property
    def mig(self) -> bool:
        return any(unit.mig is not None for unit in self.units)

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(cpu for core in self.cores for cpu in core.cpus))

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted({core.node for core in self.cores if core.node is not None}))

    @property
    def sockets(self) -> tuple[int, ...]:
        return tuple(sorted({core.socket for core in self.cores if core.socket is not None}))

    @property
    def gpu_memory_bytes(self) -> int | None:
        """The least memory of this slice's devices; None when any device's is unknown (the
        least of the others could be more than that device has)."""
        sizes = [unit.memory_bytes for unit in self.units]
        return min(size for size in sizes if size) if sizes and all(sizes) else None

    def to_model(self) -> InstanceSlice:
        return InstanceSlice(
            index=self.index,
            cpus=self.cpus,
            numa_nodes=self.numa_nodes,
            gpus=tuple(gpu.index for gpu in self.gpus),
            devices=tuple(unit.name or unit.describe() for unit in self.units),
            gpu_memory_bytes=self.gpu_memory_bytes,
            cpus_assumed=self.cpus_assumed,
        )


def usable_cpus(hw: Hardware) -> tuple[int, ...]:
    """online ∩ affinity ∩ cpuset as the limits probe saw it, with fallbacks for sparse input."""
    if hw.limits.usable_cpus:
        return tuple(sorted(hw.limits.usable_cpus))
    if hw.cpu.online_cpus:
        return tuple(sorted(hw.cpu.online_cpus))
    # Capped at MAX_CPU, as every CPU list is: a model checked by models.hardware_checks never
    # counts more, and an unchecked one must not lay out 10^8 CPUs.
    count = hw.cpu.logical_cpus or max(hw.limits.effective_cpus, 1)
    return tuple(range(min(count, MAX_CPU)))


def cpus_assumed(hw: Hardware) -> bool:
    """Whether `usable_cpus` made its list up: no usable, affinity, cpuset or online list was
    detected, so it numbers as many CPUs as were counted (or assumed) from 0."""
    return not hw.limits.usable_cpus and not hw.cpu.online_cpus


def assumed_note(count: int) -> str:
    """How a reason names a slice whose CPUs were assumed, as `hwtune detect` says it."""
    return f"no CPU list known: {plural(count, 'CPU')} assumed"


def cpus_named(cpus: Sequence[int], assumed: bool = False) -> str:
    """How reasons, errors and the plan's instance row name a list of CPUs: "CPUs 0-3", "CPU 5",
    or, where no CPU list was detected, the count assumed (their numbers would read as
    detected)."""
    if assumed:
        return assumed_note(len(cpus))
    return name_cpus(cpus)


def sibling_offset(hw: Hardware) -> int | None:
    """k where CPU n and n + k are SMT siblings, for an x86 machine without per-CPU core ids
    whose NUMA lists show that numbering; None where nothing shows it.

    x86 firmware lists the first thread of every core before any second thread, and Linux
    numbers CPUs in that order, so two-thread cores pair n with n + logical/2. Every capture
    with per-CPU core ids and uniform SMT reads so (util-linux's epyc_7451: CPU n and n + 48 of
    96 share a core, its NUMA lists 0-5,48-53 ...), but not all machines do: a hybrid Meteor
    Lake numbers a P-core's threads 1,2, and QEMU guests number siblings next to each other. So
    the pairing is taken only where the NUMA lists show it: two or more nodes, each holding
    n + k exactly when it holds n (a node of adjacent siblings would be one run, 0-43, not two
    halves). One node or no node lists: None, and each CPU stands for itself.
    """
    cpu = hw.cpu
    if cpu.arch != "x86_64" or cpu.threads_per_core != 2 or cpu.core_types:
        return None
    everything = set(cpu.online_cpus) or set(range(cpu.logical_cpus or 0))
    if not everything or len(everything) % 2 or everything != set(range(len(everything))):
        return None
    k = len(everything) // 2
    nodes = [set(node.cpus) for node in hw.numa if node.cpus]
    if len(nodes) < 2 or set().union(*nodes) != everything:
        return None
    for members in nodes:
        if any((n + k in members) != (n in members) for n in range(k)):
            return None
    return k


def physical_cores(hw: Hardware, cpus: tuple[int, ...]) -> list[Core]:
    """Group `cpus` into physical cores (SMT siblings share a core index), in NUMA order."""
    topology: dict[int, LogicalCpu] = {lc.cpu: lc for lc in hw.cpu.topology}
    node_of: dict[int, int] = {}
    for numa_node in hw.numa:
        for cpu in numa_node.cpus:
            node_of.setdefault(cpu, numa_node.id)
    offset = (
        sibling_offset(hw) if not any(lc.core is not None for lc in topology.values()) else None
    )
    groups: dict[tuple[object, ...], list[int]] = {}
    info: dict[tuple[object, ...], tuple[int | None, int | None, str | None]] = {}
    for cpu in cpus:
        lc = topology.get(cpu)
        node = lc.node if lc is not None and lc.node is not None else node_of.get(cpu)
        if lc is not None and lc.core is not None:
            key: tuple[object, ...] = ("core", lc.socket, lc.core)
        elif offset is not None:  # no core ids, but the numbering shows the siblings
            key = ("pair", cpu % offset)
        else:  # no topology for this CPU: count it as its own core (no SMT assumed)
            key = ("cpu", cpu)
        groups.setdefault(key, []).append(cpu)
        info.setdefault(key, (node, lc.socket if lc else None, lc.kind if lc else None))
    cores = [
        Core(
            cpus=tuple(sorted(members)),
            node=info[key][0],
            socket=info[key][1],
            kind=info[key][2],
            known=key[0] != "cpu",
            inferred=key[0] == "pair",
        )
        for key, members in groups.items()
    ]
    cores.sort(key=lambda c: (_order(c.node), _order(c.socket), c.cpus[0]))
    return cores


def _too_many(instances: int, cores: int, where: str, count_from: str | None) -> PlanError:
    """More instances than usable cores, named by what set the count: a flag or keyword as
    typed; otherwise (a config file, HWTUNE_INSTANCES, the launcher's ranks per node, which
    the user may not know set it) its origin leads the message."""
    usable = "1 is usable" if cores == 1 else f"{cores} are usable"
    message = f"{instances} instances need {instances} physical cores, but only {usable} ({where})"
    origin = count_from or "--instances"  # no origin: given to plan() as a flag would be
    if not origin.startswith(("--", "configure(")):
        message = f"{describe_origin(origin, 'instances')}: {message}"
    if origin.endswith(FROM_LAUNCHER):
        fewer = f"start at most {cores} ranks on this node"
    elif origin.startswith("configure("):
        fewer = f"use instances={cores} or fewer"
    else:
        fewer = f"use --instances {cores} or fewer"
    return PlanError(message, hint=f"{fewer}: instances never share a core")


def _order(value: int | None) -> int:
    return value if value is not None else -1


def split(
    hw: Hardware, instances: int, gpus: tuple[Gpu, ...], count_from: str | None = None
) -> tuple[Slice, ...]:
    """Every instance's slice. Raises PlanError when instances outnumber the usable cores, or
    would have to share MIG slices nobody can name (planner/gpu_units.py). `count_from`: where
    the count came from (Overrides.origin), to name the launcher's variable when it set it."""
    cpus = usable_cpus(hw)
    cores = physical_cores(hw, cpus)
    assumed = cpus_assumed(hw)
    if instances > len(cores):
        raise _too_many(instances, len(cores), cpus_named(cpus, assumed), count_from)
    ordered = tuple(sorted(gpus, key=lambda g: (_order(g.numa_node), g.index)))
    found, _ = gpu_units.units(ordered, hw.gpu_driver, cuda_ordinals(hw.gpus))
    unit_shares, sharers = gpu_units.deal(found, instances)
    gpu_shares = [_parents(share) for share in unit_shares]
    sizes = [
        len(cores) // instances + (1 if i < len(cores) % instances else 0)
        for i in range(instances)
    ]
    taken: set[int] = set()
    slices: list[Slice] = []
    for index in range(instances):
        local = _local_cpus(gpu_shares[index])
        preferred = [
            i
            for i, core in enumerate(cores)
            if i not in taken and local is not None and _is_local(core, local)
        ]
        rest = [i for i in range(len(cores)) if i not in taken and i not in preferred]
        chosen = (preferred + rest)[: sizes[index]]
        taken.update(chosen)
        mine = tuple(cores[i] for i in sorted(chosen))
        budget, reason = _budget(hw, mine, len(cpus), instances)
        slices.append(
            Slice(
                index,
                mine,
                gpu_shares[index],
                budget,
                reason,
                units=unit_shares[index],
                sharers=sharers[index],
                cpus_assumed=assumed,
            )
        )
    return tuple(slices)


def _parents(share: tuple[GpuUnit, ...]) -> tuple[Gpu, ...]:
    """The physical GPUs under a share of units, once each, in order."""
    seen: dict[int, Gpu] = {}
    for unit in share:
        seen.setdefault(unit.gpu.index, unit.gpu)
    return tuple(seen.values())


def _local_cpus(gpus: tuple[Gpu, ...]) -> tuple[set[int], set[int]] | None:
    """(CPUs, NUMA nodes) local to these GPUs, or None when nothing is known."""
    cpus = {cpu for gpu in gpus for cpu in gpu.cpu_affinity}
    nodes = {gpu.numa_node for gpu in gpus if gpu.numa_node is not None}
    return (cpus, nodes) if cpus or nodes else None


def _is_local(core: Core, local: tuple[set[int], set[int]]) -> bool:
    cpus, nodes = local
    if cpus:
        return set(core.cpus) <= cpus
    return core.node in nodes


def _budget(
    hw: Hardware, cores: tuple[Core, ...], usable_count: int, instances: int
) -> tuple[int, str]:
    logical = sum(len(core.cpus) for core in cores)
    measured = hw.limits.effective_cpus if hw.limits.known else usable_count
    effective = max(1, min(measured or usable_count, usable_count))
    if effective >= usable_count:
        if cpus_assumed(hw):
            return logical, f"{plural(logical, 'CPU')} ({assumed_note(logical)})"
        return logical, plural(logical, "usable CPU")
    # A quota is shared by every process of the cgroup: each slice gets its proportion.
    share = max(1, effective * logical // usable_count)
    basis = hw.limits.effective_cpus_reason or plural(effective, "effective CPU")
    if instances == 1:
        return min(logical, share), f"{plural(min(logical, share), 'effective CPU')} ({basis})"
    return (
        min(logical, share),
        f"{min(logical, share)} of {plural(effective, 'effective CPU')}, in proportion to this "
        f"slice's {logical} of {usable_count} usable CPUs ({basis})",
    )


# Why one-CPU slices are pinned too. Two copies of each built-in workload, one intra-op and
# one inter-op thread each, pinned to one CPU each against the same two copies unpinned,
# 16 paired rounds per workload (bench/paired_arms.py; bench/results/
# pinning-amd-epyc-znver4-2cpu-kvm.md). The older report that pinning cost 0.61-0.86x for two
# CNN jobs (issue 17, unpaired rounds on a machine that swings ±20% between minutes) did not
# reproduce: paired, the CNN pair was level. A pinned process also sizes TensorFlow's pools,
# tf.data's CPU budget among them, from its affinity (tsl port.cc NumSchedulableCPUs reads
# sched_getaffinity), which is the likely cause of the pipeline's gain. The full-benchmark
# figures: bench/results/amd-epyc-znver4-2cpu-kvm-3pass.md (S4 and S8, the folklore recipe's
# pinned copies) and bench/results/amd-epyc-znver4-2cpu-kvm-pinned.md. Reasons state the
# figures, not these paths: bench/ is not in the installed package.
MEASURED_PINNING = (
    "on a 2-vCPU EPYC Zen 4 VM (KVM, TF 2.21), two copies of a job, each with one intra-op "
    "thread and pinned to its own CPU, against the same copies left unpinned, 16 paired rounds: "
    "a tf.data pipeline 1.27x [1.23-1.31], a transformer block 1.00x [0.96-1.04], a CNN 0.99x "
    "[0.97-1.02], batch inference 1.01x [1.00-1.02]; in a full benchmark on the same VM (24 "
    "paired rounds), copies set up as TensorFlow's and Intel's CPU guides advise, each bound "
    "to its own cores with numactl, ran at 1.04x [1.01-1.06] of unpinned copies for two MLPs "
    "and 1.01x [0.99-1.04] for a CNN beside an MLP, and with hwtune's copies pinned too, both "
    "were level with that recipe (16 paired rounds)"
)


# Why nothing is pinned where detection found no CPU list (`cpus_assumed`).
ASSUMED_PINNING = (
    "no CPU list was detected, so there is nothing true to pin to (CPU numbers counted from 0 "
    "could name CPUs this machine lacks)"
)


@dataclass(frozen=True, slots=True)
class Pinning:
    """Whether `hwtune exec` (and the tuner's plan configuration) pins the instances."""

    pinned: bool
    reason: str


def pinning(hw: Hardware, slices: Sequence[Sequence[int]]) -> Pinning:
    """The pinning rule for instances on these slices (each given by its CPUs).

    One instance is pinned to the usable CPUs (its affinity as it already is). Several are
    each pinned to their slice: to whole NUMA nodes, memory bound there, where every slice is
    whole nodes of a multi-node machine; to their cores otherwise, however few. None is pinned
    where no CPU list was detected (`cpus_assumed`): the slices' CPU numbers are made up, and
    sched_setaffinity would refuse those the machine lacks (EINVAL) or bind to CPUs nobody saw.
    """
    if cpus_assumed(hw):
        who = (
            "one instance, left unpinned (its affinity as it is)"
            if len(slices) <= 1
            else f"the {len(slices)} instances left unpinned, their thread pools still capped "
            "to their slices"
        )
        return Pinning(False, f"{who}: {ASSUMED_PINNING}")
    if len(slices) <= 1:
        return Pinning(True, "one instance: it keeps the usable CPUs (affinity ∩ cpuset)")
    if len(hw.numa) > 1 and all(_whole_nodes(hw, cpus) for cpus in slices):
        return Pinning(
            True,
            f"each of the {len(slices)} instances pinned to whole NUMA nodes, its memory bound "
            "there: remote memory costs bandwidth and latency (numactl's --cpunodebind/"
            "--membind, as Intel's multi-instance launchers use)",
        )
    layouts = [physical_cores(hw, tuple(sorted(cpus))) for cpus in slices]
    cores = [core for layout in layouts for core in layout]
    smallest = min(len(layout) for layout in layouts)
    if any(not core.known for core in cores):
        # Without core ids a CPU stands for itself: two instances may hold siblings of one core.
        fewest = min(sum(len(core.cpus) for core in layout) for layout in layouts)
        own = (
            f"its own {_cpus(fewest)} (per-CPU core ids unknown: SMT siblings of one core may "
            "go to different instances)"
        )
    else:
        own = f"its own {_cores(smallest)} (never shared"
        if any(core.inferred for core in cores):
            own += f"; {sibling_note(hw)}"
        own += ")"
    kinds = [kinds_note(layout) for layout in layouts]
    if any(kinds):
        # A hybrid part: cores are dealt in order, so the slices need not be alike.
        own += "; on this hybrid part " + "; ".join(
            f"instance {index} has {note}" for index, note in enumerate(kinds) if note
        )
        if len(set(kinds)) > 1:
            own += " (an E-core runs an op's shard slower than a P-core)"
    return Pinning(
        True,
        f"each of the {len(slices)} instances pinned to {own}, as Intel's multi-instance "
        "launchers bind them (numactl --physcpubind): a pinned copy sizes TensorFlow's pools, "
        "tf.data's included, to its CPUs instead of the machine's, and does not migrate onto "
        f"its neighbours' CPUs; {MEASURED_PINNING}",
    )


def kinds_note(cores: Sequence[Core]) -> str:
    """What a hybrid part's slice holds: "6 performance cores and 2 efficiency cores"; "" where
    no core kind is known (not a hybrid part)."""
    counts: dict[str, int] = {}
    for core in cores:
        if core.kind is not None:
            counts[core.kind] = counts.get(core.kind, 0) + 1
    order = ("performance", "efficiency", "low-power-efficiency", "unknown")
    parts = [
        f"{counts[kind]} {kind} core{'s' if counts[kind] != 1 else ''}"
        for kind in order
        if counts.get(kind)
    ]
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts)


def _cores(count: int) -> str:
    return "physical core" if count == 1 else f"{count}+ physical cores"


def _cpus(count: int) -> str:
    return "logical CPU" if count == 1 else f"{count}+ logical CPUs"


def sibling_note(hw: Hardware) -> str:
    """How inferred siblings were paired, for reasons (see `sibling_offset`)."""
    k = sibling_offset(hw)
    return (
        f"per-CPU core ids unknown: CPU n and n+{k} taken as SMT siblings, the numbering x86 "
        "firmware gives and this machine's NUMA lists show"
    )


def _whole_nodes(hw: Hardware, cpus: Sequence[int]) -> bool:
    """Whether `cpus` is one or more whole NUMA nodes (as far as their CPUs are usable)."""
    usable = set(usable_cpus(hw))
    mine = set(cpus)
    nodes = [set(node.cpus) & usable for node in hw.numa]
    touched = [node for node in nodes if node & mine]
    return bool(touched) and all(node <= mine for node in touched)
