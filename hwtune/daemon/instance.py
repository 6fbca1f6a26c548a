"""One daemon per output directory: `OUTPUT/.daemon.lock`, flocked for the daemon's life.

Two daemons on one `--output` (hwtune.service, and the same command started by hand to watch
it) each rewrite the files from their own plan at their own changes, and neither notices the
other's rewrite (renames over names that stay), so the profile on disk is whichever wrote
last, and each one's `STATUS=` describes files that may not be there. The second daemon now
stops at start, naming the first one's pid. `hwtune apply` does not take this lock: it takes
the directory's write lock (`fs.atomic.locked`) for each apply, as the daemon does.

flock, as for the write lock: it is released when the holder exits, however it exits. A lock
file deleted with the whole directory (`rm -rf OUTPUT`) no longer excludes anyone; the daemon
puts its files back, not its lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from hwtune.errors import HwtuneError
from hwtune.fs.atomic import ensure_dir, open_lock_file, read_holder, write_holder

LOCK_NAME = ".daemon.lock"


class AlreadyRunning(HwtuneError):
    """Another daemon keeps the same output directory current."""

    code = "daemon-already-running"


def hold_output(output: Path) -> tuple[int | None, str | None]:
    """(descriptor of `output/.daemon.lock`, flocked: close it to let go; None and the reason
    when the lock cannot be had for any reason but another daemon).

    AlreadyRunning when another daemon holds it. Anything else (a read-only or missing
    directory, a planted link: the link is never followed, O_NOFOLLOW) is what the first
    apply reports too, as a failure it retries (docs/daemon.md, "Failures never stop it"),
    so the daemon runs without the lock rather than refusing to start over it."""
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
        holder = read_holder(fd)
        os.close(fd)
        raise AlreadyRunning(
            f"another hwtune daemon{holder} keeps {output} current (it holds {path}); "
            "not starting a second one",
            hint="stop the other one first (systemctl stop hwtune.service), or give this "
            "one another --output",
        ) from None
    except BaseException:  # ENOLCK (an NFS mount without lockd), EINTR: not left open
        os.close(fd)
        raise
    write_holder(fd)  # the pid is for the message above only
    return fd, None
