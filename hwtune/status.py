"""Exit codes, documented in the README; scripts may rely on them."""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    SUCCESS = 0
    ERROR = 1  # a HwtuneError: bad input, refused or failed write; the message says which
    USAGE = 2  # bad command line (argparse)
    ISSUES = 3  # `detect --strict` / `plan --strict`: a probe failed or was partial
    WOULD_CHANGE = 4  # `apply --dry-run/--diff`: files would change
    MISMATCH = 5  # `verify`: a setting differs from the profile
    # another `hwtune apply` held the lock past --lock-timeout; `daemon`: another process
    # holds OUTPUT/.daemon.lock (systemd/hwtune.service lists it in RestartPreventExitStatus=)
    LOCKED = 6
    CANNOT_EXECUTE = 126  # `exec`: the command was found but could not be run (POSIX)
    NOT_FOUND = 127  # `exec`: the command was not found (POSIX, as env and nohup report it)
    INTERRUPTED = 130  # SIGINT, as shells report it
