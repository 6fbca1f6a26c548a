"""One daemon per output directory: `OUTPUT/.daemon.lock`, flocked for the daemon's life.

Two daemons on one `--output` (hwtune.service, and the same command started by hand to watch
it) each rewrite the files from their own plan at their own changes, and neither notices the
other's rewrite (renames over names that stay), so the profile on disk is whichever wrote
last, and each one's `STATUS=` describes files that may not be there. The second daemon now
stops at start, naming the first one's pid. `hwtune apply` does not take this lock: it takes
the directory's write lock (`fs.atomic.locked`) for each apply, as the daemon does.

flock, as for the write lock: it is released when the holder exits, however it exits. A lock
file deleted (`rm -rf OUTPUT`, a clean-up of dotfiles) no longer excludes anyone: a daemon
started then would take a new one beside the first, which still holds the old. So the
daemon checks at every poll, and when its lock file is deleted (watched like its outputs),
that its descriptor is still the file at that name (`is_current`), and takes the lock again
before it puts its files back; should another daemon have taken it first, the one that lost
its file stops, so that one daemon is left, as at start. Either way the daemon that stops
exits 6 (`ExitStatus.LOCKED`, as `hwtune apply` does for a lock held past its timeout), not
the 1 of a failure: hwtune.service restarts the daemon on failure (Restart=on-failure), and
every restart found the lock held again, every RestartSec=5s for as long as the other one
ran, so the unit lists 6 in RestartPreventExitStatus= and the service stays stopped.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from hwtune.errors import HwtuneError
from hwtune.fs.atomic import ensure_dir, holder_named, open_lock_file, write_holder
from hwtune.status import ExitStatus

LOCK_NAME = ".daemon.lock"


class AlreadyRunning(HwtuneError):
    """Another daemon (or any other process) holds the output directory's `.daemon.lock`:
    `hwtune daemon` exits `ExitStatus.LOCKED` for it, which systemd/hwtune.service lists in
    RestartPreventExitStatus=, since a restart would find the lock held again."""

    code = "daemon-already-running"


# What to do, for the message: the one holding the lock may be the service (this one was
# started by hand) or one started by hand (this one is the service, which systemd then leaves
# stopped: RestartPreventExitStatus= in systemd/hwtune.service).
HINT = (
    "stop that one first (`systemctl stop hwtune.service` when it is the service, `kill PID` "
    "otherwise) and start this one again, or give this one another --output; systemd does "
    f"not restart hwtune.service after this exit (status {int(ExitStatus.LOCKED)})"
)


def hold_output(
    output: Path, then: str = "not starting a second one"
) -> tuple[int | None, str | None]:
    """(descriptor of `output/.daemon.lock`, flocked: close it to let go; None and the reason
    when the lock cannot be had for any reason but another daemon).

    AlreadyRunning when another daemon holds it (its message ends with `then`). Anything
    else (a read-only or missing directory, a planted link: the link is never followed,
    O_NOFOLLOW) is what the first apply reports too, as a failure it retries
    (docs/daemon.md, "Failures never stop it"), so the daemon runs without the lock rather
    than refusing to start over it. An OSError from flock itself (ENOLCK: NFS without
    lockd) is raised, the file closed; the daemon takes it as one more such reason
    (`Daemon._hold`)."""
    path = output / LOCK_NAME
    try:
        ensure_dir(output)  # as root, refuses a directory others could swap files in
        fd = open_lock_file(path)  # never through a link, never a file with other links
    except HwtuneError as err:  # ApplyError: both name the path and the reason
        return None, err.message
    except OSError as err:
        return None, f"cannot open {path}: {err.strerror or err}"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = holder_named(fd, "hwtune daemon")
        os.close(fd)
        doing = (
            f"keeps {output} current (it holds {path})"
            if holder.startswith("another hwtune")
            else f"holds {path}, the lock a daemon keeps {output} current under"
        )
        raise AlreadyRunning(f"{holder} {doing}; {then}", hint=HINT) from None
    except BaseException:  # ENOLCK (an NFS mount without lockd), EINTR: not left open
        os.close(fd)
        raise
    write_holder(fd)  # the pid is for the message above only
    return fd, None


def is_current(fd: int, output: Path) -> bool:
    """Whether `fd` (from `hold_output`) is still the file named `output/.daemon.lock`: False
    once it was deleted (alone or with its directory) or replaced, and when that name cannot
    be looked at. One lstat and one fstat, cheap enough for every poll."""
    try:
        named = os.lstat(output / LOCK_NAME)
        held = os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
