"""`hwtune snapshot DIR`: copy what detect reads on this machine into DIR, in the same layout.

`hwtune detect --root DIR` on the copy then sees what it saw here, so a snapshot can be attached
to a bug report or used to plan for a machine elsewhere. The copy is the union of
- the files the probe contract names (proc/cpuinfo, proc/meminfo, proc/self/{status,cgroup,
  mountinfo}, the THP mode, the cgroup files along this process's cgroup and its ancestors),
- the sysfs trees of CPUs and NUMA nodes (sys/devices/system/{cpu,node}) minus the large parts
  no probe needs (cpuidle, power, hotplug, frequency statistics),
- every file under proc/ and sys/ that a live `detect()` actually opens, recorded with a
  `sys.addaudithook` "open" hook (PEP 578), so a probe added later is covered without a list here,
- `lscpu.txt` (the output of `lscpu`, in the C locale) when lscpu exists,
- what the GPU and TensorFlow probes save through their own `save_*_snapshot` functions.
MANIFEST.json lists what was copied and what was missing, and why.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hwtune.errors import HwtuneError
from hwtune.fs.trust import check_trusted_path, make_dirs, owner_name
from hwtune.probes.cgroup import cgroup_files
from hwtune.probes.cgroup_text import PROC_CGROUP, PROC_MOUNTINFO
from hwtune.probes.issues import IssueLog
from hwtune.probes.root import read_bytes

MANIFEST = "MANIFEST.json"
REQUIRED = (
    "proc/cpuinfo",
    "proc/meminfo",
    "proc/self/status",
    PROC_CGROUP,
    PROC_MOUNTINFO,
    "sys/kernel/mm/transparent_hugepage/enabled",
    "sys/devices/system/cpu/online",
)
# Present only on some machines: absent ones are noted in the manifest, not as problems.
OPTIONAL = (
    "sys/kernel/mm/transparent_hugepage/defrag",
    "sys/kernel/mm/redhat_transparent_hugepage/enabled",  # RHEL 6's THP (probes/memory.py)
    "sys/devices/cpu_core/cpus",  # Intel hybrid parts: the P-cores (perf PMU of the P-cores)
    "sys/devices/cpu_atom/cpus",  # ... and the E-cores
    "sys/hypervisor/type",
    "sys/class/dmi/id/sys_vendor",
    "sys/class/dmi/id/product_name",
)
TREES = ("sys/devices/system/cpu", "sys/devices/system/node")
# Parts of those trees that are large (per-CPU idle states, frequency histograms) or not
# hardware facts (power management, driver links).
SKIP_NAMES = frozenset({"cpuidle", "power", "hotplug", "microcode", "stats", "uevent", "vmstat"})
MAX_FILE_BYTES = 1 << 20  # sysfs attributes are at most a page; /proc/cpuinfo can be ~1 MiB
# Directories inside the snapshot are opened, and files created, never through a link.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# Paths a running `detect()` opened, while `_recording` is on (see `record_reads`).
_recording: list[set[str]] = []
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _recording and isinstance(args[0], (str, os.PathLike)):
        _recording[-1].add(os.path.abspath(os.fspath(args[0])))


@contextlib.contextmanager
def record_reads() -> Iterator[set[str]]:
    """Collect the absolute paths every open() in this block names (an audit hook, PEP 578).

    Audit hooks cannot be removed, so one is installed once and is idle outside this block.
    """
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)
        _hook_installed = True
    paths: set[str] = set()
    _recording.append(paths)
    try:
        yield paths
    finally:
        _recording.pop()


def _readable(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) and bool(mode & 0o444)


def _walk(top: Path) -> Iterator[Path]:
    """Files and symlinks under a sysfs tree, without following links or entering SKIP_NAMES."""
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in SKIP_NAMES:
            continue
        path = Path(entry.path)
        if entry.is_symlink() or entry.is_file(follow_symlinks=False):
            yield path
        elif entry.is_dir(follow_symlinks=False):
            yield from _walk(path)


class Destination:
    """The snapshot directory, held open: every write is made relative to its descriptor.

    `open_destination` creates and checks it once; from then on nothing another user does to
    the path (a link swapped in for it or for any directory above) can redirect a write, and
    sub-directories are created and opened inside it with O_NOFOLLOW, so a link in it (none
    can be planted: it is root's and 0755 when root runs this) is refused, not followed.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    def close(self) -> None:
        os.close(self.fd)

    def _parent(self, relative: str) -> tuple[int, str]:
        """An open descriptor of `relative`'s directory (made 0755 when missing) and the last
        name; the caller closes the descriptor unless it is `self.fd`."""
        *dirs, name = relative.split("/")
        if not name or any(part in ("", ".", "..") for part in dirs) or name in (".", ".."):
            raise OSError(errno.EINVAL, "not a plain relative path", str(self.path / relative))
        current = self.fd
        try:
            for part in dirs:
                created = True
                try:
                    os.mkdir(part, 0o700, dir_fd=current)
                except FileExistsError:
                    created = False
                child = os.open(part, _DIR_FLAGS, dir_fd=current)
                if created:
                    os.fchmod(child, 0o755)  # whatever the umask: a snapshot is meant to be shared
                if current != self.fd:
                    os.close(current)
                current = child
        except BaseException:
            if current != self.fd:
                os.close(current)
            raise
        return current, name

    def write(self, relative: str, data: bytes) -> None:
        """Write `relative` via a new temporary file renamed into place: a 0644 file in 0755
        directories whatever the umask. OSError names the file under the snapshot's path."""
        try:
            parent, name = self._parent(relative)
        except OSError as err:
            raise _named(err, self.path / relative) from err
        tmp = f".{name}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, _NEW_FILE, 0o600, dir_fd=parent)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, 0o644)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise
            os.close(fd)
            os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError as err:
            raise _named(err, self.path / relative) from err
        finally:
            if parent != self.fd:
                os.close(parent)

    def symlink(self, relative: str, target: str) -> None:
        """Make the link `relative` -> `target`; one already there is kept."""
        try:
            parent, name = self._parent(relative)
        except OSError as err:
            raise _named(err, self.path / relative) from err
        try:
            with contextlib.suppress(FileExistsError):
                os.symlink(target, name, dir_fd=parent)
        finally:
            if parent != self.fd:
                os.close(parent)

    def files(self) -> list[str]:
        """Relative paths of the regular files in the snapshot (a link counts as the file it
        leads to, as Path.is_file says), without entering linked directories."""
        found: list[str] = []
        for top, _, names, top_fd in os.fwalk(".", dir_fd=self.fd):
            for name in names:
                try:
                    is_file = stat.S_ISREG(os.stat(name, dir_fd=top_fd).st_mode)
                except OSError:
                    continue
                if is_file:
                    found.append(os.path.normpath(os.path.join(top, name)))
        return sorted(found)


def _named(err: OSError, path: Path) -> OSError:
    """The same error naming the snapshot file (a dir_fd call names only the last part)."""
    return OSError(err.errno, err.strerror or str(err), str(path))


def _not_usable(dest: Path, why: str) -> HwtuneError:
    return HwtuneError(
        f"{dest} {why}",
        hint="give a new or empty directory; a snapshot never mixes with other files",
    )


def _check_trusted(dest: Path) -> None:
    """As root, `check_trusted_path`; a no-op for anyone else (they write with their rights)."""
    if os.geteuid() == 0:
        check_trusted_path(dest, option="")


def open_destination(dest: Path) -> Destination:
    """Create `dest` (or take an empty one) and hold it open for the writes.

    As root, the path is checked before (`check_trusted_path`: another user's directory or
    link on the way is refused) and again after the directory is made, and an entry already
    at `dest` is used only when it is a real directory (opened with O_NOFOLLOW: a link swapped
    in after the first check is refused, not written through), root's, writable by root
    alone and empty. The directory is created 0700 and opened before it is made 0755, so no
    one else can put anything in it; every later write goes through the open descriptor.
    """
    _check_trusted(dest)
    try:
        make_dirs(dest.parent, 0o755)
        os.mkdir(dest, 0o700)
        created = True
    except FileExistsError:
        created = False
    except OSError as err:
        raise HwtuneError(
            f"cannot create the snapshot directory {dest}: {err.strerror or err}",
            hint="give a directory you can write",
        ) from err
    root = os.geteuid() == 0
    # As root a link is refused (another user may have swapped it in after the check);
    # anyone else writes with their own rights, and may name a link to their own directory.
    flags = _DIR_FLAGS if root else _DIR_FLAGS & ~os.O_NOFOLLOW
    try:
        fd = os.open(dest, flags)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR) and root and os.path.islink(dest):
            owner = owner_name(os.lstat(dest).st_uid)
            raise HwtuneError(
                f"refusing to write the snapshot into {dest}: it is a symbolic link "
                f"(owned by {owner}), which could lead anywhere",
                hint=f"give the directory itself, not a link to it; if {dest} is not yours, "
                "check who put it there",
            ) from err
        if err.errno == errno.ENOTDIR:
            raise _not_usable(dest, "exists and is not an empty directory") from err
        raise HwtuneError(
            f"cannot open the snapshot directory {dest}: {err.strerror or err}",
            hint="give a directory you can write",
        ) from err
    try:
        st = os.fstat(fd)
        if created:
            os.fchmod(fd, 0o755)  # ours alone until now; 0755 whatever the umask
        elif root and (st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            shown = shlex.quote(str(dest))  # pasted: a space or `;` in it made another command
            raise HwtuneError(
                f"refusing to write the snapshot into {dest}: it is owned by "
                f"{owner_name(st.st_uid)} with mode {stat.S_IMODE(st.st_mode):04o}, so "
                "another user could plant links in it",
                hint=f"give a new directory, or make {dest} root's (chown root: {shown}; "
                f"chmod go-w {shown})",
            )
        if os.listdir(fd):
            raise _not_usable(dest, "exists and is not an empty directory")
        # The path checked again now that it ends at our directory, which it must still name:
        # the writes go through `fd`, MANIFEST.json and `detect --root` through the path.
        _check_trusted(dest)
        now = os.stat(dest) if not root else os.lstat(dest)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise HwtuneError(
                f"refusing to write the snapshot into {dest}: it was replaced while it was "
                "being created",
                hint=f"check who else writes next to {dest}, and run it again",
            )
    except BaseException:
        os.close(fd)
        raise
    return Destination(dest, fd)


class _Copier:
    def __init__(self, source: Path, dest: Destination) -> None:
        self.source, self.dest = source, dest
        self.copied: set[str] = set()
        self.missing: dict[str, str] = {}

    def copy(self, relative: str, *, required: bool = False) -> bool:
        """Copy one file's content (links resolved) to the same relative path under dest."""
        if relative in self.copied:
            return True
        try:
            # inside the source root, regular files only (a FIFO would hang), capped
            data = read_bytes(self.source, relative, MAX_FILE_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            if required or relative in REQUIRED:
                self.missing[relative] = "absent on this machine"
            return False
        except OSError as err:
            self.missing[relative] = f"not copied: {err.strerror or err}"
            return False
        try:
            self.dest.write(relative, data)
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            # a directory on the way is a node<->CPU link copied before: never written through
            self.missing[relative] = "not copied: its path passes a link in the snapshot"
            return False
        self.copied.add(relative)
        return True

    def copy_link(self, path: Path) -> None:
        """Recreate a relative symlink that stays inside the copied trees (node*/cpuN links)."""
        target = os.readlink(path)
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
        inside = any(resolved.startswith(str(self.source / tree) + os.sep) for tree in TREES)
        if os.path.isabs(target) or not inside:
            return
        self.dest.symlink(str(path.relative_to(self.source)), target)

    def copy_tree(self, tree: str) -> None:
        for path in _walk(self.source / tree):
            if path.is_symlink():
                self.copy_link(path)
            elif _readable(path):
                self.copy(str(path.relative_to(self.source)))


def _relative_reads(source: Path, paths: set[str]) -> list[str]:
    base = os.path.abspath(source)
    found: list[str] = []
    for p in sorted(paths):
        rel = os.path.relpath(p, base)
        if rel.split(os.sep, 1)[0] in ("proc", "sys") and not rel.startswith(".."):
            found.append(rel)
    return found


def _save_lscpu(dest: Destination, issues: IssueLog) -> str | None:
    lscpu = shutil.which("lscpu")
    if lscpu is None:
        return None
    env = {**os.environ, "LC_ALL": "C"}  # detect parses the English field names
    try:
        done = subprocess.run(
            [lscpu], capture_output=True, text=True, env=env, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        issues.add("snapshot", f"lscpu failed: {err}")
        return None
    if done.returncode != 0:
        issues.add("snapshot", f"lscpu exited {done.returncode}: {done.stderr.strip()[:200]}")
        return None
    dest.write("lscpu.txt", done.stdout.encode())
    return "LC_ALL=C lscpu"


def _save_extra(name: str, dest: Destination, issues: IssueLog) -> str:
    """Call hwtune.probes.<name>.save_<...>_snapshot when that probe exists."""
    module, function = {
        "gpu": ("hwtune.probes.gpu", "save_gpu_snapshot"),
        "tensorflow": ("hwtune.probes.tensorflow", "save_tf_snapshot"),
    }[name]
    try:
        save = getattr(__import__(module, fromlist=[function]), function)
    except (ImportError, AttributeError) as err:
        return f"not captured: {module}.{function} unavailable ({err})"
    before = len(issues)
    try:
        save(dest.path, issues, write=dest.write)
    except Exception as err:  # noqa: BLE001 - one capture failing must not lose the rest
        issues.add("snapshot", f"{function} failed: {type(err).__name__}: {err}")
        return "failed"
    added = len(issues) - before
    return "done" if not added else f"done, {added} issue(s) (see issues)"


def _save_visibility(dest: Destination, source: Path) -> str:
    """Record this process's CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER) when it snapshots
    this machine: a limit on its GPUs, as its affinity is (probes/cuda_visible_snapshot.py)."""
    from hwtune.probes.cuda_visible_snapshot import SNAPSHOT_NAME, snapshot_bytes
    from hwtune.probes.root import is_live

    if not is_live(source):
        return "not recorded: the source is not this machine"
    data = snapshot_bytes(os.environ)
    if data is None:
        return "unset: every GPU visible"
    dest.write(SNAPSHOT_NAME, data)
    return f"recorded in {SNAPSHOT_NAME}"


def take_snapshot(
    dest: Path, *, source: Path = Path("/"), gpus: bool = True, tensorflow: bool = True
) -> dict[str, Any]:
    """Copy what detect reads under `source` into `dest` (new or empty); return the manifest."""
    out = open_destination(dest)
    try:
        return _fill(out, source, gpus=gpus, tensorflow=tensorflow)
    finally:
        out.close()


def _fill(dest: Destination, source: Path, *, gpus: bool, tensorflow: bool) -> dict[str, Any]:
    from hwtune import __version__
    from hwtune.models.convert import dump
    from hwtune.probes import detect

    issues = IssueLog()
    copier = _Copier(source, dest)
    for relative in REQUIRED:
        copier.copy(relative, required=True)
    for relative in OPTIONAL:
        copier.copy(relative)
    for tree in TREES:
        copier.copy_tree(tree)
    for path in cgroup_files(source, issues):
        copier.copy(str(path.relative_to(source)))
    with record_reads() as opened:
        try:
            detect(source, gpus=False, tensorflow=False)
        except ImportError as err:  # a probe module not installed: copy the fixed list only
            issues.add("snapshot", f"could not record detect's reads: {err}")
    for relative in _relative_reads(source, opened):
        if _readable(source / relative):
            copier.copy(relative)
    commands: dict[str, str] = {}
    if lscpu := _save_lscpu(dest, issues):
        commands["lscpu.txt"] = lscpu
    captures = {
        "gpu": _save_extra("gpu", dest, issues) if gpus else "skipped (--no-gpu)",
        "cuda_visible_devices": _save_visibility(dest, source) if gpus else "skipped (--no-gpu)",
        "tensorflow": (
            _save_extra("tensorflow", dest, issues) if tensorflow else "skipped (--no-tensorflow)"
        ),
    }
    files = [f for f in dest.files() if f != MANIFEST]
    manifest: dict[str, Any] = {
        "hwtune_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": str(source),
        "files": files,
        "missing": [{"path": p, "reason": r} for p, r in sorted(copier.missing.items())],
        "commands": commands,
        "captures": captures,
        "issues": dump(issues.freeze()),
    }
    dest.write(MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest
