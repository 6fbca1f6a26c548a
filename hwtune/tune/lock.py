"""One `hwtune tune` at a time per user: two searches on one machine measure each other.

Each run's trials would load the CPUs the other's are measured on, in a pattern that changes
from trial to trial (start-up, import, measurement), which the per-round blocking of
hwtune.tune.stats cannot remove; and the one finishing last would replace the other's result.
The lock is an flock on `.tune.lock` in the user's cache directory ($XDG_CACHE_HOME/hwtune, not
the tuned directory, where only results belong), released however the holder exits. Where
that directory cannot be written (a read-only HOME), tuning goes on unlocked, with a warning
saying so (a --no-store run in a read-only container need not fail for it).

As root, the directory must be one no other user can change, as `hwtune apply` requires of
its output (`hwtune.fs.guard.check_directory`): O_NOFOLLOW guards only the lock file itself,
and with $XDG_CACHE_HOME in a shared /tmp another user's `hwtune` link there made root create
`.tune.lock` in any directory they chose. That is a TuneError, not a warning: tuning is an
explicit command, and its user can choose another XDG_CACHE_HOME.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from hwtune import paths
from hwtune.errors import ApplyError, NoHomeError, TuneError, stderr_line
from hwtune.fs.atomic import holder_named
from hwtune.fs.guard import check_directory
from hwtune.fs.streams import warn
from hwtune.fs.trust import make_dirs

LOCK_NAME = ".tune.lock"


def warn_on_stderr(message: str) -> None:
    warn(stderr_line("tune", "warning", message))


@contextlib.contextmanager
def one_tune_at_a_time(
    environ: Mapping[str, str], warn: Callable[[str], None] = warn_on_stderr
) -> Iterator[None]:
    """Hold the tune lock, or TuneError naming the run that holds it; `warn` is told when
    there is no lock to hold."""
    try:
        directory = Path(paths.cache_dir(environ))
    except NoHomeError as err:
        warn(
            f"no lock: {err.message}: tuning unlocked, so another hwtune tune started "
            "meanwhile would load these trials' CPUs (set HOME or XDG_CACHE_HOME)"
        )
        yield
        return
    lock = directory / LOCK_NAME
    try:
        # Checked before the missing levels are made (none is made under another user's
        # directory) and again after (one someone else made meanwhile is theirs).
        check_directory(directory, option="XDG_CACHE_HOME")
        make_dirs(directory, 0o700)
        check_directory(directory, option="XDG_CACHE_HOME")
        # O_NOFOLLOW: a planted link is refused, not truncated through
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except ApplyError as err:  # an OSError too: refused, not a directory that cannot be written
        raise TuneError(f"cannot take the tune lock: {err.message}", hint=err.hint) from err
    except OSError as err:
        warn(
            f"cannot take the lock {lock} ({err.strerror or err}): tuning unlocked, so "
            "another hwtune tune started meanwhile would load these trials' CPUs "
            "(set XDG_CACHE_HOME to a writable directory)"
        )
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # The pid in the file is the last tune's, maybe long gone: /proc/locks says who
            # holds the lock now (hwtune.fs.holder), as apply's and the daemon's messages do.
            holder = holder_named(fd, "hwtune tune")
            raise TuneError(
                f"{holder} holds {lock}: a tune measuring on this machine meanwhile would "
                "load the CPUs these trials are measured on",
                hint="wait for it to finish, or stop it",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
