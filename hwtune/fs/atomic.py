"""Atomic file replacement and the output-directory lock.

A file is written as a temporary file in the same directory (so `rename` cannot cross file
systems), flushed with fsync, given its final mode, renamed over the target, and the directory
is fsynced so the rename itself survives a crash (rename(2), fsync(2): "calling fsync() on a
file descriptor for the file does not ensure that the entry in the directory containing the
file has also reached disk"). A reader therefore sees the old file or the new one, never a
mix; a failure at any step leaves the old file untouched and removes the temporary file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shlex
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hwtune.errors import ApplyError, LockTimeout
from hwtune.fs.guard import check_directory, refuse_unless_regular
from hwtune.fs.holder import lock_holder
from hwtune.fs.trust import make_dirs, owner_name
from hwtune.models.digits import is_ascii_digits

TMP_MARK = ".hwtune-tmp-"
LOCK_NAME = ".lock"
# How often a waiting apply retries the lock: short enough to feel immediate, long enough not
# to spin (flock has no timeout of its own).
_LOCK_POLL_S = 0.05

_HINTS = {
    errno.ENOSPC: "the file system is full; free some space and run it again",
    errno.EDQUOT: "the disk quota is exhausted; free some space and run it again",
    errno.EROFS: "the file system is read-only; choose another directory with --output",
    errno.EACCES: "permission denied; run as root or choose a directory with --output",
    errno.EPERM: "permission denied; run as root or choose a directory with --output",
}


INTACT = "the previous file is intact"
NOTHING_WRITTEN = "there was no previous file, and none was written"
UNCHANGED = "nothing was changed"  # a step before any file is touched (directory, lock)


def failure(action: str, path: Path, err: OSError, state: str = INTACT) -> ApplyError:
    """An ApplyError that names the file, the step, the system's reason and what is on disk
    now (`state`: say so when it is not the previous file, issue 15 item 10)."""
    reason = err.strerror or str(err)
    hint = _HINTS.get(err.errno or 0)
    if err.errno == errno.EPERM and os.geteuid() == 0:
        # Root is refused EPERM by file attributes, not permissions: "run as root" misleads.
        hint = (
            f"root was refused: {path.name} or its directory may be immutable or append-only "
            f"(`lsattr -d {shlex.quote(str(path))} {shlex.quote(str(path.parent))}`; "
            "`chattr -i`/`chattr -a` clears them)"
        )
    elif err.errno == errno.EACCES and os.geteuid() == 0:
        # Root is refused EACCES by the file system, not by modes: an NFS export with
        # root_squash (exports(5)) maps root to nobody; /sys and /proc refuse new files.
        hint = (
            f"root was refused by the file system under {path.parent} (an NFS export with "
            "root_squash, or a file system that takes no new files); choose a directory "
            "with --output"
        )
    return ApplyError(f"could not {action} {path}: {reason}; {state}", hint=hint)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace `path` with `data` atomically; mode is set exactly (the umask does not apply).

    With `durable=False` the fsyncs are skipped (caches that may be lost on a crash).
    Raises ApplyError naming the file and the reason; the previous file, if any, is left intact
    (the error says which).
    """
    directory = path.parent
    tmp = directory / f".{path.name}{TMP_MARK}{os.getpid()}-{time.monotonic_ns()}"
    state = INTACT if os.path.lexists(path) else NOTHING_WRITTEN
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise failure("create a temporary file for", path, err, state) from err
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        _unlink_quietly(tmp)
        raise failure("write", path, err, state) from err
    except BaseException:
        # Ctrl-C (KeyboardInterrupt) or a signal handler's SystemExit mid-write: the temporary
        # file must go too. Nothing sweeps configure()'s cache directory, so every job
        # interrupted while it stored its profile left one there for good.
        _unlink_quietly(tmp)
        raise
    if durable:
        try:
            fsync_dir(directory)
        except OSError as err:  # the rename happened; durability is what is in doubt
            raise failure(
                "sync the directory of",
                path,
                err,
                "the new file is in place but may not survive a crash",
            ) from err


