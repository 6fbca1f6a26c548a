"""`hwtune verify [--pid PID | -- CMD]`: check a running TensorFlow process got the profile.

Compares the process's environment (the one it started with, plus what `hwtune.configure()`
set inside it and recorded for verify), CPU affinity, inter-op pool size (from its
"tf_Compute" threads), intra-op pool (a lower bound: those threads are unnamed) and, on
multi-NUMA machines, its memory policy with the profile, and prints an OK / DIFFERENT table,
CANNOT TELL where the evidence is not there (TensorFlow's runtime not started yet, XLA's own
threads among the inter-op ones). The expected slice follows the process's own
HWTUNE_INSTANCE / launcher rank variables.

With `-- CMD` it runs CMD (a short smoke test), watches it and the processes it starts, and
judges the last moment TensorFlow was seen running. With `--pid` it looks at that process
and its children, waiting up to --wait seconds for TensorFlow to start (--wait without --pid
is a usage error). Exit status: 0 nothing DIFFERENT; 5 (MISMATCH) on any DIFFERENT; 1 when
nothing could be observed (no such process, or CMD exited first: its status is said) or CMD
failed; 2 bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from hwtune.cli import Environment
from hwtune.commands.numbers import process_id, seconds
from hwtune.commands.planning import add_plan_arguments, request_from_args
from hwtune.errors import HwtuneError
from hwtune.status import ExitStatus

if TYPE_CHECKING:
    from hwtune.apply.verify import Observation
    from hwtune.models.hardware import Hardware

_SAMPLE_S = 0.1
# How long a command verify or the doctor stops (SIGTERM, SIGINT) is given to end before
# SIGKILL: docker stop's default grace (`docker stop --time`, 10 s).
STOP_GRACE_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=process_id, default=None, help="the process to check")
    parser.add_argument(
        "--wait",
        type=seconds,
        default=None,
        metavar="S",
        help="with --pid only: wait up to S seconds for TensorFlow to start (-- CMD is "
        "watched until it ends)",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.add_argument(
        "--numa-policy",
        choices=("bind", "preferred", "none"),
        default="bind",
        help="the policy hwtune exec was told to use",
    )
    add_plan_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


class _JobHardware:
    """The machine as the observed process sees it (its affinity and cgroup limits), read
    while the process runs: `-- CMD` is judged after CMD ended, and a `--pid` job may end
    while it is watched, when its /proc entry, and so the limits it was planned for, are
    gone (verify then planned for every CPU and judged a `taskset -c 0` job DIFFERENT).
    Read again when the process's affinity or cgroup changed (`taskset` or a shell joining
    a cgroup before it execs the job); None when the plan is not for this machine
    (`--hardware`, or a `--root` that is not the live system)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from hwtune.probes import is_live

        self._wanted = args.hardware is None and is_live(Path(args.root).absolute())
        self._root = args.root
        self._seen: dict[int, tuple[object, Hardware]] = {}

    def read(self, seen: Observation) -> None:
        if not self._wanted:
            return
        from hwtune.apply.verify import read_or_none
        from hwtune.probes import detect

        cgroup = read_or_none(f"/proc/{seen.pid}/cgroup")
        known = self._seen.get(seen.pid)
        if known is not None and cgroup is None:
            return  # it ended since it was observed: keep what was read while it ran
        key = (seen.cpus, cgroup)
        if known is None or known[0] != key:
            self._seen[seen.pid] = (key, detect(self._root, pid=str(seen.pid)))

    def of(self, seen: Observation) -> Hardware | None:
        if not self._wanted:
            return None
        if seen.pid not in self._seen:  # not read while it ran: as it is now
            self.read(seen)
        return self._seen[seen.pid][1]


def _watch_command(command: list[str], hardware: _JobHardware) -> tuple[object, int]:
    """Run CMD to the end; the latest observation of TensorFlow's inter-op pool at the size
    it was seen at most often, else the last observation. `hardware` reads the limits of
    each process observed while it runs.

    A process removes its configure() record when it exits (hwtune.apply.record), while
    TensorFlow's threads still show during interpreter shutdown: a record seen earlier for
    the same process is kept for the observations after it.

    CMD is stopped when verify leaves before it ended (`_stop`).
    """
    from dataclasses import replace

    from hwtune.apply.verify import INTER_OP_THREAD, observe_tree

    last: Observation | None = None
    by_pool: dict[int, tuple[int, Observation]] = {}  # tf_Compute count -> (looks, latest)
    records: dict[int, Observation] = {}
    child = subprocess.Popen(command)
    try:
        while True:
            seen = observe_tree(child.pid)
            if seen is not None:
                hardware.read(seen)
                if seen.record is not None:
                    records[seen.pid] = seen
                elif seen.pid in records:
                    earlier = records[seen.pid]
                    seen = replace(
                        seen,
                        record=earlier.record,
                        record_note=earlier.record_note,
                        forked_from=earlier.forked_from,
                        record_inherited=earlier.record_inherited,
                    )
                if seen.tf_started:
                    # The pool as it stood longest, not the last look: at exit TensorFlow
                    # tears its pools down while other tf_ threads still show (a last look
                    # counted 0), and a pool can briefly hold an extra thread (a peak counted
                    # 2 for 1), both seen on the 2-vCPU VM. Per count: how often seen, and the
                    # latest look.
                    pools = seen.threads[INTER_OP_THREAD]
                    looks, _ = by_pool.get(pools, (0, seen))
                    by_pool[pools] = (looks + 1, seen)
                else:
                    last = seen
            if child.poll() is not None:
                if by_pool:
                    _, steady = max(by_pool.values(), key=lambda entry: entry[0])
                    return steady, child.returncode
                return last, child.returncode
            time.sleep(_SAMPLE_S)
    finally:
        _stop(child)


