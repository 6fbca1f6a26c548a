"""Watching a job: find its TensorFlow process, then sample it at a fixed interval."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from hwtune.apply.verify import descendants, observe
from hwtune.doctor.gpu import GpuSampler
from hwtune.doctor.samples import Sample, SampleSet
from hwtune.doctor.sampling import (
    clock_ticks,
    cpu_cgroup,
    read_budget,
    read_cpu_stat,
    read_threads,
)

INTERVAL_S = 0.25  # 4 samples a second: enough for state averages, cheap (bench_doctor.py)


def tensorflow_process(pid: int) -> int | None:
    """The process under `pid` (itself included) whose threads show TensorFlow's runtime."""
    for candidate in descendants(pid):
        seen = observe(candidate)
        if seen is not None and seen.tf_started:
            return candidate
    return None


# What a process that loaded TensorFlow maps, before its runtime's tf_ threads start: the
# framework library and the Python extension (`import tensorflow` maps both).
_TF_LIBRARIES = (b"libtensorflow", b"_pywrap_tensorflow")


def tensorflow_loaded(pid: int) -> bool:
    """Whether `pid` mapped TensorFlow's libraries (/proc/PID/maps); False when unreadable."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            return any(name in line for line in handle for name in _TF_LIBRARIES)
    except OSError:
        return False


def tensorflow_target(pid: int) -> int | None:
    """The process `--pid` means: the one under `pid` (itself included) whose TensorFlow
    runtime started, else the first that loaded TensorFlow; None when none did (a shell)."""
    started = tensorflow_process(pid)
    if started is not None:
        return started
    mine = os.getpid()  # `--pid $$` from a shell has hwtune itself below the shell
    return next((p for p in descendants(pid) if p != mine and tensorflow_loaded(p)), None)


def wait_for_tensorflow(
    pid: int, timeout_s: float, alive: Callable[[], bool] = lambda: True
) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        found = tensorflow_process(pid)
        if found is not None:
            return found
        time.sleep(0.2)
    return None


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def sample(
    pid: int,
    seconds: float,
    *,
    interval_s: float = INTERVAL_S,
    progress: Callable[[float], None] = lambda elapsed: None,
    gpus: GpuSampler | None = None,
) -> SampleSet:
    """Sample `pid` for `seconds` (less if it ends); the budget is read once at the start."""
    chain = cpu_cgroup(pid)
    budget = read_budget(pid, chain)
    comm = _comm(pid)
    samples: list[Sample] = []
    start = time.monotonic()
    next_at = start
    while True:
        now = time.monotonic()
        threads = read_threads(pid)
        if threads is None:
            break
        samples.append(
            Sample(
                time=now - start,
                threads=threads,
                cpu_stat=read_cpu_stat(chain),
                gpus=gpus.sample() if gpus else (),
            )
        )
        progress(now - start)
        if now - start >= seconds:
            break
        next_at += interval_s
        time.sleep(max(0.0, next_at - time.monotonic()))
    return SampleSet(
        pid=pid,
        comm=comm,
        clock_ticks=clock_ticks(),
        budget=budget,
        samples=tuple(samples),
        origin=start,
    )


def steps_in_window(stamps: list[float], data: SampleSet) -> tuple[float, ...]:
    """Step ends (CLOCK_MONOTONIC) that fall in the sampling window, on its time line."""
    if not data.samples:
        return ()
    end = data.samples[-1].time
    return tuple(t - data.origin for t in stamps if 0.0 <= t - data.origin <= end)
