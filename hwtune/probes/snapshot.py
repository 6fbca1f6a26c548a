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
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hwtune.errors import HwtuneError
from hwtune.fs.trust import check_trusted_path, make_dirs
from hwtune.probes.cgroup import PROC_CGROUP, PROC_MOUNTINFO, cgroup_files
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


class _Copier:
    def __init__(self, source: Path, dest: Path) -> None:
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
        write_atomic(self.dest / relative, data)
        self.copied.add(relative)
        return True

    def copy_link(self, path: Path) -> None:
        """Recreate a relative symlink that stays inside the copied trees (node*/cpuN links)."""
        target = os.readlink(path)
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
        inside = any(resolved.startswith(str(self.source / tree) + os.sep) for tree in TREES)
        if os.path.isabs(target) or not inside:
            return
        link = self.dest / path.relative_to(self.source)
        make_dirs(link.parent, 0o755)
        with contextlib.suppress(FileExistsError):
            link.symlink_to(target)

    def copy_tree(self, tree: str) -> None:
        for path in _walk(self.source / tree):
            if path.is_symlink():
                self.copy_link(path)
            elif _readable(path):
                self.copy(str(path.relative_to(self.source)))


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and rename it into place; 0644 files
    in 0755 directories whatever the umask (a snapshot is meant to be shared)."""
    make_dirs(path.parent, 0o755)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _relative_reads(source: Path, paths: set[str]) -> list[str]:
    base = os.path.abspath(source)
    found: list[str] = []
    for p in sorted(paths):
        rel = os.path.relpath(p, base)
        if rel.split(os.sep, 1)[0] in ("proc", "sys") and not rel.startswith(".."):
            found.append(rel)
    return found


def _save_lscpu(dest: Path, issues: IssueLog) -> str | None:
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
    write_atomic(dest / "lscpu.txt", done.stdout.encode())
    return "LC_ALL=C lscpu"


def _save_extra(name: str, dest: Path, issues: IssueLog) -> str:
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
        save(dest, issues)
    except Exception as err:  # noqa: BLE001 - one capture failing must not lose the rest
        issues.add("snapshot", f"{function} failed: {type(err).__name__}: {err}")
        return "failed"
    added = len(issues) - before
    return "done" if not added else f"done, {added} issue(s) (see issues)"


def take_snapshot(
    dest: Path, *, source: Path = Path("/"), gpus: bool = True, tensorflow: bool = True
) -> dict[str, Any]:
    """Copy what detect reads under `source` into `dest` (new or empty); return the manifest."""
    from hwtune import __version__
    from hwtune.models.convert import dump
    from hwtune.probes import detect

    if os.geteuid() == 0:
        # As root, a destination another user can change is refused, as apply's output is:
        # they could plant `proc -> /etc/...` in it after the check below, and root would
        # write through the link.
        check_trusted_path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise HwtuneError(
            f"{dest} exists and is not an empty directory",
            hint="give a new or empty directory; a snapshot never mixes with other files",
        )
    try:
        make_dirs(dest, 0o755)
    except OSError as err:
        raise HwtuneError(
            f"cannot create the snapshot directory {dest}: {err.strerror or err}",
            hint="give a directory you can write",
        ) from err
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
        "tensorflow": (
            _save_extra("tensorflow", dest, issues) if tensorflow else "skipped (--no-tensorflow)"
        ),
    }
    files = sorted(
        str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and p.name != MANIFEST
    )
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
    write_atomic(dest / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest
