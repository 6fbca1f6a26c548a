"""Who holds a flock, for the message of the process that waits for it.

The pid a lock file records is only the last hwtune that held it: a process that is not
hwtune (`flock DIR/.lock CMD`, a backup tool) takes the lock without writing it, and that pid
may be long gone or reused. /proc/locks names the process that holds a flock on each inode
(proc(5), "/proc/locks": "ID: FLOCK ADVISORY WRITE PID MAJOR:MINOR:INODE START END", a
blocked waiter's line with "->" after the ID), and /proc/PID/cmdline says whether it is hwtune.
"""

from __future__ import annotations

import os

from hwtune.models.digits import is_ascii_digits

PROC_LOCKS = "/proc/locks"


def parse_flock_holders(text: str, device: int, inode: int) -> set[int]:
    """The pids /proc/locks `text` lists as holding a flock on (`device`, `inode`); waiters and
    pids of another pid namespace (shown as 0) are left out."""
    # fs/locks.c lock_get_status: "%02x:%02x:%lu" of MAJOR(s_dev), MINOR(s_dev), i_ino.
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    found: set[int] = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":  # "->" in fields[1]: a waiter
            continue
        pid, where = fields[4], fields[5]
        if where == wanted and is_ascii_digits(pid) and int(pid) > 0:
            found.add(int(pid))
    return found


def flock_holders(fd: int) -> set[int] | None:
    """The pids holding a flock on `fd`'s file; None when /proc/locks cannot be read."""
    try:
        st = os.fstat(fd)
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as locks:
            text = locks.read()
    except OSError:
        return None
    return parse_flock_holders(text, st.st_dev, st.st_ino)


def parse_is_hwtune(cmdline: bytes) -> bool:
    """Whether a /proc/PID/cmdline (NUL-separated) runs hwtune: `hwtune ...`, `python
    /usr/bin/hwtune ...` or `python -m hwtune ...`; a path that merely has hwtune in it (an
    --output DIR of `flock hwtune-out/.lock sleep`) is not."""
    argv = [os.fsdecode(a) for a in cmdline.split(b"\0")[:3]] + ["", ""]
    program = os.path.basename(argv[0])
    if program == "hwtune":
        return True
    if not program.startswith("python"):
        return False
    return (
        os.path.basename(argv[1]) == "hwtune"
        or argv[1:3] == ["-m", "hwtune"]
        or argv[1] == "-mhwtune"
    )


def is_hwtune(pid: int) -> bool:
    """Whether process `pid` is alive and runs hwtune (False when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return parse_is_hwtune(f.read())
    except OSError:
        return False


def lock_holder(fd: int, recorded: int | None) -> tuple[int | None, bool]:
    """(pid, is hwtune) of who holds the flock on `fd`, as far as there is reason to believe:
    /proc/locks' holder (hwtune when it is the `recorded` pid the lock file holds, or runs
    hwtune), else `recorded` when it is a live hwtune; (None, False) when nothing says."""
    holders = flock_holders(fd)
    if holders:
        if recorded in holders:
            return recorded, True
        pid = min(holders)  # an exclusive flock has one holder
        return pid, is_hwtune(pid)
    if recorded is not None and is_hwtune(recorded):
        return recorded, True
    return None, False