def _stop(child: subprocess.Popen[bytes]) -> None:
    """End CMD when verify leaves before it did (a SIGTERM to verify alone, a Ctrl-C): the
    smoke test is verify's, and it was left running with no one to wait for it. SIGTERM,
    then SIGKILL after STOP_GRACE_S."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _watch_pid(pid: int, wait: float, hardware: _JobHardware) -> object:
    from hwtune.apply.verify import observe_tree

    deadline = time.monotonic() + wait
    seen = observe_tree(pid, named=True)
    if seen is not None:
        hardware.read(seen)
    while seen is not None and not seen.tf_started and time.monotonic() < deadline:
        time.sleep(_SAMPLE_S)
        now = observe_tree(pid, named=True)
        if now is not None:
            hardware.read(now)
        seen = now or seen
    return seen


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Within it, SIGTERM becomes SystemExit, so the `finally` that stops the job runs; the
    old handler is put back after."""

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread (an embedding caller): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _ended(status: int) -> str:
    """How CMD ended, from Popen's returncode (-N: killed by signal N)."""
    return f"exited with status {status}" if status >= 0 else f"was killed by signal {-status}"


def command_or_pid(args: argparse.Namespace, env: Environment, tool: str) -> list[str] | None:
    """The job's command line after `--` ([] with --pid), or None (said on stderr) when the
    command line gives both or neither: `hwtune verify` and `hwtune doctor` watch a job so."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if (args.pid is None) == (not command):
        env.say(tool, "error", "give either --pid PID or -- CMD")
        return None
    return command


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.apply.verify import (
        Observation,
        check_job_environment,
        compare,
        describe,
        expected_for,
        render_table,
    )
    from hwtune.pipeline.request import profile_for

    command = command_or_pid(args, env, "verify")
    if command is None:
        return ExitStatus.USAGE
    if args.wait is not None and args.pid is None:
        print(
            "hwtune verify: error: --wait goes with --pid (-- CMD is watched until it ends)",
            file=env.stderr,
        )
        return ExitStatus.USAGE
    status = 0
    hardware = _JobHardware(args)
    if args.pid is not None:
        if not os.path.isdir(f"/proc/{args.pid}"):
            raise HwtuneError(f"no such process: {args.pid}")
        seen = _watch_pid(args.pid, args.wait or 0.0, hardware)
    else:
        try:
            with exit_on_sigterm():
                seen, status = _watch_command(command, hardware)
        except OSError as err:
            raise HwtuneError(f"cannot run {command[0]!r}: {err.strerror}") from err
    if not isinstance(seen, Observation):
        if args.pid is not None:
            raise HwtuneError(
                f"pid {args.pid} could not be observed (it exited, or it is not ours to read)"
            )
        raise HwtuneError(
            f"{shlex.join(command)} {_ended(status)} before it could be observed",
            hint="verify checks a running TensorFlow job: give one that runs for a moment, "
            "or --pid of a running one",
        )
    # The process's own rank/instance variables choose its slice, as they did when it started.
    check_job_environment(seen)
    request = request_from_args(args, seen.environ)
    observed = hardware.of(seen)
    if observed is not None:
        # Its CPU affinity and cgroup quota too: a job under `taskset` or in a cgroup with a
        # CPU quota was planned (by configure() or exec inside it) for what it may use, which
        # the verifier, outside both, would not see in its own /proc/self.
        request = dataclasses.replace(request, hardware=observed)
        for issue in observed.issues:  # its limits unread (another cgroup namespace…)
            if (issue.path or "").startswith(f"proc/{seen.pid}/"):
                why = f"{issue.reason} [{issue.path}]; the expected values assume it"
                env.say("verify", "note", why)
    planned = profile_for(request)
    expected = expected_for(planned, args.numa_policy)
    checks = compare(expected, seen)
    if args.json:
        shown = {
            "pid": seen.pid,
            "rss_bytes": seen.rss_bytes,
            "configure_record": seen.record is not None,
            # Whose record: the process's own, or the ancestor it was forked from after
            # configure() ran there (hwtune.apply.verify.inherited_record).
            "configure_record_of": (seen.forked_from if seen.record_inherited else seen.pid)
            if seen.record is not None
            else None,
            "checks": [c.__dict__ for c in checks],
        }
        env.stdout.write(json.dumps(shown, indent=2) + "\n")
    else:
        env.stdout.write(describe(seen) + "\n" + render_table(checks))
    if any(c.status == "DIFFERENT" for c in checks):
        return ExitStatus.MISMATCH
    if status != 0:  # a death by a signal is Popen's negative status: "status -9" misled
        print(f"hwtune verify: the command {_ended(status)}", file=env.stderr)
        return ExitStatus.ERROR
    return ExitStatus.SUCCESS
