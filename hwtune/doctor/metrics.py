"""Rates per thread group over the sampling window: a pure function of a sample set.

Every figure is in CPUs (seconds per wall-clock second). "Demand" is time on a CPU plus time
runnable but waiting for one (schedstat), so a thread that wants a CPU counts fully however
loaded the machine is; where schedstat is missing, demand falls back to CPU time.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from hwtune.apply.verify import INTER_OP_THREAD
from hwtune.doctor.samples import SampleSet, ThreadSample

# Thread groups. TensorFlow names its inter-op pool "tf_Compute" (tsl thread::ThreadPool
# prefixes "tf_"); threads named "tf_data…" count as tf.data's (TF 2.21 names none: its
# private pool's threads are unnamed). The Eigen intra-op pool and threads started through
# Env::StartThread keep the process's name.
MAIN, INTER_OP, TF_DATA, UNNAMED, OTHER_TF = "main", "inter_op", "tf_data", "unnamed", "other_tf"
GROUP_NAMES = {
    MAIN: "Python main thread",
    INTER_OP: "inter-op pool (tf_Compute)",
    TF_DATA: "tf.data private pool (tf_data*)",
    UNNAMED: "unnamed threads (intra-op Eigen pool, tf.data runners, BLAS)",
    OTHER_TF: "other TensorFlow threads",
}
# Kernel wait channels of a thread sleeping or waiting for I/O, not on a lock (futex) or in
# an event loop: time.sleep (hrtimer_nanosleep/do_nanosleep), disk (io_schedule, folio and
# page waits), sockets and pipes.
# Of those, the timer sleeps: a thread in one waits for the clock, not for data, so it counts
# only if it also ran in the window (see measure()). Python 3.10's time.sleep is a select()
# with no descriptors, which waits in poll_schedule_timeout (3.11 on: clock_nanosleep); a
# poll() or select() with descriptors waits there too, and counts the same way.
TIMER_WAITS = ("nanosleep", "poll_schedule_timeout")
INPUT_WAITS = (
    *TIMER_WAITS,
    "io_schedule",
    "folio_wait",
    "wait_on_page",
    "sk_wait",
    "tcp_recv",
    "unix_stream",
    "pipe_read",
    "wait_woken",
)
MIN_PERIODS = 5  # fewer CFS periods than this say nothing about throttling


@dataclass(frozen=True)
class Metrics:
    window_s: float
    budget: int
    # What the job can get: the budget, or the cgroup quota where it is lower (0.5 CPUs of a
    # quota are 0.5, where the budget floors them to 1 for sizing pools).
    capacity: float
    busy: dict[str, float]  # group -> CPUs used
    demand: dict[str, float]  # group -> CPUs wanted (used + waiting)
    threads: dict[str, int]  # group -> thread count in the last sample
    runnable: float  # threads in state R, averaged over samples
    input_waiters: float  # threads sleeping or in I/O waits, averaged over samples
    throttled_share: float | None  # of CFS periods
    throttled_s: float | None
    periods: int
    gpu_util: float | None  # mean percent over GPUs and samples
    gpu_memory: float | None  # mean share of GPU memory used
    schedstat: bool
    steps: int = 0  # training steps that ended in the window (Keras callback)
    step_median_s: float | None = None  # median time between two step ends

    @property
    def compute(self) -> float:
        return self.demand[INTER_OP] + self.demand[UNNAMED]

    @property
    def total(self) -> float:
        return sum(self.demand.values())

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
        data["compute_demand"] = round(self.compute, 3)
        data["total_demand"] = round(self.total, 3)
        return data


def group_of(thread: ThreadSample, pid: int, comm: str) -> str:
    if thread.tid == pid:
        return MAIN
    if thread.comm == INTER_OP_THREAD:
        return INTER_OP
    if thread.comm.startswith("tf_data"):
        return TF_DATA
    if thread.comm.startswith("tf_"):
        return OTHER_TF
    return UNNAMED


def _ran(start: ThreadSample, end: ThreadSample) -> bool:
    """Whether a thread was on a CPU between two samples of it."""
    if start.run_ns is not None and end.run_ns is not None:
        return end.run_ns > start.run_ns
    return end.cpu_ticks > start.cpu_ticks


def _waits_for_input(thread: ThreadSample, ran: set[int]) -> bool:
    """Whether a thread, in one sample, waits for input: in a disk wait (D), or asleep in one
    of INPUT_WAITS, a timer sleep only if the thread is in `ran` (it ran in the window)."""
    if thread.state == "D":
        return True
    if thread.state != "S" or not any(w in thread.wchan for w in INPUT_WAITS):
        return False
    return thread.tid in ran or not any(w in thread.wchan for w in TIMER_WAITS)


def _r(value: float) -> float:
    return round(value, 3)


def measure(data: SampleSet) -> Metrics | None:
    """Rates per group over the window; None with fewer than two samples."""
    samples = data.samples
    if len(samples) < 2:
        return None
    window = samples[-1].time - samples[0].time
    if window <= 0:
        return None
    first: dict[int, ThreadSample] = {}
    last: dict[int, ThreadSample] = {}
    for sample in samples:
        for thread in sample.threads:
            first.setdefault(thread.tid, thread)
            last[thread.tid] = thread
    groups = (MAIN, INTER_OP, TF_DATA, UNNAMED, OTHER_TF)
    busy = dict.fromkeys(groups, 0.0)
    demand = dict.fromkeys(groups, 0.0)
    schedstat = all(t.run_ns is not None for t in last.values())
    for tid, end in last.items():
        start = first[tid]
        group = group_of(end, data.pid, data.comm)
        if schedstat and start.run_ns is not None and end.run_ns is not None:
            used = (end.run_ns - start.run_ns) / 1e9
            waited = ((end.wait_ns or 0) - (start.wait_ns or 0)) / 1e9
        else:
            used = (end.cpu_ticks - start.cpu_ticks) / data.clock_ticks
            waited = 0.0
        busy[group] += max(0.0, used) / window
        demand[group] += max(0.0, used + waited) / window
    counts = dict.fromkeys(groups, 0)
    for thread in samples[-1].threads:
        counts[group_of(thread, data.pid, data.comm)] += 1
    runnable = sum(sum(t.state == "R" for t in s.threads) for s in samples) / len(samples)
    # A thread in a timer sleep counts as waiting for input only if it ran in the window: one
    # parked in a single long sleep (Keras's fit starts one, in hrtimer_nanosleep in every
    # sample with 53 µs of CPU since it started, TF 2.21) waits for nothing the job needs.
    # A socket, pipe or disk wait counts whether or not the thread ran: a reader blocked on a
    # slow source for the whole window is the input stall itself. Disk waits (D) count.
    ran = {tid for tid, end in last.items() if _ran(first[tid], end)}
    ran |= {t.tid for s in samples for t in s.threads if t.state != "S"}
    waiters = sum(
        sum(t.tid != data.pid and _waits_for_input(t, ran) for t in s.threads) for s in samples
    ) / len(samples)
    throttled_share = throttled_s = None
    periods = 0
    stats = [s.cpu_stat for s in samples if s.cpu_stat is not None]
    if len(stats) >= 2:
        periods = stats[-1].nr_periods - stats[0].nr_periods
        if periods >= MIN_PERIODS:
            throttled_share = (stats[-1].nr_throttled - stats[0].nr_throttled) / periods
            throttled_s = (stats[-1].throttled_ns - stats[0].throttled_ns) / 1e9
    gpu = [g for s in samples for g in s.gpus]
    return Metrics(
        window_s=_r(window),
        budget=data.budget.cpus,
        capacity=min(data.budget.cpus, data.budget.quota or data.budget.cpus),
        busy={k: _r(v) for k, v in busy.items()},
        demand={k: _r(v) for k, v in demand.items()},
        threads=counts,
        runnable=_r(runnable),
        input_waiters=_r(waiters),
        throttled_share=None if throttled_share is None else _r(throttled_share),
        throttled_s=None if throttled_s is None else _r(throttled_s),
        periods=periods,
        gpu_util=_r(sum(g.utilization for g in gpu) / len(gpu)) if gpu else None,
        gpu_memory=_r(
            sum(g.memory_used / g.memory_total for g in gpu if g.memory_total) / len(gpu)
        )
        if gpu
        else None,
        schedstat=schedstat,
        steps=len(data.steps),
        step_median_s=_median_step(data.steps),
    )


def _median_step(ends: tuple[float, ...]) -> float | None:
    gaps = [b - a for a, b in itertools.pairwise(ends)]
    return round(statistics.median(gaps), 6) if len(gaps) >= 2 else None
