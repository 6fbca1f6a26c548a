"""Directories hwtune creates with an exact mode, and paths no other user can change.

`make_dirs(path, mode)` creates each missing level itself, with `mode` set by fchmod after the
mkdir, so the umask changes nothing: `Path.mkdir(mode, parents=True)` applies the mode to the
last level only and gives the parents 0777 & ~umask (0777 under umask 000; pathlib docs), and
even the last level is `mode & ~umask` (0700 under umask 077, where jobs cannot read
/etc/hwtune).

`check_trusted_path(directory)` walks every component from "/" with
`openat(O_NOFOLLOW | O_DIRECTORY)` on the directory reached so far, following a symbolic link
only by reading it (never through the kernel) and checking each directory it passes: a path is
trusted when no user but root can change where it leads. A directory is safe to pass through
when root owns it and neither its group nor others may write it, or, writable by others, it
has the sticky bit and the next entry is root's (then only root may rename or remove that
entry: /tmp). The last directory, where hwtune writes, may be writable by no one but root
(a sticky directory still lets others plant files that stay theirs, or hold and hard-link
`.lock`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hwtune.errors import ApplyError

# The kernel's limit on links followed in one lookup (path_resolution(7): "a maximum of 40").
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def make_dirs(directory: Path, mode: int) -> None:
    """Create `directory` and every missing parent with exactly `mode`; existing ones are
    left as they are. Raises OSError (the caller names the step)."""
    missing: list[Path] = []
    level = Path(directory).absolute()  # not normalised: `link/..` goes where the kernel goes
    while not os.path.lexists(level):
        missing.append(level)
        if level.parent == level:
            break
        level = level.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)  # no wider than the final mode while it is being set
        except FileExistsError:
            continue  # made by someone else meanwhile: theirs, not ours to chmod
        fd = os.open(path, _DIR_FLAGS)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def owner_name(uid: int) -> str:
    """'nobody (uid 65534)', or 'uid 1234' when the user database does not know it."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _quoted(path: str) -> str:
    """`path` as one shell word, for the commands in the hints (as apply's `hwtune revert
    --output` hint is): pasted, a directory with a space changed another one, and a `;` ran
    the rest. shlex is imported only when refusing: configure()'s warm path imports this
    module (`make_dirs`)."""
    import shlex

    return shlex.quote(path)


def _refuse(path: str, why: str, hint: str) -> ApplyError:
    return ApplyError(
        f"refusing to write under {path}: {why}, so another user could redirect hwtune's "
        "writes (running as root) elsewhere",
        hint=hint,
    )


def _others_write(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def check_trusted_path(directory: Path, *, option: str = "--output") -> None:
    """ApplyError unless no user but root can change any component of `directory`.

    `option`: how the command takes the directory, for the hints ("" for a positional DIR).

    Missing components end the walk quietly: creating them reports its own error. The path is
    walked as given, never normalised as text: `link/..` is the parent of the link's target,
    as the kernel resolves it (path_resolution(7); os.path.normpath "may change the meaning of
    a path that contains symbolic links")."""
    given = f" with {option}" if option else ""
    pending = [p for p in os.fspath(Path(directory).absolute()).split("/") if p][::-1]
    chain: list[tuple[int, str, os.stat_result]] = []
    fd = os.open("/", _DIR_FLAGS)
    chain.append((fd, "/", os.fstat(fd)))
    links = 0
    try:
        while pending:
            name = pending.pop()
            fd, where, st = chain[-1]
            if name == ".":
                continue
            if name == "..":
                if len(chain) > 1:
                    os.close(chain.pop()[0])
                continue
            path = os.path.join(where, name)
            try:
                entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if _others_write(st) and entry.st_uid != 0:
                raise _refuse(
                    path,
                    f"{where} (mode {stat.S_IMODE(st.st_mode):04o}) is writable by others "
                    f"and {name} in it belongs to {owner_name(entry.st_uid)}",
                    "use a directory owned by root along the whole path (chown root: "
                    f"{_quoted(path)})",
                )
            if stat.S_ISLNK(entry.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise _refuse(path, "it has too many symbolic links", "use a plain path")
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    while len(chain) > 1:
                        os.close(chain.pop()[0])
                pending.extend([p for p in target.split("/") if p][::-1])
                continue
            if not stat.S_ISDIR(entry.st_mode):
                return  # not a directory: opening it as one reports the error itself
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    return
                raise
            child_st = os.fstat(child)
            chain.append((child, path, child_st))
            if child_st.st_uid != 0:
                raise _refuse(
                    path,
                    f"it is owned by {owner_name(child_st.st_uid)}, who could replace its entries",
                    f"make root its owner (chown root: {_quoted(path)}; chmod go-w "
                    f"{_quoted(path)}), or choose "
                    f"another directory{given}",
                )
            mode = stat.S_IMODE(child_st.st_mode)
            if _others_write(child_st) and not (pending and mode & stat.S_ISVTX):
                who = "everyone" if mode & stat.S_IWOTH else "its group"
                sticky = (
                    " (the sticky bit does not stop others planting files)"
                    if (mode & stat.S_ISVTX)
                    else ""
                )
                # A shared sticky directory (/tmp) is meant to be writable by everyone:
                # "chmod go-w" on it would break every other user of the machine.
                hint = (
                    f"choose a directory of your own{given} (e.g. one made with "
                    f"`mkdir -m 0755` inside {path})"
                    if mode & stat.S_ISVTX
                    else f"chmod go-w {_quoted(path)}, or choose another directory{given}"
                )
                raise _refuse(path, f"it is writable by {who} (mode {mode:04o}){sticky}", hint)
    finally:
        for held, _, _ in chain:
            os.close(held)
