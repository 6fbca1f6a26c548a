"""Several instances of `hwtune exec` at once, children of hwtune (one replaces it instead:
hwtune.apply.launch.exec_replace).

Each runs in its own process group with stdin from /dev/null; their output is prefixed line by
line with "[i] "; SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to every
group; hwtune exits with the worst status (a signal death counts as 128+N, as shells report
it). With `fail_fast`, the first failure terminates the others (SIGTERM, then SIGKILL after
`kill_after` seconds) and its status is hwtune's.
Job control reaches them too: on SIGTSTP, SIGTTIN or SIGTTOU hwtune sends it to every group
and stops itself; SIGCONT is forwarded.
When hwtune's stdout (or stderr) is gone, say under `| head`, it closes its ends of the
instances' pipes for that stream, so they see SIGPIPE as they would writing to `head`. Any other
failure to write it (ENOSPC on a full disk, EIO) leaves the instances running: what they write
to it is dropped until it takes output again, and the other stream says so once.

Signals during start-up: the forwarded signals are blocked while an instance is forked and
exec'd, and unblocked once it is registered, so one that arrives meanwhile is delivered then
and reaches that instance too. SIGINT, SIGTERM and SIGQUIT (requests to stop) also keep the
instances not yet started from starting; SIGHUP, SIGUSR1 and SIGUSR2 are only forwarded, and
start-up goes on. A signal hwtune inherited as ignored (`nohup`) stays ignored, in the
instances too, as it would across `execve`.

A stop reaches the processes an instance starts as it arrives, too. kill(2) on a process
group reaches the members it has at that moment: a shell that was forking its command with
signals blocked (dash around vfork) gets SIGTERM once the fork is done, and dies of it, while
the child it just made was never sent it and runs on, orphaned, holding the instance's pipes.
So when an instance hwtune sent a stop to (a forwarded SIGINT, SIGTERM or SIGQUIT,
--fail-fast's SIGTERM and SIGKILL, or the SIGTERM and SIGKILL that stop the started ones when
another could not start) has ended, the stop is sent to its group once more before it is
reaped (its zombie still holds the group's number, so no other group can have it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, cast

from hwtune.apply.launch import (
    InstanceSpec,
    NumaPolicy,
    check_affinities,
    check_program,
    checked_environment,
    die_with_parent,
    not_started,
    pin_instance,
    shell_fallback,
)
from hwtune.errors import HwtuneError, stderr_line

FORWARDED_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    # Job control: the terminal sends these to its foreground process group only, which the
    # instances (each in a group of its own) are not part of, so Ctrl-Z would stop hwtune
    # and leave them running; `fg` and `bg` send SIGCONT to hwtune's group alone as well.
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGCONT,
)
# Requests to stop: after one, no further instance is started (the running ones get it).
STOP_SIGNALS = frozenset((signal.SIGINT, signal.SIGTERM, signal.SIGQUIT))
# Requests to suspend: once the instances have it, hwtune stops itself.
SUSPEND_SIGNALS = frozenset((signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU))
_POLL_S = 0.1  # how often children are polled while output is quiet
_PIPE_GRACE_S = 2.0  # how long a dead child's pipes may stay open (a grandchild holding them)
# How often _stop_started looks whether a stopped instance has ended: it waits without reaping
# (waitid WNOWAIT), which has no timeout, so it polls; start failures are rare and short.
_STOP_POLL_S = 0.01
_MAX_PARTIAL = 64 * 1024  # a "line" longer than this is flushed without waiting for "\n"


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128+N for a death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Launcher:
    """Runs several instances at once; see the module docstring for the behaviour."""

    def __init__(
        self,
        command: Sequence[str],
        specs: Sequence[InstanceSpec],
        *,
        stdout: IO[bytes] | None,
        stderr: IO[bytes] | None,
        policy: NumaPolicy = "bind",
        fail_fast: bool = False,
        kill_after: float = 10.0,
        prefix: bool = True,
    ) -> None:
        self.command = list(command)
        self.specs = list(specs)
        self.out = {number: s for number, s in ((1, stdout), (2, stderr)) if s is not None}
        self.policy: NumaPolicy = policy
        self.fail_fast = fail_fast
        self.kill_after = kill_after
        self.prefix = prefix
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.statuses: dict[int, int] = {}
        self._first_failure: int | None = None  # with fail_fast: the status hwtune exits with
        self._gone: set[int] = set()  # 1, 2: hwtune's stdout, stderr whose reader is gone
        self._failing: set[int] = set()  # 1, 2: whose last write failed otherwise (ENOSPC)
        self._stopping_since: float | None = None
        self._stop_signal: int | None = None  # the first stop request received
        self._handled: tuple[int, ...] = ()  # the signals forwarded (not inherited as ignored)
        # Each signal handled, with the instances registered when it was forwarded.
        self._received: list[tuple[int, frozenset[int]]] = []
        # The last stop signal sent to each instance's group, sent again when it has ended.
        self._stopped: dict[int, int] = {}

    def _forward(self, signum: int, _frame: object) -> None:
        if signum in STOP_SIGNALS and self._stop_signal is None:
            self._stop_signal = signum
        for index, child in self.children.items():
            if child.returncode is None:
                self._signal(index, child, signum)
        self._received.append((signum, frozenset(self.children)))
        if signum in SUSPEND_SIGNALS:
            # Then stop as the job's leader, as supervisors do (dumb-init stops itself this
            # way): SIGSTOP, which cannot be caught, so this handler does not run again; the
            # shell sees hwtune stopped, and its SIGCONT on `fg`/`bg` is forwarded in turn.
            os.kill(os.getpid(), signal.SIGSTOP)

    def _signal(self, index: int, child: subprocess.Popen[bytes], signum: int) -> None:
        """Send `signum` to instance `index`'s process group, noting a stop (see _reap)."""
        if signum in STOP_SIGNALS or signum == signal.SIGKILL:
            self._stopped[index] = signum
        _killpg(child.pid, signum)

    def _start(self, spec: InstanceSpec) -> subprocess.Popen[bytes]:
        """Fork and exec one instance; call it with the forwarded signals blocked.

        Blocked, because one arriving between fork and exec would run hwtune's handler in
        the child and be lost at exec. The child restores the default actions first, then
        unblocks, so a signal pending in it acts on the real command. Popen returns only once
        the exec succeeded (it waits for its error pipe to close), so by then the child leads
        its own process group and `_forward`'s killpg reaches it.
        """
        handled = self._handled
        parent = os.getpid()

        def child_setup() -> None:  # runs in the child between fork and exec
            die_with_parent(parent)
            for sig in handled:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
            os.setpgid(0, 0)
            pin_instance(
                spec.cpus, spec.numa_nodes, self.policy, lambda text: os.write(2, text.encode())
            )

        env = checked_environment(spec.env)
        try:
            try:
                return self._popen(self.command, env, child_setup)
            except OSError as err:
                fallback = (
                    shell_fallback(self.command, env) if err.errno == errno.ENOEXEC else None
                )
                if fallback is None:
                    raise
                return self._popen(fallback, env, child_setup)  # as execvp(3) does
        except OSError as err:
            raise not_started(self.command[0], err) from err
        except subprocess.SubprocessError as err:  # child_setup raised (e.g. an invalid CPU)
            raise HwtuneError(f"cannot start instance {spec.index}: {err}") from err

    def _popen(
        self, argv: list[str], env: dict[str, str], child_setup: Callable[[], None]
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            # A stream hwtune was started without (closed, `>&-`) is /dev/null for the
            # instances, as for one started under a closed descriptor whose writes fail:
            # they run, and what they write there goes nowhere.
            stdout=subprocess.PIPE if 1 in self.out else subprocess.DEVNULL,
            stderr=subprocess.PIPE if 2 in self.out else subprocess.DEVNULL,
            preexec_fn=child_setup,
        )

    def _start_all(
        self, selector: selectors.BaseSelector, partial: dict[tuple[int, int], bytes]
    ) -> None:
        for spec in self.specs:
            # A signal arriving while this thread has them blocked stays pending and is handled
            # (and forwarded to this instance too) once they are unblocked, after the instance
            # is registered. But the kernel may deliver it to another thread instead (the NVML
            # probe's, if it is stuck), and then CPython runs the handler in this thread at
            # its next bytecode, possibly inside Popen, before the instance is registered: so
            # what was handled meanwhile without reaching it is forwarded to it afterwards.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
            try:
                if self._stop_signal is not None:
                    return
                handled_before = len(self._received)
                child = self._start(spec)
                self.children[spec.index] = child
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            for signum, reached in self._received[handled_before:]:
                if spec.index not in reached:
                    self._signal(spec.index, child, signum)
            for fd_number, pipe in ((1, child.stdout), (2, child.stderr)):
                if pipe is None:  # /dev/null: hwtune has no such stream
                    continue
                selector.register(pipe, selectors.EVENT_READ, (spec.index, fd_number))
                partial[(spec.index, fd_number)] = b""

    def run(self) -> int:
        check_program(self.command)
        check_affinities(self.specs)  # nothing starts if one instance cannot be pinned
        previous: dict[int, Any] = {}
        for sig in FORWARDED_SIGNALS:
            handler = signal.getsignal(sig)
            if handler == signal.SIG_IGN:
                continue  # inherited as ignored (nohup): stays ignored, as across execve
            # None: a handler not installed from Python, which cannot be put back as it was
            previous[sig] = signal.SIG_DFL if handler is None else handler
            signal.signal(sig, self._forward)
        self._handled = tuple(previous)
        selector = selectors.DefaultSelector()
        partial: dict[tuple[int, int], bytes] = {}
        try:
            try:
                self._start_all(selector, partial)
            except HwtuneError:
                self._stop_started()
                raise
            try:
                self._relay(selector, partial)
            except BaseException:
                # hwtune failing here (a bug, MemoryError) must not leave the instances to
                # PR_SET_PDEATHSIG's SIGKILL when it exits: they get SIGTERM first, as when
                # one could not start, and hwtune waits for them before the error goes on.
                self._stop_started()
                raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            selector.close()
        if not self.children and self._stop_signal is not None:
            return 128 + self._stop_signal  # stopped before any instance started
        if self._first_failure is not None:  # not the siblings fail_fast killed
            return exit_status(self._first_failure)
        return max((exit_status(code) for code in self.statuses.values()), default=0)

    def _relay(
        self, selector: selectors.BaseSelector, partial: dict[tuple[int, int], bytes]
    ) -> None:
        """Relay the instances' output and reap them until every one ended and its pipes
        closed."""
        exited_at: dict[int, float] = {}
        while selector.get_map() or len(self.statuses) < len(self.children):
            for key, _ in selector.select(timeout=_POLL_S):
                index, fd_number = key.data
                chunk = os.read(key.fd, 65536)
                if chunk:
                    self._emit(index, fd_number, partial, chunk)
                else:
                    self._close(selector, cast(IO[bytes], key.fileobj), index, fd_number, partial)
            self._close_gone_streams(selector, partial)
            self._reap(exited_at)
            self._close_orphaned_pipes(selector, exited_at, partial)
            self._enforce_fail_fast()

    def _stop_started(self) -> None:
        """An instance could not start: stop those already running (SIGTERM, then SIGKILL
        after `kill_after`), so none outlives hwtune with nobody reading its output."""
        live = [c for c in self.children.values() if c.poll() is None]
        for child in live:
            _killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.kill_after
        for child in live:
            stop = signal.SIGTERM
            while not _ended(child):
                if stop != signal.SIGKILL and time.monotonic() >= deadline:
                    stop = signal.SIGKILL
                    _killpg(child.pid, stop)
                time.sleep(_STOP_POLL_S)
            if child.returncode is None:
                # Ended, not yet reaped: what joined its group as the stop came gets it now,
                # as in _reap (the module docstring says why).
                _killpg(child.pid, stop)
            child.wait()
        for child in self.children.values():
            for pipe in (child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()

    def _emit(
        self, index: int, fd_number: int, partial: dict[tuple[int, int], bytes], chunk: bytes
    ) -> None:
        data = partial[(index, fd_number)] + chunk
        *lines, rest = data.split(b"\n")
        if len(rest) > _MAX_PARTIAL:
            lines.append(rest)
            rest = b""
        partial[(index, fd_number)] = rest
        if lines:
            self._write(
                index, fd_number, b"".join(self._tag(index) + line + b"\n" for line in lines)
            )

    def _tag(self, index: int) -> bytes:
        return f"[{index}] ".encode() if self.prefix else b""

    def _write(self, index: int, fd_number: int, data: bytes) -> None:
        if fd_number in self._gone:
            return
        stream = self.out[fd_number]
        try:
            write_fully(stream, data)
        except BrokenPipeError:
            # `hwtune exec … | head`: the reader is gone (EPIPE). Relaying stops, and the
            # instances' pipes for this stream are closed (_close_gone_streams), so each one's
            # next write to it gets SIGPIPE (EPIPE where ignored, pipe(7)) and it ends on its
            # own, as it would writing to `head` itself. The other stream is relayed on.
            self._gone.add(fd_number)
        except OSError as err:
            # Any other failure (ENOSPC on a full disk, EIO): the reader is still there and
            # the disk may get room again, so the instances go on (a training job must not
            # die of its log: SIGPIPE, or BrokenPipeError in Python, would end it) and what
            # they write meanwhile is dropped; hwtune must not die of it either (its death
            # would SIGKILL them all, PR_SET_PDEATHSIG). The other stream is told, once per
            # run of failures.
            if fd_number not in self._failing:
                self._failing.add(fd_number)
                self._note_failing(fd_number, err)
        else:
            if fd_number in self._failing:
                self._failing.discard(fd_number)
                name = "stdout" if fd_number == 1 else "stderr"
                self._note_other(
                    fd_number, stderr_line("exec", "note", f"its {name} takes output again")
                )

    def _note_failing(self, fd_number: int, err: OSError) -> None:
        name = "stdout" if fd_number == 1 else "stderr"
        code = errno.errorcode.get(err.errno or 0, str(err.errno))
        self._note_other(
            fd_number,
            stderr_line(
                "exec",
                "warning",
                f"cannot write to its {name} ({err.strerror or err} [{code}]); the instances "
                f"run on, and what they write to {name} is dropped until it takes output again",
            ),
        )

    def _note_other(self, fd_number: int, line: str) -> None:
        """Say `line` on the other stream than `fd_number`, if it can take it."""
        other = 2 if fd_number == 1 else 1
        if other in self._gone or other in self._failing or other not in self.out:
            return
        try:
            write_fully(self.out[other], (line + "\n").encode())
        except BrokenPipeError:
            self._gone.add(other)
        except OSError:
            pass  # its own failure is noted when an instance's output meets it

    def _close(
        self,
        selector: selectors.BaseSelector,
        pipe: IO[bytes],
        index: int,
        fd_number: int,
        partial: dict[tuple[int, int], bytes],
    ) -> None:
        selector.unregister(pipe)
        rest = partial.pop((index, fd_number), b"")
        if rest:
            self._write(index, fd_number, self._tag(index) + rest + b"\n")
        pipe.close()

    def _close_gone_streams(
        self, selector: selectors.BaseSelector, partial: dict[tuple[int, int], bytes]
    ) -> None:
        """Close hwtune's read end of every instance's pipe to a stream whose reader is gone.

        Done between selects, not in _write: a pipe closed there may still be in the events
        the current select returned, and its descriptor number reused meanwhile.
        """
        for key in list(selector.get_map().values()):
            index, fd_number = key.data
            if fd_number in self._gone:
                self._close(selector, cast(IO[bytes], key.fileobj), index, fd_number, partial)

    def _reap(self, exited_at: dict[int, float]) -> None:
        for index, child in self.children.items():
            if index in self.statuses or not _ended(child):
                continue
            stop = self._stopped.get(index)
            if stop is not None and child.returncode is None:
                # Its zombie still holds the group's number: what joined the group as the
                # stop was sent (see the module docstring) gets it now.
                _killpg(child.pid, stop)
            if child.poll() is not None:
                self.statuses[index] = child.returncode
                exited_at[index] = time.monotonic()
                if self.fail_fast and child.returncode != 0 and self._first_failure is None:
                    # The failure that set fail_fast off: the siblings killed after it are
                    # hwtune's doing, and their 143 or 137 would hide its status.
                    self._first_failure = child.returncode

    def _close_orphaned_pipes(
        self,
        selector: selectors.BaseSelector,
        exited_at: dict[int, float],
        partial: dict[tuple[int, int], bytes],
    ) -> None:
        now = time.monotonic()
        for key in list(selector.get_map().values()):
            index, fd_number = key.data
            if index in exited_at and now - exited_at[index] > _PIPE_GRACE_S:
                self._close(selector, cast(IO[bytes], key.fileobj), index, fd_number, partial)

    def _enforce_fail_fast(self) -> None:
        if not self.fail_fast:
            return
        failed = any(code != 0 for code in self.statuses.values())
        live = [(i, c) for i, c in self.children.items() if c.returncode is None]
        if not failed or not live:
            return
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            for index, child in live:
                self._signal(index, child, signal.SIGTERM)
        elif time.monotonic() - self._stopping_since > self.kill_after:
            for index, child in live:
                self._signal(index, child, signal.SIGKILL)


def write_fully(stream: IO[bytes], data: bytes) -> None:
    """Write all of `data` to `stream`, waiting for room where its descriptor is non-blocking.

    A parent may hand hwtune a stdout with O_NONBLOCK set (the flag belongs to the open file,
    shared by every process holding it): a BufferedWriter then raises BlockingIOError on
    EAGAIN and what it did not write is lost, so the descriptor is written directly, in a loop,
    with poll(2) for POLLOUT between tries. A stream without a descriptor (io.BytesIO) is
    written as it is.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        stream.write(data)
        stream.flush()
        return
    while True:  # what the stream buffered before goes first
        try:
            stream.flush()
            break
        except BlockingIOError:
            _wait_writable(fd)
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            _wait_writable(fd)
            continue
        view = view[written:]


def _wait_writable(fd: int) -> None:
    """Until `fd` can take a write, or has an error or hang-up (the next write reports it)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        poller.poll()
    else:
        select.select([], [fd], [fd])


def _ended(child: subprocess.Popen[bytes]) -> bool:
    """Whether `child` has ended, leaving it unreaped (waitid(2) with WNOWAIT) where the
    platform allows: a zombie, whose PID no new process or group can take yet."""
    if child.returncode is not None:
        return True
    if not hasattr(os, "waitid"):  # macOS before Python 3.13: reaped at once, nothing resent
        return child.poll() is not None
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already (SIGCHLD ignored): nothing holds the PID
        child.poll()  # sets returncode, so nothing is sent to the number
        return True


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(pgid, signum)
