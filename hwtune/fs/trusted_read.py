"""Reading a file hwtune did not just write: bounded, never blocking, and owner-checked.

The configure cache and tuned results are files hwtune wrote earlier, but what is at their path
now is input: another user may have planted something there (issue 15). `read_bounded`

- opens with O_NONBLOCK, so a FIFO at the path cannot hang the open (every job start reads
  the cache through `configure()`), and O_NOFOLLOW, so a symbolic link is refused rather than
  followed to a file its planter chose;
- reads only a regular file (fstat of the opened descriptor, so nothing can be swapped between
  the check and the read): not a FIFO, socket, directory or device (/dev/zero never ends);
- reads at most `max_bytes` (+1 to tell a file that is too large), so memory stays bounded;
- with `check_owner`, refuses a file owned by anyone but root or the effective user, or
  writable by its group or others: such a file may say anything its writer wants, and hwtune
  runs as root (`hwtune apply`, the daemon, Slurm prologs). hwtune writes its own files 0644
  (hwtune/fs/atomic.py), so a file it wrote always passes.

A refusal is a `RefusedFile` whose message names the path and the reason, for the caller to
turn into its own error or warning. Standard library only (os, stat): the configure cache's
warm path imports this module, and it must stay light.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


class RefusedFile(OSError):
    """A file that was not read: missing, unreadable, not a regular file, too large, or not
    trusted. `message` names the path and why; `missing` is True when nothing is there."""

    def __init__(self, path: str, why: str, *, missing: bool = False) -> None:
        super().__init__(f"{path}: {why}")
        self.message = f"{path}: {why}"
        self.why = why
        self.missing = missing

    def __str__(self) -> str:
        return self.message


def owner_problem(
    info: os.stat_result, euid: int | None = None, also: Collection[int] = ()
) -> str | None:
    """Why a file with this stat cannot be trusted by `euid` (default: this process), or None.

    Trusted: owned by root, by `euid` or by a uid in `also`, and writable by neither its group
    nor others."""
    me = os.geteuid() if euid is None else euid
    if info.st_uid not in (0, me, *also):
        return f"owned by uid {info.st_uid}, not by root or uid {me}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "others" if info.st_mode & stat.S_IWOTH else "its group"
        return f"writable by {who} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def read_capped(fd: int, limit: int, first: int = 1 << 16) -> bytes:
    """At most `limit` + 1 bytes from `fd` (one past the cap tells a file that is too large),
    asking for `first` bytes at a time. sysfs and procfs report st_size 4096 or 0 whatever the
    content, so the loop reads to the end rather than trusting the size."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit and (chunk := os.read(fd, min(first, limit + 1 - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_bounded(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    check_owner: bool,
    follow: bool = False,
    also_trusted: Collection[int] = (),
) -> bytes:
    """The whole content of the regular file at `path`, at most `max_bytes` long; RefusedFile
    otherwise (see the module docstring). `follow` lets a symbolic link lead to the file (a
    config file kept with the user's dotfiles); the target must still be a regular file.
    `also_trusted`: owners trusted besides root and this process (a watched process's uid)."""
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise RefusedFile(name, "a symbolic link; not followed") from None
        if err.errno == errno.ENOENT and os.path.islink(name):
            why = f"a symbolic link to {os.readlink(name)!r}, which does not exist"
            raise RefusedFile(name, why, missing=True) from None
        raise RefusedFile(
            name,
            f"cannot read: {err.strerror or err}",
            missing=err.errno == errno.ENOENT,
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise RefusedFile(name, f"{kind}, not a regular file; not read")
        if check_owner and (problem := owner_problem(info, also=also_trusted)):
            raise RefusedFile(name, f"{problem}; not trusted")
        if info.st_size > max_bytes:
            raise RefusedFile(name, f"larger than {max_bytes} bytes; not read")
        # Ask for the size fstat gave (+1 to see the end; at least 64 KiB, for file systems that
        # report 0), not a whole max_bytes buffer: configure() reads the cache at every start.
        data = read_capped(fd, max_bytes, max(min(info.st_size, max_bytes) + 1, 1 << 16))
    except OSError as err:
        if isinstance(err, RefusedFile):
            raise
        raise RefusedFile(name, f"cannot read: {err.strerror or err}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew since fstat
        raise RefusedFile(name, f"larger than {max_bytes} bytes; not read")
    return data
