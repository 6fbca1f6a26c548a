"""The root a probe reads under: "/" for this machine, or a snapshot directory.

Every file a probe reads goes through `read_bytes` (issue 15 item 5: `--root` stays inside
the root):

- Under a snapshot root, the path is walked one component at a time with
  `openat(O_NOFOLLOW)` from the root's descriptor; a symbolic link is read, not followed, and
  resolved inside the root: a relative link that stays inside is fine (sysfs's
  node0/cpu0 -> ../../cpu/cpu0), an absolute one or one that climbs out is refused, so a
  snapshot's `proc/self/cgroup -> /etc/shadow` is never opened.
- Only a regular file is read: it is opened with O_NONBLOCK (opening a FIFO for reading would
  wait for a writer forever) and checked with fstat before any read.
- Every read is capped (`MAX_SMALL`, `MAX_LARGE`), so /dev/zero or a 1 GB file cannot take the
  memory of the machine: the cap is enforced while reading, never by st_size (procfs and
  sysfs files report 0).

A refusal or a cap is an OSError (`UnsafeRead`), which every probe already turns into a
`ProbeIssue`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from hwtune.fs.trusted_read import read_capped

# sysfs attributes are at most one page (Documentation/filesystems/sysfs.rst: "the buffer is
# always PAGE_SIZE bytes"); /proc/self/status, meminfo, cgroup files and the THP mode are a
# few KiB. 1 MiB leaves room for 64 KiB pages and NUMA distance tables of thousands of nodes.
MAX_SMALL = 1 << 20
# /proc/cpuinfo is ~1.5-2.5 KiB per logical CPU on x86 (the flags line), and x86_64 kernels
# allow up to 8192 CPUs (arch/x86/Kconfig, NR_CPUS with MAXSMP): ~20 MiB. mountinfo on a
# container host with 100k mounts is ~15 MiB; `nvidia-smi -q -x` is ~30 KiB per GPU.
MAX_LARGE = 32 << 20
# path_resolution(7): "a maximum of 40 symbolic links" per lookup.
MAX_LINKS = 40
_STEP = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeRead(OSError):
    """A path that leaves the root, a file that is not regular, or one past its cap."""

    def __init__(self, path: str | Path, reason: str, code: int = errno.EPERM) -> None:
        super().__init__(code, reason, str(path))


def is_live(root: Path) -> bool:
    """True when `root` is this machine's real root, so live-only sources (NVML) apply."""
    try:
        return root.resolve() == Path("/").resolve() or os.path.samefile(root, "/")
    except OSError:
        return False


def live_environ(root: Path, environ: Mapping[str, str]) -> Mapping[str, str] | None:
    """`environ` where it limits `root`'s GPUs (detect's `environ`): this machine's root. A
    snapshot's limits are its own files', as its CPU affinity is its proc/self/status, never
    the caller's: None there."""
    return environ if is_live(root) else None


def _relative(root: Path, path: str | Path) -> list[str]:
    text = os.fspath(path)
    base = os.fspath(root).rstrip("/")
    if os.path.isabs(text):
        if not (text == base or text.startswith(base + "/")):
            raise UnsafeRead(path, f"not under the root {root}")
        text = text[len(base) :]
    return [p for p in text.split("/") if p and p != "."]


def _open_inside(root: Path, path: str | Path, *, directory: bool = False) -> int:
    """A descriptor of `path` opened for reading, every link resolved inside `root`."""
    pending = _relative(root, path)[::-1]
    chain = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    links = 0
    try:
        while pending:
            name = pending.pop()
            if name == "..":
                if len(chain) == 1:
                    raise UnsafeRead(path, f"climbs out of the root {root}", errno.EXDEV)
                os.close(chain.pop())
                continue
            last = not pending
            flags = _STEP | (os.O_NONBLOCK if last and not directory else os.O_DIRECTORY)
            try:
                fd = os.open(name, flags, dir_fd=chain[-1])
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.stat(name, dir_fd=chain[-1], follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    raise
                links += 1
                target = os.readlink(name, dir_fd=chain[-1])
                if target.startswith("/") or links > MAX_LINKS:
                    why = f"a link to {target}" if links <= MAX_LINKS else "too many links"
                    raise UnsafeRead(
                        path, f"{why}, outside the root {root}: not followed", errno.EXDEV
                    ) from None
                pending.extend([p for p in target.split("/") if p and p != "."][::-1])
                continue
            if last:
                return fd
            chain.append(fd)
        raise UnsafeRead(path, "is the root itself, not a file", errno.EISDIR)
    finally:
        for held in chain:
            os.close(held)


def read_bytes(root: Path, path: str | Path, limit: int = MAX_SMALL) -> bytes:
    """The bytes of the regular file `path` (absolute under `root`, or relative to it).

    FileNotFoundError when absent; `UnsafeRead` for a link out of the root, a file that is
    not regular, or more than `limit` bytes; other OSErrors as the system reports them."""
    if is_live(root):
        full = path if os.path.isabs(path) else os.path.join("/", path)
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    else:
        fd = _open_inside(root, path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeRead(path, "not a regular file (a pipe, device or directory): not read")
        data = read_capped(fd, limit, 1 << 20)
        if len(data) > limit:
            raise UnsafeRead(path, f"larger than {_size(limit)}: refused", errno.EFBIG)
        return data
    finally:
        os.close(fd)


def is_dir(root: Path, path: str | Path) -> bool:
    """Whether `path` under `root` is a directory, reached as `read_bytes` reaches files. Any
    failure (absent, a link out of the root, a name too long for the kernel) is False: the
    caller reports the directory as missing."""
    try:
        if is_live(root):
            return os.path.isdir(path if os.path.isabs(path) else os.path.join("/", path))
        os.close(_open_inside(root, path, directory=True))
    except (OSError, ValueError):
        return False
    return True


def is_file(root: Path, path: str | Path) -> bool:
    """Whether `path` under `root` is a regular file, reached as `read_bytes` reaches files."""
    try:
        if is_live(root):
            return os.path.isfile(path if os.path.isabs(path) else os.path.join("/", path))
        fd = _open_inside(root, path)
    except (OSError, ValueError):
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def list_dir(root: Path, path: str | Path) -> list[str]:
    """The names in the directory `path` under `root`, reached as `read_bytes` reaches files
    (a linked directory out of the root is refused, not listed)."""
    if is_live(root):
        return os.listdir(path if os.path.isabs(path) else os.path.join("/", path))
    fd = _open_inside(root, path, directory=True)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"


def read_text(root: Path, path: str | Path, limit: int = MAX_SMALL) -> str:
    """`read_bytes` decoded as UTF-8 (undecodable bytes replaced: they are reported by the
    parser as text that does not parse, never raised)."""
    return read_bytes(root, path, limit).decode("utf-8", "replace")
