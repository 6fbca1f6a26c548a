"""tf.data options for one instance: the input pipeline gets the slice, not the host.

tf.data sizes its defaults from the host: `cpu_budget` from the schedulable cores, `ram_budget`
from half the RAM, interleave `cycle_length` from the CPU count
(tf.data.experimental.AutotuneOptions; tf.data.Dataset.interleave). In a container those are
the host's numbers, so hwtune passes the slice's effective CPUs and half of the cgroup memory
limit instead. The private thread pool includes SMT siblings: pipeline stages wait on memory
and I/O, which is where a second hardware thread per core pays off.
"""

from __future__ import annotations

from hwtune.models.hardware import Hardware
from hwtune.models.profile import Intent, Setting, TfData
from hwtune.models.words import plural
from hwtune.planner.instances import Slice

AUTOTUNE = -1  # tf.data.AUTOTUNE


def tf_data(hw: Hardware, intent: Intent, mine: Slice) -> TfData:
    cpus = mine.budget
    # Siblings only where the slice has them: a core with two CPUs, or CPUs without core ids
    # on a machine whose summary gives more than one thread per core (as threads.py counts).
    unknown = [core for core in mine.cores if not core.known]
    smt = any(len(core.cpus) > 1 for core in mine.cores) or (
        (hw.cpu.threads_per_core or 1) > 1 and len(unknown) > 1
    )
    pool = (
        ", SMT siblings included (input stages wait on memory and I/O, where SMT helps)"
        if smt
        else ": tf.data's own pool, sized to the slice rather than the host"
    )
    return TfData(
        private_threadpool_size=Setting(cpus, f"the slice's {mine.budget_reason}{pool}"),
        autotune_cpu_budget=Setting(
            cpus,
            f"the slice's {mine.budget_reason}; tf.data's default counts the host's cores",
        ),
        autotune_ram_budget=_ram_budget(hw, intent),
        parallel_calls=Setting(
            AUTOTUNE,
            "tf.data.AUTOTUNE: map parallelism tuned at run time within the CPU budget "
            "(tf.data performance guide)",
        ),
        interleave_cycle_length=Setting(
            cpus,
            f"the slice's {plural(cpus, 'effective CPU')}; tf.data's default cycle length is "
            "the host's CPU count",
        ),
        prefetch=Setting(
            AUTOTUNE,
            "tf.data.AUTOTUNE: prefetch depth tuned at run time so the next batch is ready "
            "when the step ends (tf.data performance guide)",
        ),
    )


def usable_memory(hw: Hardware) -> tuple[int | None, str]:
    """The memory a job can use (the cgroup limit where it is lower than RAM) and what it is,
    for reasons: tf.data's RAM budget and batch mode's copies (planner/copies.py) share it."""
    limit, cgroup = hw.limits.memory_bytes, hw.limits.memory_limit_bytes
    if limit is None:
        return hw.memory.total_bytes, "RAM"
    if cgroup is not None and limit == cgroup:
        return limit, "cgroup memory limit"
    if cgroup is None:
        return limit, "RAM (no cgroup memory limit)"
    return limit, "RAM (below the cgroup memory limit)"


def _ram_budget(hw: Hardware, intent: Intent) -> Setting:
    limit, basis = usable_memory(hw)
    if limit is None:
        return Setting(None, "memory size unknown: tf.data keeps its default (half of RAM)")
    share = limit // 2 // intent.instances
    split = f", split over {intent.instances} instances" if intent.instances > 1 else ""
    return Setting(
        share,
        f"half of the {_gib(limit)} {basis}, as tf.data's default takes half of RAM{split}",
    )


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"
