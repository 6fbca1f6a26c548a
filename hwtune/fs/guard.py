"""What `hwtune apply` refuses to write through or into (issue 7: planted links, foreign dirs).

- An output file that is a symbolic link, or anything but a regular file, is refused: another
  user may have planted it (a link to /etc/shadow in a shared directory). It is read with
  O_NOFOLLOW, so neither `--diff` nor the journal ever sees a link target's contents.
- Running as root, an output directory (or its `.journal`) that another user could change is
  refused: one owned by another user, writable by others (sticky or not), or reached through
  a directory or link another user controls (`trust.check_trusted_path`). Whoever can write
  there can swap files or links under hwtune at any moment, between any check and the write.

Each refusal is an `ApplyError` naming the path and its owner, with a hint.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hwtune.errors import ApplyError
from hwtune.fs.trust import check_trusted_path, owner_name

_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def refuse_unless_regular(path: Path, st: os.stat_result) -> None:
    """ApplyError unless `st` (from lstat or fstat) is a regular file."""
    if stat.S_ISREG(st.st_mode):
        return
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
    if stat.S_ISDIR(st.st_mode):
        raise ApplyError(f"{path} is a directory; hwtune will not replace it")
    raise ApplyError(
        f"refusing to replace {path}: it is {kind} (owned by {owner_name(st.st_uid)}), "
        "not a file hwtune wrote",
        hint=f"someone put it there: check who, remove {path} if it is not wanted, and run "
        "it again (hwtune replaces only regular files and never writes through a link)",
    )


def read_regular(path: Path) -> tuple[bytes, int] | None:
    """(bytes, permission bits) of the regular file at `path`; None when it does not exist.

    Never follows a symbolic link: one is refused (ApplyError), as is a FIFO, device or
    directory, checked before opening (opening a FIFO would block) and again on the open file
    (in case it was swapped in between). Other errors are raised as OSError (ApplyError is
    one too: callers that wrap OSError must let it through).
    """
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        return None
    refuse_unless_regular(path, before)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:  # replaced by a link after the lstat
            refuse_unless_regular(path, os.lstat(path))
        raise
    try:
        st = os.fstat(fd)
        refuse_unless_regular(path, st)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def check_directory(directory: Path, *, euid: int | None = None, option: str = "--output") -> None:
    """Refuse a directory others could swap files in, when running as root.

    As root, every component of `directory` is walked from "/" without following links
    through the kernel (`trust.check_trusted_path`): each must be root's and writable by no
    one else (a sticky directory such as /tmp may be passed through to an entry root owns),
    and `directory` itself must be writable by root alone, sticky or not (issue 15: in a 1777
    directory others plant files that stay theirs, hold `.lock`, or hard-link it to a file
    root then truncates). A non-root user writes with only their own rights: nothing is checked.
    """
    if (os.geteuid() if euid is None else euid) != 0:
        return
    try:
        check_trusted_path(directory)
    except ApplyError:
        raise
    except OSError:
        return  # unreadable: creating or opening it reports the error itself


def check_journal_directory(journal: Path, *, euid: int | None = None) -> None:
    """The journal must be a real directory (not a link to elsewhere), and trusted as root."""
    try:
        st = os.lstat(journal)
    except FileNotFoundError:
        return  # created by the first apply (mode 0700)
    except OSError:
        return  # reading it reports the error itself
    if not stat.S_ISDIR(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a directory")
        raise ApplyError(
            f"refusing to use the journal {journal}: it is {kind} (owned by "
            f"{owner_name(st.st_uid)}), not the directory hwtune created",
            hint=f"remove {journal} (hwtune recreates it) and run it again",
        )
    check_directory(journal, euid=euid)
