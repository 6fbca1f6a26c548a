"""configure()'s record of what it set inside its process, for `hwtune verify` to read.

`/proc/PID/environ` holds the environment a process was started with; a `setenv` inside it
(which is what `hwtune.configure()` does) never shows there (proc(5)). So configure() writes
what it did to `configure-<pid>.json` in hwtune's runtime directory (`hwtune.paths.runtime_dir`:
`$XDG_RUNTIME_DIR/hwtune`, else `hwtune-<uid>` in the temporary directory, found as
tempfile.gettempdir() finds it), and verify reads it back.

- Written atomically: a temporary file opened O_EXCL|O_NOFOLLOW with mode 0600, then
  rename(2) over the record, so a reader sees a whole record or none.
- The directory is created 0700, and only it: a missing $XDG_RUNTIME_DIR or $TMPDIR is never
  created. A fallback directory in a shared /tmp is used only when it is a real directory (not
  a symbolic link) owned by this user and writable by nobody else. One another user made
  first (or linked) is refused, and said: once in configure()'s notes, and by `read`, so
  that verify says why there is no record rather than nothing.
- A record names its pid and the process's start time (field 22 of /proc/PID/stat), so a
  recycled pid never inherits another process's record; it is removed when the process exits
  normally (a multiprocessing child too, which leaves through os._exit: `_at_worker_exit`),
  and one left by a process killed by a signal (atexit does not run) is removed as the user's
  next process that ran configure() exits (`remove_stale`, kept off start-up).
- The reader trusts a record only when it is owned by the process's user or by the reader,
  and writable by nobody else.

This runs on configure()'s warm path, so it imports only small standard modules (atexit,
contextlib, json, os, stat). A failure to write only means verify cannot see inside the
process; configure() goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hwtune import paths
from hwtune.fs.trust import make_dirs

RECORD_SCHEMA = 1
MAX_RECORD_BYTES = 1 << 20  # a record is a few hundred bytes; a MiB is no record of ours
# Directory entries an exiting process looks at for records of processes that are gone: one
# per process of the user that ran configure(); past this many, the rest wait for the next.
MAX_SWEPT = 4096
# path -> the data last written there by this process: configure() records at its start and
# again once TensorFlow took the settings, often with nothing new; an equal record is not
# written again (it costs a directory check, a start-time read and a rename at job start).
_written: dict[str, dict[str, Any]] = {}
# path -> (the "env" section last written there, when it was first written so): see `write`.
_env_since: dict[str, tuple[Any, float | None]] = {}


def boot_seconds() -> float | None:
    """Seconds since boot by CLOCK_BOOTTIME, the clock a process's start time in
    /proc/PID/stat is counted by (proc(5), field 22, "the time the process started after
    system boot"; task->start_boottime in the kernel's kernel/fork.c). A kernel that counted
    it by CLOCK_MONOTONIC, never ahead of CLOCK_BOOTTIME (clock_gettime(2)), only makes a child
    look forked earlier than it was. None where the clock is missing (not Linux)."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return None if clock is None else time.clock_gettime(clock)


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot): with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    # The 2nd field (comm) is parenthesised and may hold spaces: split after the last ')'.
    fields = text[text.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def record_path(environ: Mapping[str, str], pid: int, *, uid: int | None = None) -> str:
    return os.path.join(paths.runtime_dir(environ, uid=uid), f"configure-{pid}.json")


def _private_dir(directory: str) -> str | None:
    """None when `directory` is usable for this process's records (made 0700 if missing),
    "" when it cannot be had (its parent missing, an error making it), else why it is refused:
    a link, or a directory another user owns or could change (a /tmp/hwtune-<uid> someone
    else made first)."""
    # Only hwtune's own level is made: its parent ($XDG_RUNTIME_DIR, the temporary directory)
    # is the system's or the user's, and one that is missing stays missing.
    if not os.path.isdir(os.path.dirname(directory)):
        return ""
    try:
        make_dirs(Path(directory), 0o700)  # 0o700 whatever the umask
        info = os.lstat(directory)
    except OSError:
        return ""
    return refusal(directory, info, os.geteuid())


def refusal(directory: str, info: os.stat_result, owner: int) -> str | None:
    """Why a runtime directory with this lstat is not `owner`'s private one, or None."""
    if (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == owner
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        return None
    from hwtune.fs.trust import owner_name

    whose = owner_name(info.st_uid)
    if stat.S_ISLNK(info.st_mode):
        what = f"a symbolic link owned by {whose}"
    elif not stat.S_ISDIR(info.st_mode):
        what = f"not a directory (owned by {whose})"
    elif info.st_uid != owner:
        what = f"owned by {whose}, not {owner_name(owner)}"
    else:
        what = f"writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return f"{directory} is {what}, so configure() keeps no records there for `hwtune verify`"


# Runtime directories this process refused, already noted (configure() records at its start
# and again when TensorFlow is imported; a program may call it more than once).
_noted: set[str] = set()


def write(
    data: dict[str, Any], environ: Mapping[str, str] | None = None, notes: list[str] | None = None
) -> str | None:
    """Write this process's record; its path, or None when it could not be written.

    `notes`: where why a refused directory was not used is appended, once per process."""
    env = os.environ if environ is None else environ
    pid = os.getpid()
    path = record_path(env, pid)
    if _written.get(path) == data:
        return path
    refused = _private_dir(os.path.dirname(path))
    if refused is not None:
        if refused and notes is not None and refused not in _noted:
            _noted.add(refused)
            notes.append(refused)
        return None
    # When the variables of "env" were set (at the latest): a child forked without an exec
    # after it holds them, and verify judges it by this record (`hwtune.apply.verify`); one
    # forked before may not. Kept across writes that leave "env" as it was (TensorFlow's).
    since = _env_since.get(path)
    if since is None or since[0] != data.get("env"):
        since = (data.get("env"), boot_seconds())
    body = {
        "schema": RECORD_SCHEMA,
        "pid": pid,
        "start": start_time(pid),
        "pid_namespace": pid_namespace(),
        "env_since_boot": since[1],
        **data,
    }
    temporary = f"{path}.{pid}.tmp"
    _unlink(temporary)  # left by a killed process with this pid; the directory is ours
    try:
        fd = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError:
        return None
    try:
        # 0600 whatever the umask: a umask of 0777 made it 0000, which verify (running as
        # the same user, not root) could not read.
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(body, handle)
        os.replace(temporary, path)
    except (OSError, TypeError, ValueError):
        _unlink(temporary)
        return None
    except BaseException:
        # Ctrl-C at job start, between the open and the rename: without this the half-written
        # temporary stayed until another process's exit swept it, a minute later at best.
        _unlink(temporary)
        raise
    if path not in _written:
        atexit.register(_remove, path, pid)
        _at_worker_exit(path, pid)
    _written[path] = dict(data)
    _env_since[path] = since
    return path


def _at_worker_exit(path: str, pid: int) -> None:
    """Remove the record as a multiprocessing child's run() ends, too. A child forked without
    exec (a "fork" Pool worker whose initializer calls configure()) leaves through os._exit,
    past atexit, so each worker left its record until the parent exited: a long-lived pool
    with maxtasksperchild piled up one per worker it ever started. multiprocessing runs its
    own finalizers there (BaseProcess._bootstrap calls util._exit_function before returning
    the exit code to os._exit; multiprocessing docs, "Process.run" and util.Finalize)."""
    multiprocessing = sys.modules.get("multiprocessing")  # never imported for this
    if multiprocessing is None or multiprocessing.parent_process() is None:
        return
    from multiprocessing import util

    util.Finalize(None, _remove, args=(path, pid), exitpriority=0)


def remove_stale(directory: str, own: int) -> int:
    """Remove the records in `directory` (this user's private runtime dir) whose process is
    gone: no such pid, or a pid recycled since (another start time). How many were removed.

    atexit does not run when a process dies of a signal (SIGTERM is how `scancel`, `docker
    stop` and Kubernetes end a job; SIGKILL, the OOM killer), so its record stays; the next
    process of the user that ran configure() clears them as it exits (`_remove`). Only records
    written in this process's PID namespace are judged: a container sharing the directory
    (/tmp, $XDG_RUNTIME_DIR) numbers its processes apart, and its live ones have no /proc
    entry here; without a namespace to compare (no /proc, a record of an older hwtune),
    nothing is removed. A temporary file is removed once its pid is gone here and it is older
    than STALE_TEMPORARY_S (a writer in another namespace renames it within milliseconds).
    Bounded: one listdir, at most MAX_SWEPT names looked at, a /proc lookup and one small read
    each.
    """
    here = pid_namespace()
    if here is None:
        return 0
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names[:MAX_SWEPT]:
        named = _record_pid(name)
        if named is None or named[0] == own:
            continue
        pid, temporary = named
        path = os.path.join(directory, name)
        if _is_stale(path, pid, temporary, here):
            _unlink(path)
            removed += 1
    return removed


# How old a leftover temporary record must be before the sweep removes it: a writer holds one
# only between its open and its rename, microseconds apart.
STALE_TEMPORARY_S = 60.0


def _is_stale(path: str, pid: int, temporary: bool, here: str) -> bool:
    live = os.path.exists(f"/proc/{pid}")
    if temporary:
        try:
            age = time.time() - os.lstat(path).st_mtime
        except OSError:
            return False
        return not live and age > STALE_TEMPORARY_S
    recorded = _recorded_fields(path)
    if recorded.get("pid_namespace") != here:
        return False  # another namespace's process, or unknown: not ours to judge
    return not (live and recorded.get("start") == start_time(pid))


def pid_namespace() -> str | None:
    """This process's PID namespace ("pid:[4026531836]", namespaces(7)); None without /proc."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _record_pid(name: str) -> tuple[int, bool] | None:
    """(pid, whether a temporary file) for `configure-<pid>.json` and the temporary
    `configure-<pid>.json.<pid>.tmp` a writer killed before its rename leaves; else None."""
    if not name.startswith("configure-"):
        return None
    number, _, rest = name[len("configure-") :].partition(".")
    if not number.isascii() or not number.isdigit() or len(number) > 10:
        return None
    if rest == "json":
        return int(number), False
    if rest == f"json.{number}.tmp":
        return int(number), True
    return None


def _recorded_fields(path: str) -> dict[str, Any]:
    """The fields of a record; empty when it cannot be read as one (a record being replaced
    right now reads whole: rename(2) is atomic)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        raw = os.read(fd, MAX_RECORD_BYTES)
    except OSError:
        return {}
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _remove(path: str, pid: int) -> None:
    """At exit: this process's record, then those others left (remove_stale). The sweep is
    here, not in `write`, to keep its listdir and reads off configure()'s start-up."""
    if os.getpid() != pid:  # a forked child, whose parent still runs
        return
    try:
        _unlink(path)
        remove_stale(os.path.dirname(path), pid)
    except KeyboardInterrupt:
        # A second Ctrl-C while the program exits (the first ended it; a launcher's SIGINT to
        # the whole process group): Python printed "Exception ignored in atexit callback" and
        # a traceback into hwtune for a sweep no one asked for. The sweep waits for the next
        # exit; this process's own record goes now (one unlink).
        _unlink(path)


def read(
    pid: int, environs: Sequence[Mapping[str, str]], *, owner: int | None = None
) -> tuple[dict[str, Any] | None, str]:
    """(the record of `pid`, "") or (None, why not) from the first runtime dir that has one.

    `environs`: the process's own environment first (its configure() resolved the directory
    with it), then the reader's. `owner`: the process's uid, whose files are trusted.
    """
    from hwtune.fs.trusted_read import RefusedFile, read_bounded

    start = start_time(pid)
    why = ""
    for path in dict.fromkeys(record_path(env, pid, uid=owner) for env in environs):
        try:
            # A regular file, no link, never blocking (a FIFO there must not hang verify),
            # owned by us, root or the process's user and writable by no one else.
            raw = read_bounded(
                path,
                MAX_RECORD_BYTES,
                check_owner=True,
                also_trusted=() if owner is None else (owner,),
            )
        except RefusedFile as err:
            if not err.missing:
                why = f"{err.message}; not used"
            else:
                why = why or _unusable_dir(os.path.dirname(path), owner)
            continue
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            why = f"{path} is not a record"
            continue
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            why = f"{path} is not a record of this hwtune"
            continue
        if data.get("pid") != pid or data.get("start") != start:
            why = f"{path} belongs to an earlier process with the same pid"
            continue
        return data, ""
    return None, why


def _unusable_dir(directory: str, owner: int | None) -> str:
    """Why no record can be in `directory`: configure() refused it (`refusal`), so the record's
    absence says nothing of whether configure() ran; "" when it is not refused or missing."""
    try:
        info = os.lstat(directory)
    except OSError:
        return ""
    return refusal(directory, info, os.geteuid() if owner is None else owner) or ""
