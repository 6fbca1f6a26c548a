"""What `hwtune apply` refuses to write through or into (issue 7: planted links, foreign dirs).

- An output file that is a symbolic link, or anything but a regular file, is refused: another
  user may have planted it (a link to /etc/shadow in a shared directory). It is read with
  O_NOFOLLOW, so neither `--diff` nor the journal ever sees a link target's contents.
- Running as root, an output directory (or its `.journal`) owned by another user, or writable
  by others without the sticky bit, is refused: whoever can write there can swap files or
  links under hwtune at any moment, between any check and the write.

Each refusal is an `ApplyError` naming the path and its owner, with a hint.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hwtune.errors import ApplyError

_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def owner_name(uid: int) -> str:
    """'nobody (uid 65534)', or 'uid 1234' when the user database does not know it."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


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


def check_directory(directory: Path, *, euid: int | None = None) -> None:
    """Refuse a directory others could swap files in, when running as root.

    As root, `directory` must be owned by root and must not be writable by its group or
    everyone unless the sticky bit is set (then only a file's owner may rename or remove it,
    as in /tmp). A non-root user writes with only their own rights, so nothing is checked.
    """
    if (os.geteuid() if euid is None else euid) != 0:
        return
    try:
        st = os.stat(directory)
    except OSError:
        return  # absent or unreadable: creating or opening it reports the error itself
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != 0:
        raise ApplyError(
            f"refusing to write into {directory}: it is owned by {owner_name(st.st_uid)}, "
            "who could replace the files in it (with links to other files) while hwtune, "
            "running as root, writes them",
            hint=f"make root its owner (chown root: {directory}; chmod go-w {directory}), "
            "or choose another directory with --output",
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        who = "everyone" if mode & stat.S_IWOTH else "its group"
        raise ApplyError(
            f"refusing to write into {directory}: it is writable by {who} (mode {mode:04o}, "
            f"owner {owner_name(st.st_uid)}) without the sticky bit, so other users could "
            "replace the files in it while hwtune, running as root, writes them",
            hint=f"chmod go-w {directory} (or +t), or choose another directory with --output",
        )


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
