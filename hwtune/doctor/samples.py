"""What the doctor records while it watches a job: plain data, JSON in and out.

A sample set is everything the analysis needs, so a recorded one (`--json`'s "samples")
gives the same verdict again in a unit test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ThreadSample:
    """One thread at one instant, from /proc/PID/task/TID/{stat,schedstat,wchan}."""

    tid: int
    comm: str
    state: str  # proc(5) stat field 3: R running/runnable, S sleeping, D disk sleep, …
    cpu_ticks: int  # utime + stime, in clock ticks
    run_ns: int | None = None  # schedstat: time on a CPU
    wait_ns: int | None = None  # schedstat: time runnable but waiting for a CPU
    wchan: str = ""  # the kernel function a sleeping thread waits in ("" when unknown)

    def as_list(self) -> list[Any]:
        return [
            self.tid,
            self.comm,
            self.state,
            self.cpu_ticks,
            self.run_ns,
            self.wait_ns,
            self.wchan,
        ]

    @classmethod
    def from_list(cls, row: list[Any]) -> ThreadSample:
        tid, comm, state, ticks, run, wait, wchan = row
        return cls(int(tid), str(comm), str(state), int(ticks), run, wait, str(wchan))


@dataclass(frozen=True)
class CpuStat:
    """The job's cgroup cpu.stat counters (v1 throttled_time is ns, v2 throttled_usec µs)."""

    nr_periods: int
    nr_throttled: int
    throttled_ns: int


@dataclass(frozen=True)
class GpuSample:
    index: int
    utilization: int  # percent of the last sample period a kernel ran (NVML)
    memory_used: int  # bytes
    memory_total: int


@dataclass(frozen=True)
class Sample:
    time: float  # monotonic seconds
    threads: tuple[ThreadSample, ...]
    cpu_stat: CpuStat | None = None
    gpus: tuple[GpuSample, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "time": round(self.time, 4),
            "threads": [t.as_list() for t in self.threads],
            "cpu_stat": asdict(self.cpu_stat) if self.cpu_stat else None,
            "gpus": [asdict(g) for g in self.gpus],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        stat = data.get("cpu_stat")
        return cls(
            time=float(data["time"]),
            threads=tuple(ThreadSample.from_list(r) for r in data["threads"]),
            cpu_stat=CpuStat(**stat) if stat else None,
            gpus=tuple(GpuSample(**g) for g in data.get("gpus", [])),
        )


@dataclass(frozen=True)
class Budget:
    """The CPUs the job may use, as hwtune's limits probe counts them."""

    cpus: int
    reason: str
    quota: float | None = None  # the cgroup CPU quota in CPUs, if any
    cgroup: str | None = None  # the cgroup directory whose cpu.stat was read


@dataclass(frozen=True)
class SampleSet:
    pid: int
    comm: str
    clock_ticks: int  # SC_CLK_TCK
    budget: Budget
    samples: tuple[Sample, ...]
    # What TensorFlow said about itself on stderr (only where the doctor started the job).
    signals: dict[str, str] = field(default_factory=dict)
    origin: float = 0.0  # CLOCK_MONOTONIC seconds of the first sample (time 0)
    # Ends of training steps, on the samples' time line, from the Keras callback
    # (hwtune.apply.steps) where the job called hwtune.configure() under the doctor.
    steps: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "comm": self.comm,
            "clock_ticks": self.clock_ticks,
            "budget": asdict(self.budget),
            "signals": dict(self.signals),
            "origin": self.origin,
            "steps": [round(t, 6) for t in self.steps],
            "samples": [s.as_dict() for s in self.samples],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SampleSet:
        return cls(
            pid=int(data["pid"]),
            comm=str(data["comm"]),
            clock_ticks=int(data["clock_ticks"]),
            budget=Budget(**data["budget"]),
            samples=tuple(Sample.from_dict(s) for s in data["samples"]),
            signals={str(k): str(v) for k, v in data.get("signals", {}).items()},
            origin=float(data.get("origin", 0.0)),
            steps=tuple(float(t) for t in data.get("steps", [])),
        )
