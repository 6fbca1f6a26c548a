"""The machine's background load: the CPU time other work took while the benchmark ran.

A result from a busy machine is a different result: the previous full run on the 2-core VM
was made while other work loaded it, and the same configuration varied up to 1.5× between
rounds. So the load is measured, per trial, from two counters read before and after it:

- the first line of /proc/stat: CPU time all CPUs spent busy (user, nice, system, irq,
  softirq; guest time is already inside user and nice) and stolen by the hypervisor (steal),
  in USER_HZ ticks (proc(5));
- getrusage(RUSAGE_SELF) + getrusage(RUSAGE_CHILDREN): the CPU time of this process and of
  every descendant that has ended and been waited for (getrusage(2)). A trial's processes
  are, and so are `hwtune tune`'s trials, which it waits for before it exits.

Other work = busy − our own. /proc/stat charges whole ticks by sampling while rusage is exact,
so a single interval's figure can come out slightly negative; it is stored as measured and
only the sums are clamped. Steal is kept apart: it is other virtual machines on the host,
not this one's processes, but it slows a trial just the same.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Other work above 3% of the machine's CPUs, on average over the trials, makes a run "not
# quiet": 3% is the smallest difference the targets judge (two tuner runs within 3%, and the
# tuner's own equivalence margin, hwtune.tune.stats), and a whole-machine trial loses about
# that share of its throughput to it.
QUIET_SHARE = 0.03
# bench/run warns at start when the 1-minute load average is at least a quarter of the CPUs:
# the load average counts runnable tasks, decayed over a minute (proc(5)), so that much means
# other work wanted a sizeable share of the machine lately, while a shell and an editor keep
# it at 0.4 or below on the 2-core VM (2 × 0.25 = 0.5); 3 and more were read there while
# another engineer's test suite ran.
LOAD_WARNING_PER_CPU = 0.25

_BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (proc(5), /proc/stat "cpu")
_STEAL_FIELD = 7


@dataclass(frozen=True, slots=True)
class CpuTimes:
    busy_s: float  # all CPUs, busy
    steal_s: float  # all CPUs, stolen by the hypervisor
    own_s: float  # this process and its waited-for descendants


def read_times(proc: Path = Path("/proc")) -> CpuTimes | None:
    """The counters now, or None where /proc/stat is unreadable (not Linux)."""
    try:
        fields = (proc / "stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = [int(value) for value in fields]
    except (OSError, ValueError):
        return None
    hertz = os.sysconf("SC_CLK_TCK")
    own = sum(
        usage.ru_utime + usage.ru_stime
        for usage in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )
    steal = ticks[_STEAL_FIELD] if len(ticks) > _STEAL_FIELD else 0
    return CpuTimes(sum(ticks[i] for i in _BUSY_FIELDS) / hertz, steal / hertz, own)


def online_cpus(proc: Path = Path("/proc")) -> int:
    """CPUs counted in /proc/stat (the "cpuN" lines): the denominator of the busy time."""
    try:
        lines = (proc / "stat").read_text().splitlines()
    except OSError:
        return os.cpu_count() or 1
    return sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit()) or 1


def loadavg(proc: Path = Path("/proc")) -> tuple[float, float, float] | None:
    try:
        one, five, fifteen = (proc / "loadavg").read_text().split()[:3]
        return float(one), float(five), float(fifteen)
    except (OSError, ValueError):
        return None


def load_warning(load: tuple[float, float, float] | None, cpus: int) -> str | None:
    """The line bench/run prints at start when other work is running, else None."""
    if load is None or load[0] < LOAD_WARNING_PER_CPU * cpus:
        return None
    return (
        f"warning: the 1-minute load average is {load[0]:.2f} on {cpus} CPUs: other work is "
        "running. Trials will be noisier and the report will say the machine was not quiet; "
        "stop that work (or wait) for a result that counts."
    )


class Meter:
    """Started before an interval, `stop()`ed after it: the load of the interval."""

    def __init__(self) -> None:
        self.cpus = online_cpus()
        self.start = read_times()
        self.started = time.monotonic()

    def stop(self) -> dict[str, Any] | None:
        end = read_times()
        if self.start is None or end is None:
            return None
        return {
            "wall_s": round(time.monotonic() - self.started, 3),
            "cpus": self.cpus,
            "other_cpu_s": round(
                (end.busy_s - self.start.busy_s) - (end.own_s - self.start.own_s), 3
            ),
            "steal_cpu_s": round(end.steal_s - self.start.steal_s, 3),
        }


@dataclass(frozen=True, slots=True)
class LoadSummary:
    intervals: int  # measured intervals (trials, tuner runs, budget scripts)
    trials: int  # of which single trials
    other: float  # mean share of the CPUs other work used, over all measured time
    steal: float  # mean share stolen by the hypervisor
    noisy_trials: int  # trials during which other work + steal exceeded QUIET_SHARE
    worst: float  # the highest such share of one trial

    @property
    def quiet(self) -> bool:
        return self.other + self.steal <= QUIET_SHARE


def summarize(entries: list[dict[str, Any]]) -> LoadSummary | None:
    """Over every journal entry that carries a "load" record; None when none does."""
    loads = [(e, e["load"]) for e in entries if isinstance(e.get("load"), dict)]
    if not loads:
        return None
    capacity = sum(load["wall_s"] * load["cpus"] for _, load in loads) or 1.0
    shares = [
        (load["other_cpu_s"] + load["steal_cpu_s"]) / (load["wall_s"] * load["cpus"] or 1.0)
        for e, load in loads
        if e.get("phase") in ("oracle", "final")
    ]
    return LoadSummary(
        intervals=len(loads),
        trials=len(shares),
        other=max(0.0, sum(load["other_cpu_s"] for _, load in loads) / capacity),
        steal=max(0.0, sum(load["steal_cpu_s"] for _, load in loads) / capacity),
        noisy_trials=sum(1 for share in shares if share > QUIET_SHARE),
        worst=max(shares, default=0.0),
    )
