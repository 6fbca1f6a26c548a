"""Run one trial: the workload in fresh processes with one configuration, and what it reported.

TensorFlow fixes its thread pools, oneDNN switch and XLA flags when a process starts, so every
trial is a new process (or, for N instances, N concurrent processes, each pinned to its slice
of CPUs, whose throughputs add up). A trial fails when a process exits non-zero or by a signal,
outlives the per-trial timeout (its whole process group is then killed), or prints no usable
metric; whatever way it ends, its process groups and any daemon it left are stopped
(reaper.py); the failure keeps the tail of its stderr for the report, and never yields a value.
Its output is read as it is written, bounded, never stored whole (capture.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hwtune.tune.capture import Capture, number
from hwtune.tune.config import TrialConfig, trial_env
from hwtune.tune.reaper import (
    children,
    die_with_parent,
    reap_group,
    stop_leftovers,
    subreaper,
)
from hwtune.tune.workloads import Workload

TAIL_LINES = 20
TAIL_CHARS = 3000
# Between SIGTERM and SIGKILL for a trial past its timeout: TensorFlow exits in well under a
# second on SIGTERM; a workload that traps it gets this long.
KILL_GRACE_S = 3.0
# The range a metric must lie in. Values are compared as ratios (exp of a log difference),
# reported as medians ((a + b) / 2) and summed over the instances, and a float holds at most
# ~1.8e308 (IEEE 754 binary64, Python's sys.float_info.max): a workload printing 1e308 got
# an infinite median (stored as `Infinity`, which is no JSON), one printing 1e-200 and 1e200
# crashed the comparison. Within these bounds every ratio, median and sum stays finite, and
# no throughput (samples, bytes or FLOPs per second) comes near either end.
METRIC_MIN = 1e-100
METRIC_MAX = 1e100
# How much of a value that is no number, and of a line that is no metric line, a failure
# quotes (a metric line may be 64 KiB).
RAW_SHOWN = 40
STRAY_SHOWN = 120


@dataclass(frozen=True, slots=True)
class TrialResult:
    config: TrialConfig
    value: float | None  # summed throughput of the instances; None when the trial failed
    wall_s: float
    failure: str | None = None  # "exited with status 1", "timed out after 30 s", …
    stderr_tail: str = ""
    metric: str | None = None  # the metric name read ("wall" when timed as a whole)
    per_instance: tuple[float, ...] = ()
    timed_out: bool = False  # stopped at the runner's timeout
    cut_by_budget: bool = False  # that timeout was what was left of the budget: no failure
    # of its configuration, the search's time is up
    reported: str | None = None  # timed out after printing its metric ("rate=100"): it
    # reported, then did not exit (a thread or child process left running)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.value is not None


def tail(text: str, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    kept = "\n".join(text.rstrip().splitlines()[-lines:])
    return kept[-chars:]


def _preexec(
    cpus: Sequence[int], cgroup_procs: Path | None, start_cpus: frozenset[int]
) -> Callable[[], None]:
    """Runs in the child between fork and exec: die with tune (reaper.die_with_parent), join
    the cgroup, then pin to `cpus`, or, for an unpinned trial, set the CPUs tune had when it
    started (`start_cpus`). A child inherits its parent's affinity, and a workload may change
    tune's (`sched_setaffinity(getppid(), …)`, sched_setaffinity(2)): every later unpinned
    trial would then run on those CPUs."""

    die_with_tune = die_with_parent()  # resolved here, in tune, before the fork

    def setup() -> None:
        die_with_tune()
        if cgroup_procs is not None:
            with open(cgroup_procs, "w", encoding="ascii") as handle:
                handle.write(str(os.getpid()))
        if cpus:
            os.sched_setaffinity(0, cpus)
        elif start_cpus:
            # Best effort: a CPU since taken offline or out of the cgroup's cpuset leaves
            # none of them settable (EINVAL); the trial then runs as the kernel placed it.
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, start_cpus)

    return setup


def _signal_groups(procs: Sequence[subprocess.Popen[bytes]], sig: int) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def _live_groups(procs: Sequence[subprocess.Popen[bytes]]) -> list[subprocess.Popen[bytes]]:
    """The trials whose process group still has a member (a leader, and a helper re-parented
    here, is reaped first: a zombie would keep its group alive)."""
    alive = []
    leaders = {proc.pid for proc in procs}
    for proc in procs:
        proc.poll()
        reap_group(proc.pid, leaders)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        alive.append(proc)
    return alive


def stop_groups(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """End every trial's whole process group, the leader and whatever it left running
    (a helper it forked, an unjoined pool): SIGTERM to all groups at once, KILL_GRACE_S for
    them to go, then SIGKILL. A second Ctrl-C during the wait goes straight to SIGKILL. A
    group keeps its id while any member lives, so no other process can be signalled."""
    alive = _live_groups(procs)
    if not alive:
        return
    _signal_groups(alive, signal.SIGTERM)
    try:
        deadline = time.monotonic() + KILL_GRACE_S
        while alive and time.monotonic() < deadline:
            time.sleep(0.02)
            alive = _live_groups(alive)
    finally:
        _signal_groups(_live_groups(alive), signal.SIGKILL)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_GRACE_S)


def _wait_all(
    procs: Sequence[subprocess.Popen[bytes]], started: float, deadline: float
) -> list[float] | None:
    """Each instance's time from the start to its own exit, or None at the deadline. Several
    instances are polled, not waited on in turn: a copy that ends first is timed to its end,
    not to that of the copies before it."""
    if len(procs) == 1:
        try:
            procs[0].wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None
        return [time.monotonic() - started]
    ends: dict[int, float] = {}
    while len(ends) < len(procs):
        for index, proc in enumerate(procs):
            if index not in ends and proc.poll() is not None:
                ends[index] = time.monotonic() - started
        if len(ends) < len(procs):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
    return [ends[index] for index in range(len(procs))]


def _seconds(value: float) -> str:
    """A timeout as a failure shows it: whole seconds, but a fraction below 10 (`0.5`, not
    the `0` that `--trial-timeout 0.5` showed)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _shown(text: str, limit: int) -> str:
    """`text` as a failure quotes it: its first `limit` characters, `…` when there are more."""
    return text if len(text) <= limit else text[:limit] + "…"


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class TrialRunner:
    """Runs trials of one workload; `environ` is the base environment (usually os.environ)."""

    def __init__(
        self,
        workload: Workload,
        *,
        environ: Mapping[str, str],
        timeout_s: float,
        cgroup_procs: Path | None = None,
    ) -> None:
        self.workload = workload
        self.environ = dict(environ)
        self.timeout_s = timeout_s
        self.cgroup_procs = cgroup_procs
        self.metric = workload.metric  # learnt from the first trial when the workload names none
        # The CPUs tune may run on as it starts: every unpinned trial starts from these, not
        # from what an earlier trial may have set for tune (_preexec).
        self.start_cpus = frozenset(os.sched_getaffinity(0))

    def run(self, config: TrialConfig) -> TrialResult:
        with tempfile.TemporaryDirectory(prefix="hwtune-trial-") as scratch, subreaper():
            return self._run(config, Path(scratch), children())

    def _run(self, config: TrialConfig, scratch: Path, before: set[int]) -> TrialResult:
        barrier = scratch / "barrier"
        barrier.mkdir()
        procs: list[subprocess.Popen[bytes]] = []
        outputs: list[tuple[Capture, Capture]] = []
        started = time.monotonic()
        walls: list[float] = []
        try:
            for index in range(config.instances):
                out, err = Capture(self.metric), Capture(self.metric)
                outputs.append((out, err))
                cpus = config.cpus[index] if index < len(config.cpus) else ()
                try:
                    procs.append(
                        subprocess.Popen(
                            self.workload.argv,
                            stdin=subprocess.DEVNULL,
                            stdout=out.write_fd,
                            stderr=err.write_fd,
                            env=trial_env(config, index, self.environ, barrier=str(barrier)),
                            cwd=self.workload.cwd,
                            start_new_session=True,  # its own group: a timeout kills it all
                            preexec_fn=_preexec(cpus, self.cgroup_procs, self.start_cpus),
                        )
                    )
                except (OSError, subprocess.SubprocessError) as error:
                    return TrialResult(  # the `finally` below stops those already started
                        config,
                        None,
                        time.monotonic() - started,
                        failure=f"could not start {self.workload.argv[0]!r}: {error}",
                    )
            # Drained from now on, by a thread per stream, started once every instance is:
            # preexec_fn "is NOT SAFE to use in the presence of threads" (Python's subprocess
            # docs, Popen); a pipe holds 64 KiB meanwhile.
            for capture in (c for pair in outputs for c in pair):
                capture.start()
            waited = _wait_all(procs, started, started + self.timeout_s)
            if waited is None:
                late = next((i for i, proc in enumerate(procs) if proc.poll() is None), 0)
                reported = self._reported(*outputs[late])
                hung = f"; it printed `hwtune-metric: {reported}`, then did not exit"
                return TrialResult(
                    config,
                    None,
                    time.monotonic() - started,
                    failure=f"timed out after {_seconds(self.timeout_s)} s (per-trial timeout)"
                    + (hung if reported else ""),
                    stderr_tail=_tail_of(outputs[late][1]),
                    timed_out=True,
                    reported=reported,
                )
            walls = waited
        finally:
            grace = KILL_GRACE_S
            try:
                stop_groups(procs)  # whatever happened (Ctrl-C too): leave nothing of a trial,
            except BaseException:  # a second Ctrl-C or signal in its grace: no more grace,
                grace = 0.0  # but the daemons go too (they outlived a double Ctrl-C)
                raise
            finally:
                # … not even a daemon that left the group (`before`: children not the trial's)
                stop_leftovers(before | {proc.pid for proc in procs}, grace)
                for capture in (c for pair in outputs for c in pair):
                    capture.close()  # one never started (its process could not be)
                    capture.finish()  # the trial's processes are gone: the pipe has ended
        wall = time.monotonic() - started
        return self._collect(config, procs, outputs, walls, wall)

    def _reported(self, out: Capture, err: Capture) -> str | None:
        """The metric an instance still running has printed so far ("rate=100"), if any."""
        if self.workload.time_whole:
            return None
        printed = _metrics_of(out, err)
        name = self.metric or next(iter(printed), None)
        if name is None or name not in printed:
            return None
        raw = printed[name]
        return f"{name}={_shown(raw, RAW_SHOWN)}"

    def _collect(
        self,
        config: TrialConfig,
        procs: Sequence[subprocess.Popen[bytes]],
        outputs: Sequence[tuple[Capture, Capture]],
        walls: Sequence[float],
        wall: float,
    ) -> TrialResult:
        values: list[float] = []
        metric_name = "wall" if self.workload.time_whole else self.metric
        for index, proc in enumerate(procs):
            out, err = outputs[index]
            label = f"instance {index}: " if len(procs) > 1 else ""
            if proc.returncode != 0:
                return TrialResult(
                    config,
                    None,
                    wall,
                    failure=label + _describe_exit(proc.returncode),
                    stderr_tail=_tail_of(err),
                )
            if self.workload.time_whole:
                values.append(1.0 / max(walls[index], 1e-9))
                continue
            printed = _metrics_of(out, err)
            if metric_name is None and printed:
                metric_name = next(iter(printed))
            raw = printed.get(metric_name) if metric_name else None
            if raw is None:
                wanted = f"`hwtune-metric: {metric_name or '<name>'}=<value>`"
                why = ""
                stray = out.stray or err.stray
                if stray:  # it printed one, which does not read as one: say which, and why
                    shown = _shown(stray, STRAY_SHOWN)
                    why = (
                        f": {shown!r} does not read as one (`hwtune-metric: NAME=VALUE` must "
                        "start its line, with nothing such as a logging prefix before it)"
                    )
                return TrialResult(
                    config,
                    None,
                    wall,
                    failure=f"{label}printed no {wanted} line{why}",
                    stderr_tail=_tail_of(err),
                )
            value = number(raw)
            if value is None:  # `1,234.5`, `1234,5`: the last value printed counts, not one before
                shown = _shown(raw, RAW_SHOWN)
                return TrialResult(
                    config,
                    None,
                    wall,
                    failure=f"{label}metric {metric_name}={shown!r} is not a number (the rest "
                    "of the line is the value: print 1234.5, a '.' decimal point, no thousands "
                    "separator, no unit)",
                    stderr_tail=_tail_of(err),
                )
            if not (math.isfinite(value) and value > 0):
                return TrialResult(
                    config,
                    None,
                    wall,
                    failure=f"{label}metric {metric_name}={value} is not a positive number",
                    stderr_tail=_tail_of(err),
                )
            if not METRIC_MIN <= value <= METRIC_MAX:
                return TrialResult(
                    config,
                    None,
                    wall,
                    failure=f"{label}metric {metric_name}={value:g} is out of range "
                    f"({METRIC_MIN:g} to {METRIC_MAX:g})",
                    stderr_tail=_tail_of(err),
                )
            values.append(value)
        total = sum(values)
        if not math.isfinite(total):  # finite copies can still add up past a float
            return TrialResult(
                config,
                None,
                wall,
                failure=f"metric {metric_name} summed over the instances is not finite",
            )
        # From now on every trial must report the same metric (a user command's first one).
        self.metric = metric_name
        return TrialResult(
            config,
            total,
            wall,
            metric=metric_name,
            per_instance=tuple(values),
            stderr_tail=_tail_of(outputs[0][1]),
        )


def _metrics_of(out: Capture, err: Capture) -> dict[str, str]:
    """The metrics' values as printed on stdout and on stderr (docs/tune.md: "anywhere in
    stdout (or stderr)"), stdout's first: its names come first (the default metric is the
    first one printed), and a name printed on both takes stdout's value. The two streams are
    separate files, so which of their lines came last cannot be told."""
    metrics = out.values
    for name, value in err.values.items():
        metrics.setdefault(name, value)
    return metrics


def _tail_of(capture: Capture) -> str:
    """The report's tail of an output stream, from the end it kept."""
    return tail(capture.tail_bytes().decode("utf-8", "replace"))
