"""The NUMA memory policy of the calling thread: set_mempolicy(2) and get_mempolicy(2),
called through ctypes so numactl need not be installed. A policy is inherited by children and
kept across execve, which is how `hwtune exec` binds each instance's memory to its nodes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Iterable

from hwtune.models.cpulist import MAX_NUMA_NODES

# linux/mempolicy.h
MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND = 0, 1, 2
# set_mempolicy / get_mempolicy syscall numbers per architecture: arch/x86/entry/syscalls/
# syscall_64.tbl (238, 239); include/uapi/asm-generic/unistd.h, used by arm64, riscv and
# loongarch (237, 236); arch/powerpc/kernel/syscalls/syscall.tbl (261, 260);
# arch/s390/kernel/syscalls/syscall.tbl (270, 269).
_SYSCALLS = {
    "x86_64": (238, 239),
    "aarch64": (237, 236),
    "arm64": (237, 236),
    "riscv64": (237, 236),
    "loongarch64": (237, 236),
    "ppc64le": (261, 260),
    "ppc64": (261, 260),
    "s390x": (270, 269),
}
_LONG_BITS = ctypes.sizeof(ctypes.c_ulong) * 8
_LIBC = ctypes.CDLL(None, use_errno=True)


def _syscall_numbers() -> tuple[int, int]:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(38, f"set_mempolicy: unknown syscall number on {platform.machine()}")
    return numbers


def set_mempolicy(mode: int, nodes: Iterable[int]) -> None:
    """set_mempolicy(2) for the calling thread (inherited by children, kept across execve)."""
    chosen = sorted(set(nodes))
    # Before the mask is sized from the highest id: node 10^18 asked for 10^16 words.
    wrong = [node for node in chosen if not 0 <= node < MAX_NUMA_NODES]
    if wrong:
        raise OSError(
            errno.EINVAL,
            f"set_mempolicy: NUMA node {wrong[-1]} is not in 0-{MAX_NUMA_NODES - 1} "
            "(the kernel's MAX_NUMNODES)",
        )
    words = (max(chosen) // _LONG_BITS + 1) if chosen else 1
    mask = (ctypes.c_ulong * words)()
    for node in chosen:
        mask[node // _LONG_BITS] |= 1 << (node % _LONG_BITS)
    # maxnode is one more than the bits passed: the kernel decrements it first (mm/mempolicy.c,
    # get_nodes), and libnuma passes nodemask size + 1 for the same reason.
    result = _LIBC.syscall(
        ctypes.c_long(_syscall_numbers()[0]),
        ctypes.c_int(mode),
        mask if chosen else None,
        ctypes.c_ulong(words * _LONG_BITS + 1 if chosen else 0),
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"set_mempolicy: {os.strerror(err)}")


def get_mempolicy() -> tuple[int, tuple[int, ...]]:
    """(mode, nodes) of the calling thread's memory policy."""
    words = MAX_NUMA_NODES // _LONG_BITS  # the kernel's MAX_NUMNODES is at most 1 << 10
    mode = ctypes.c_int(0)
    mask = (ctypes.c_ulong * words)()
    result = _LIBC.syscall(
        ctypes.c_long(_syscall_numbers()[1]),
        ctypes.byref(mode),
        mask,
        ctypes.c_ulong(words * _LONG_BITS),
        None,
        ctypes.c_ulong(0),
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"get_mempolicy: {os.strerror(err)}")
    nodes = tuple(
        i for i in range(words * _LONG_BITS) if mask[i // _LONG_BITS] >> (i % _LONG_BITS) & 1
    )
    return mode.value, nodes
