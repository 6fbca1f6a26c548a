"""What a trial leaves outside its process group: daemons, stopped and reaped.

A trial runs in a session of its own, and ending that session's process group ends what the
workload forked. A daemon leaves the group: it forks, calls setsid() and forks again (a data
server, a monitoring agent), so `killpg` misses it, and it would load the CPUs of every later
trial and outlive `hwtune tune`. While trials run, this process is made a child subreaper
(prctl(2) PR_SET_CHILD_SUBREAPER, Linux 3.4+): an orphaned descendant of a trial is then
re-parented to it rather than to init, so after the trial every child it did not start itself
is the trial's leftover, and is stopped (SIGTERM, a grace, SIGKILL) and reaped.

All that needs this process alive. When it is killed outright (SIGKILL: `kill -9`, the OOM
killer, a CI job's timeout) nothing of it runs, so each trial asks the kernel instead to
SIGKILL it when tune dies (die_with_parent).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterator
from functools import cache

# linux/prctl.h
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
# How long, at least, stop_leftovers waits to reap what it killed: SIGKILL ends a process
# at once unless it is in uninterruptible sleep (signal(7)), so a pass or two reaps it.
REAP_S = 1.0


def _prctl(option: int, arg: int) -> bool:
    """prctl(option, arg) succeeded; False where there is no prctl (not Linux): orphans then
    go to init, as before."""
    prctl = _prctl_function()
    return prctl is not None and prctl(option, arg, 0, 0, 0) == 0


@cache
def _prctl_function() -> Callable[..., int] | None:
    """libc's prctl, resolved once in this process, so that a child between fork and exec
    only calls it (no dlopen, no import there); None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    function.restype = ctypes.c_int
    return function


def die_with_parent() -> Callable[[], None]:
    """Built in this process before it starts a trial; run in the trial's child between fork
    and exec (Popen's preexec_fn): the child gets SIGKILL when this process dies, however it
    dies (prctl(2), PR_SET_PDEATHSIG, Linux 2.1.57+). A no-op where prctl is missing.

    SIGKILL, not SIGTERM: tune stops a trial with SIGTERM and follows with SIGKILL after a
    grace (trial.stop_groups), but with tune dead no one would follow up, and a workload that
    traps or ignores SIGTERM would run on as before. The setting survives execve(2) (unless the
    trial's program is set-user-ID or has file capabilities, when the kernel clears it) and is
    cleared in the trial's own children: this covers the trial's process, not what it forks.

    The kernel's "parent" is the thread that forked the child: the signal comes when that
    thread ends, even if the process lives on. Trials are forked by the thread calling
    TrialRunner.run (the main thread under `hwtune tune`), and run returns only after every
    process of the trial is stopped (trial.stop_groups), so that thread outlives each trial
    whichever thread it is. If this process dies between fork and the prctl call, the child is
    already re-parented and no signal will come (prctl(2)): it then sees a parent other than
    this process and exits without running the workload."""
    prctl = _prctl_function()
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def set_up() -> None:
        # Runs in the child: only calls resolved already (no import, no dlopen).
        if prctl is None or prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0) != 0:
            return
        if os.getppid() != parent:
            os._exit(1)

    return set_up


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """This process is a child subreaper inside the block; the attribute is put back after
    (a library caller may not want it)."""
    before = ctypes.c_int(0)
    known = _prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(before))  # an int *
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        if known and not before.value:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)


def children() -> set[int]:
    """This process's child processes (the ones re-parented to it included)."""
    import psutil

    try:
        return {child.pid for child in psutil.Process().children()}
    except psutil.Error:
        return set()


def _below(pids: Collection[int]) -> set[int]:
    """`pids` and every process below them."""
    import psutil

    found = set(pids)
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    return found


def _signal(pids: Collection[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap(pids: Collection[int]) -> set[int]:
    """Reap those of our children in `pids` that have ended; the ones still running."""
    running = set()
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours (any more), or reaped already
            continue
        if not done:
            running.add(pid)
    return running


def reap_group(pgid: int, leaders: Collection[int]) -> None:
    """Reap the ended children of this process in process group `pgid`, but not `leaders`
    (subprocess waits for those): a trial's helper re-parented here is a zombie member of its
    group until reaped, and a group with a member keeps its id, so it would seem alive."""
    for pid in children() - set(leaders):
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            if os.getpgid(pid) == pgid:
                os.waitpid(pid, os.WNOHANG)


def stop_leftovers(ours: Collection[int], grace_s: float) -> None:
    """Stop and reap every child of this process not in `ours` (what it started itself),
    with everything below it: SIGTERM, up to `grace_s` for them to go, then SIGKILL. A child
    that has ended already is only reaped; one whose parent ends meanwhile is re-parented
    here and taken in the next pass."""
    left = _reap(children() - set(ours))
    if not left:
        return
    # No grace (a second Ctrl-C): SIGKILL at once.
    _signal(_below(left), signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    # SIGKILL cannot be caught: after it, a pass or two reaps the rest; the bound only
    # guards against a process that cannot die (uninterruptible I/O) holding us forever.
    give_up = deadline + max(grace_s, REAP_S)
    try:
        while left and time.monotonic() < give_up:
            if time.monotonic() >= deadline:
                _signal(_below(left), signal.SIGKILL)
            time.sleep(0.02)
            left = _reap(children() - set(ours))
    except BaseException:  # a second Ctrl-C during the grace: no more waiting
        _signal(_below(left), signal.SIGKILL)
        raise