def remove_durably(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as err:
        raise failure("remove", path, err) from err
    fsync_dir(path.parent)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete temporary files left by a writer that was killed midway (call under the lock)."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if entry.name.startswith(".") and TMP_MARK in entry.name and entry.is_file():
            _unlink_quietly(Path(entry.path))
            removed.append(Path(entry.path))
    return removed


def ensure_dir(directory: Path, mode: int = 0o755) -> None:
    """Create `directory` and its missing parents with exactly `mode`, whatever the umask
    (`trust.make_dirs`): /etc/hwtune stays readable by jobs under umask 077, and no level
    is 0777 under umask 000. As root, the existing part of the path is checked first
    (`guard.check_directory`), so nothing is created through a link another user controls."""
    check_directory(directory)
    try:
        make_dirs(directory, mode)
    except OSError as err:
        raise failure("create the directory", directory, err, UNCHANGED) from err
    if not directory.is_dir():
        raise ApplyError(f"{directory} exists and is not a directory")


@contextmanager
def locked(
    directory: Path, timeout: float = 30.0, *, while_waiting: Callable[[], None] | None = None
) -> Iterator[None]:
    """Hold an exclusive flock on `directory/.lock`; LockTimeout after `timeout` seconds.

    `while_waiting` is called between tries while another process holds the lock; it may
    raise to give up the wait (the daemon does on SIGTERM: systemd's stop timeout is shorter
    than the lock timeout). Nothing has been written when it does.

    Running as root, a directory others could swap files in is refused first
    (`guard.check_directory`), and the lock file is never opened through a link.

    flock (not fcntl record locks) because it belongs to the open file description: it is
    released when the holder exits, however it exits, and a second open in the same process
    conflicts too, so two threads of a daemon serialise like two processes.
    """
    ensure_dir(directory)
    check_directory(directory)
    lock_path = directory / LOCK_NAME
    fd = open_lock_file(lock_path)
    try:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"{holder_named(fd, 'hwtune apply')} holds {lock_path} "
                        f"(waited {timeout:g} s); nothing was changed",
                        hint="wait for it to finish, or raise --lock-timeout",
                    ) from None
                if while_waiting is not None:
                    while_waiting()
                time.sleep(_LOCK_POLL_S)
        write_holder(fd)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# A lock file is its owner's alone: flock(2) needs only an open descriptor, a read-only one
# too, so a lock file others may read is one any local user can hold forever (every apply
# then timed out, and `hwtune daemon` would not start, "another daemon holds it").
LOCK_MODE = 0o600


def open_lock_file(lock_path: Path) -> int:
    """`lock_path` opened (created LOCK_MODE) for flock, checked as `_check_lock_file` does;
    an ApplyError names it otherwise. The daemon's `.daemon.lock` is opened the same way."""
    try:
        # O_NOFOLLOW: a lock-file link planted by another user must not be truncated through.
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(lock_path, flags, LOCK_MODE)
    except OSError as err:
        if err.errno == errno.ELOOP:  # a link: refused, naming its owner
            refuse_unless_regular(lock_path, os.lstat(lock_path))
        raise failure("open the lock file", lock_path, err, UNCHANGED) from err
    try:
        _check_lock_file(lock_path, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_lock_file(lock_path: Path, fd: int) -> None:
    """The lock file must be ours alone: a hard link to another file (st_nlink > 1) would be
    truncated by `_write_holder`, and one another user owns (as root) they can hold forever.
    Its mode is set exactly (LOCK_MODE: one left readable by others, as hwtune made them
    before, is closed to new openers)."""
    st = os.fstat(fd)
    refuse_unless_regular(lock_path, st)
    foreign = os.geteuid() == 0 and st.st_uid != 0
    if st.st_nlink != 1 or foreign:
        why = (
            f"it has {st.st_nlink} hard links"
            if st.st_nlink != 1
            else f"it is owned by {owner_name(st.st_uid)}"
        )
        raise ApplyError(
            f"refusing to use the lock file {lock_path}: {why}; hwtune creates it alone",
            hint=f"someone put it there: check who, remove {lock_path} and run it again",
        )
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != LOCK_MODE:
        os.fchmod(fd, LOCK_MODE)


def write_holder(fd: int) -> None:
    """This process's pid into a held lock file: informational only (for the message of the
    one that waits), the flock is what excludes."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass


def read_holder(fd: int) -> int | None:
    """The pid `write_holder` left in the lock file (the last hwtune that held it, which may
    have exited since); None when there is none."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if is_ascii_digits(text) else None


def holder_named(fd: int, what: str) -> str:
    """Who holds the flock on `fd`, for a message: "another WHAT (pid N)" when it is hwtune,
    "another process (pid N)" when /proc/locks names another, "another process" when nothing
    says (hwtune.fs.holder: the recorded pid alone may be long gone)."""
    pid, hwtune = lock_holder(fd, read_holder(fd))
    who = f"another {what}" if hwtune else "another process"
    return who if pid is None else f"{who} (pid {pid})"
