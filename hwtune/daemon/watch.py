"""Notice when an input of the plan changes: inotify where the kernel reports it, polling always.

Every input has a *signature*: the bytes of a small file, the lines of interest of a larger one,
or the sorted names matching a pattern in a directory. `Watcher.changed()` recomputes them and
names the inputs whose signature moved; the daemon calls it once per interval (polling) and
whenever inotify says something in a watched directory happened (early wake-up).

Polling is not optional: sysfs, procfs and cgroupfs attributes change under the kernel's hand
(CPU hotplug, a quota written by the container runtime) without any inotify event, because
fsnotify is only called from the VFS write path and from the few attributes that call
sysfs_notify()/kernfs_notify() (inotify(7), "Limitations and caveats": "pseudo-filesystems such
as /proc, /sys and /dev/pts are not monitorable with inotify"). Reading a few dozen files of a
few bytes each costs tens of microseconds per interval. Inotify is what gives config edits, a
`pip install` of TensorFlow and changes to a `--root` snapshot tree immediate effect.

inotify is reached through ctypes (glibc and musl both export inotify_init1/inotify_add_watch),
so no third-party package is needed; where it is missing (not Linux, no libc symbols, the
per-user instance limit `fs.inotify.max_user_instances` reached) the watcher polls only.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import glob
import os
import stat
import struct
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hwtune.fs.trusted_read import read_capped

# inotify(7) event bits, from <sys/inotify.h>
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000

# Children appear, vanish, are renamed over (atomic writes) or rewritten in place.
DIR_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
# For directories such as /dev, where children are written all the time (ttys) but only
# their arrival and departure matter.
MEMBERSHIP_MASK = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_ONLYDIR
# For the nearest existing ancestor of a directory that is missing: only the arrival of the
# next directory down matters (then the watch moves one level down, or onto the directory).
ARRIVAL_MASK = IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR

_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
# Files larger than this are fingerprinted by stat, not content (a config file or a snapshot's
# nvidia-smi XML is well under it; the cap only guards against reading something huge).
MAX_CONTENT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Part:
    """One observable thing: a file's content, some of its lines, or a directory's members.

    kind: "content" (the whole file), "lines" (only lines starting with `pattern`),
    "listing" (names in the directory matching the fnmatch `pattern`), "tree" (every path
    below the directory, `depth` levels deep, with its mtime). `notify` says whether inotify
    can see it change; False for sysfs, procfs and cgroupfs files.
    """

    kind: str
    path: Path
    pattern: str = "*"
    notify: bool = True
    depth: int = 3

    def signature(self) -> Hashable:
        try:
            if self.kind == "content":
                return _content(self.path)
            if self.kind == "lines":
                data = _content(self.path)
                if not isinstance(data, bytes):
                    return data
                text = data.decode("utf-8", "replace")
                return tuple(ln for ln in text.splitlines() if ln.startswith(self.pattern))
            if self.kind == "listing":
                return tuple(
                    sorted(
                        n for n in os.listdir(self.path) if fnmatch.fnmatchcase(n, self.pattern)
                    )
                )
            if self.kind == "tree":
                return tuple(sorted(_walk(self.path, self.depth)))
        except OSError as err:
            return ("error", err.errno)
        raise ValueError(f"unknown part kind {self.kind!r}")

    def watch_points(self) -> list[tuple[Path, str, int]]:
        """(directory, name pattern, mask) for inotify, one per directory to watch.

        An inotify watch reports only its directory's own entries, not those of
        subdirectories (inotify(7), "Limitations and caveats": "Inotify monitoring of
        directories is not recursive"), so a tree is watched at every directory below it
        that its signature reads; one that appears later is added at the next `_arm` (its
        creation wakes the watch above it). A directory that does not exist yet (the tuned
        store before the first `hwtune tune` result) is watched at its nearest existing
        ancestor instead (`Watcher._arm`, `waiting_point`)."""
        if self.kind == "listing":
            return [(self.path, self.pattern, MEMBERSHIP_MASK)]
        if self.kind == "tree":
            return [
                (d, "*", DIR_MASK) for d in [self.path, *_subdirectories(self.path, self.depth)]
            ]
        return [(self.path.parent, self.path.name, DIR_MASK)]


def waiting_point(directory: Path) -> tuple[Path, str] | None:
    """(nearest existing ancestor, name of the next directory down towards `directory`) when
    `directory` is missing: inotify cannot watch what does not exist, and a creation is
    reported only to the watch on the parent, so the ancestor is watched for that one name
    until it appears. None when `directory` exists (or nothing above it does)."""
    missing = directory
    parent = missing.parent
    while not os.path.isdir(missing):
        if os.path.isdir(parent):
            return parent, missing.name
        if parent == missing:
            return None
        missing, parent = parent, parent.parent
    return None


def _content(path: Path) -> Hashable:
    # O_NONBLOCK: a FIFO planted under --root would block open() for good; anything but a
    # regular file is fingerprinted by its type and never read (a device may be endless).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ("not a regular file", stat.S_IFMT(st.st_mode), st.st_rdev)
        if st.st_size > MAX_CONTENT_BYTES:
            return ("stat", st.st_ino, st.st_size, st.st_mtime_ns)
        return read_capped(fd, MAX_CONTENT_BYTES)  # stops past the cap if it grows meanwhile
    finally:
        os.close(fd)


def _walk(top: Path, depth: int) -> Iterable[tuple[str, int]]:
    """(path, mtime) of everything below `top`: a file rewritten by rename changes its mtime."""
    if depth <= 0:
        return
    for entry in os.scandir(top):
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime_ns
        except OSError:
            mtime = -1
        yield entry.path, mtime
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path), depth - 1)


def _subdirectories(top: Path, depth: int) -> Iterable[Path]:
    """The directories below `top` whose entries `_walk(top, depth)` lists."""
    if depth <= 1:
        return
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield Path(entry.path)
            yield from _subdirectories(Path(entry.path), depth - 1)


@dataclass(frozen=True, slots=True)
class Input:
    """A named input of the plan ("cpu online", "cgroup", "config"…) and its parts."""

    name: str
    parts: tuple[Part, ...]

    def signature(self) -> tuple[Hashable, ...]:
        return tuple(p.signature() for p in self.parts)


class _Inotify:
    """The few inotify(7) calls needed, through ctypes; `fd` is -1 when unavailable."""

    def __init__(self) -> None:
        self.fd = -1
        self.error: str | None = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._init1 = libc.inotify_init1
            self._add = libc.inotify_add_watch
            self._rm = libc.inotify_rm_watch
        except (OSError, AttributeError) as err:
            self.error = f"inotify unavailable ({err}); polling only"
            return
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        fd = self._init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            self.error = f"inotify_init1 failed: {os.strerror(code)}; polling only"
            return
        self.fd = fd

    def add(self, path: Path, mask: int) -> int:
        """A watch descriptor, or -errno."""
        wd: int = self._add(self.fd, os.fsencode(path), mask)
        return wd if wd >= 0 else -ctypes.get_errno()

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)

    def read(self) -> list[tuple[int, int, str]]:
        """Pending events as (wd, mask, name); [] when none."""
        events: list[tuple[int, int, str]] = []
        while True:
            try:
                buf = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return events
            except OSError as err:
                if err.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset + _EVENT.size <= len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, offset)
                raw = buf[offset + _EVENT.size : offset + _EVENT.size + length]
                events.append((wd, mask, os.fsdecode(raw.rstrip(b"\0"))))
                offset += _EVENT.size + length

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Watcher:
    """The signatures of a set of inputs, with inotify watches on the directories that have them.

    Usage: `select()` on `fileno()` (when not None) with the poll interval as timeout; after a
    wake-up call `pending()` to drain events, and call `changed()` at every poll and after
    relevant events.
    """

    def __init__(self, inputs: Sequence[Input], *, use_inotify: bool = True) -> None:
        self._inotify = _Inotify() if use_inotify else None
        self.note = self._inotify.error if self._inotify else "inotify disabled; polling only"
        # wd -> (directory, [name patterns]); path -> wd, for the watches this set needs
        self._watches: dict[int, tuple[Path, list[str]]] = {}
        self._by_dir: dict[Path, int] = {}
        self._masks: dict[Path, int] = {}
        self._inputs: tuple[Input, ...] = ()
        self._baseline: dict[str, tuple[Hashable, ...]] = {}
        self.set_inputs(inputs)

    @property
    def inotify_active(self) -> bool:
        return self._inotify is not None and self._inotify.fd >= 0

    def fileno(self) -> int | None:
        return self._inotify.fd if self.inotify_active and self._inotify else None

    def set_inputs(self, inputs: Sequence[Input]) -> None:
        """Replace the inputs (after a re-detect: the cgroup may have moved)."""
        old = {i.name: i.parts for i in self._inputs}
        self._inputs = tuple(inputs)
        # An input whose parts are unchanged keeps the signature taken before the re-detect, so
        # a change that lands while detect() runs is still seen at the next poll.
        self._baseline = {
            i.name: self._baseline[i.name]
            if old.get(i.name) == i.parts and i.name in self._baseline
            else i.signature()
            for i in self._inputs
        }
        self._arm()

    def _arm(self) -> None:
        """Add the watches that are missing (a directory may have appeared since), drop the
        ones no input needs any more.

        A directory that is missing is watched at its nearest existing ancestor, for the
        arrival of the next directory down (`waiting_point`): its creation wakes the daemon,
        whose `changed()` arms again, one level lower or on the directory itself. Before, a
        missing directory had no watch until a poll found it (the tuned store made by the
        first `hwtune tune` result was seen only --interval later)."""
        if not self.inotify_active or self._inotify is None:
            return
        for _ in range(8):  # again while a directory appeared during the pass
            if not self._arm_once(self._inotify):
                return

    def _arm_once(self, inotify: _Inotify) -> bool:
        """One pass of `_arm`; True when a directory waited for appeared meanwhile."""
        wanted: dict[Path, tuple[list[str], int]] = {}

        def want(directory: Path, pattern: str, mask: int) -> None:
            patterns, old_mask = wanted.get(directory, ([], 0))
            patterns.append(pattern)
            wanted[directory] = (patterns, old_mask | mask)

        waiting: list[Path] = []
        for item in self._inputs:
            for part in item.parts:
                if not part.notify:
                    continue
                for directory, pattern, mask in part.watch_points():
                    point = None if directory in self._by_dir else waiting_point(directory)
                    if point is None:
                        want(directory, pattern, mask)
                    else:
                        want(point[0], glob.escape(point[1]), ARRIVAL_MASK)
                        waiting.append(point[0] / point[1])
        for directory, wd in list(self._by_dir.items()):
            if directory not in wanted:
                inotify.remove(wd)
                del self._by_dir[directory]
                self._masks.pop(directory, None)
                self._watches.pop(wd, None)
        for directory, (patterns, mask) in wanted.items():
            known = self._by_dir.get(directory)
            if known is None or self._masks.get(directory) != mask:
                # on a watched directory, inotify_add_watch(2) replaces the mask, same wd
                added = inotify.add(directory, mask)
                if added < 0:
                    continue  # absent for now; retried at the next poll
                if known is not None and known != added:  # another directory by that name
                    self._watches.pop(known, None)
                self._by_dir[directory] = known = added
                self._masks[directory] = mask
            self._watches[known] = (directory, patterns)
        # Made between the look and the watch: its creation event is lost, so arm again.
        return any(os.path.isdir(path) for path in waiting)

    def pending(self) -> bool:
        """Drain inotify; True when an event concerns something an input looks at."""
        if not self.inotify_active or self._inotify is None:
            return False
        relevant = False
        for wd, mask, name in self._inotify.read():
            if mask & IN_Q_OVERFLOW:
                relevant = True
                continue
            if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                entry = self._watches.pop(wd, None)
                if entry is not None:
                    self._by_dir.pop(entry[0], None)
                relevant = True
                continue
            entry = self._watches.get(wd)
            if entry is not None and any(fnmatch.fnmatchcase(name, p) for p in entry[1]):
                relevant = True
        return relevant

    def rebase(self, name: str) -> None:
        """Take input `name` as it is now as its baseline. The daemon's outputs after it wrote
        them: their baseline was taken before the first apply, and a deletion that brought
        them back to that state (all deleted again before the first poll, or `rm -rf OUTPUT`
        with the lock file taken again) moved nothing, so nothing was put back."""
        for item in self._inputs:
            if item.name == name:
                self._baseline[name] = item.signature()

    def changed(self) -> list[str]:
        """Names of the inputs whose signature moved since the last call (or set_inputs)."""
        self._arm()
        moved: list[str] = []
        for item in self._inputs:
            sig = item.signature()
            if sig != self._baseline.get(item.name):
                moved.append(item.name)
                self._baseline[item.name] = sig
        return moved

    @property
    def watched_directories(self) -> list[Path]:
        return sorted(self._by_dir)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
