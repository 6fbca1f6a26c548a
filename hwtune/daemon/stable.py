"""Read the config files only when no one is writing them (issue 15 item 11).

An editor that writes a config in place (truncate, write, pause, write) leaves a prefix that
is often valid TOML on its own: `mode = "latency"` without the `[threads]` table below it. The
daemon, woken by the first write, used to plan from that prefix and apply it, dropping the
user's overrides until the next write. So a config is read only when it is stable:

- Nobody has it open for writing. Linux tells this to the file's owner or a process with
  CAP_LEASE (the root daemon): `fcntl(F_SETLEASE, F_RDLCK)` fails with EAGAIN "if the file is
  open for writing" by anyone (fcntl(2), "Leases"). The lease is held only for the read and
  SIGIO (the lease-break signal) is ignored meanwhile.
- Where a lease cannot be taken (another owner, no CAP_LEASE), its last change is at least
  `QUIET_S` old, and its size, mtime and inode are the same before and after the read.

A file still being written after `WAIT_S` is a `HwtuneError`: the daemon keeps the last good
profile and retries at the next poll. A parse failure does the same (loop.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from hwtune.errors import HwtuneError

# fcntl(2): F_SETLEASE is F_LINUX_SPECIFIC_BASE (1024) + 0; Python's fcntl names it from 3.11.
F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
# Without a lease: a file changed this recently may still be in the middle of a write. Editors
# write a config in well under this; a person typing into `cat > config.toml` does not.
QUIET_S = 0.5
# How long one cycle waits for a writer to finish before it reports and retries next poll.
WAIT_S = 3.0
_STEP_S = 0.05
# A config is a few hundred bytes; anything past this is not one (the parser's cap is
# pipeline.config's business, this one bounds the read).
MAX_BYTES = 1 << 20


@contextlib.contextmanager
def _no_sigio() -> Iterator[None]:
    """Ignore SIGIO while a lease is held: a writer opening the file breaks the lease with
    SIGIO, whose default action ends the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGIO, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGIO, previous)


def _read_fd(fd: int, path: Path) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BYTES:
            # The daemon's log line is all an admin sees: it must say which file.
            raise HwtuneError(f"{path}: larger than {MAX_BYTES} bytes; not a config file")
    return b"".join(chunks)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_ino, a.st_size, a.st_mtime_ns) == (b.st_ino, b.st_size, b.st_mtime_ns)


def read_once(path: Path) -> tuple[str, bytes | None]:
    """("absent", None), ("busy", None) while someone writes it, or ("ok", bytes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "absent", None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise HwtuneError(f"{path}: not a regular file")
        with _no_sigio():
            try:
                fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
                leased = True
            except OSError as err:
                if err.errno == errno.EAGAIN:
                    return "busy", None  # open for writing by someone
                leased = False  # not ours and no CAP_LEASE: judge by the time and the stat
            try:
                data = _read_fd(fd, path)
            finally:
                if leased:
                    with contextlib.suppress(OSError):
                        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
        after = os.fstat(fd)
        if not _same(before, after):
            return "busy", None
        # A negative age (an mtime ahead of the clock: a clock stepped back, `tar x` from a
        # host whose clock was ahead) says nothing of a writer; the before/after check stays.
        if not leased and 0 <= time.time() - after.st_mtime_ns / 1e9 < QUIET_S:
            return "busy", None
        return "ok", data
    finally:
        os.close(fd)


def read_stable(
    paths: Sequence[Path],
    wait: float = WAIT_S,
    *,
    while_waiting: Callable[[], None] | None = None,
) -> dict[Path, bytes | None]:
    """Each config's bytes (None when absent), read when no one is writing it.

    `while_waiting()` is called between tries while a file is busy; it may raise to give up
    the wait (the daemon does on SIGTERM: systemd's stop timeout must not wait on an editor).
    """
    found: dict[Path, bytes | None] = {}
    deadline = time.monotonic() + wait
    for path in paths:
        while True:
            try:
                state, data = read_once(path)
            except OSError as err:
                raise HwtuneError(f"{path}: cannot read: {err.strerror or err}") from err
            if state != "busy":
                found[path] = data
                break
            if time.monotonic() >= deadline:
                raise HwtuneError(
                    f"{path} is still being written (waited {wait:g} s); not applied yet"
                )
            if while_waiting is not None:
                while_waiting()
            time.sleep(_STEP_S)
    return found
