"""`hwtune exec`: start a command (or N copies) pinned to the profile's CPUs, NUMA node and GPUs.

Each instance gets its slice of the node (`profile.instances[i]`): CPU affinity
(sched_setaffinity), a NUMA memory policy bound to the slice's nodes (set_mempolicy(2),
called through ctypes so numactl need not be installed), `CUDA_VISIBLE_DEVICES` for its GPUs
(UUIDs when known, so the numbering cannot differ from NVML's), the profile's environment and
`HWTUNE_INSTANCE`/`HWTUNE_INSTANCES`.

One instance replaces hwtune (execve): the command keeps hwtune's PID, terminal and signals.
Several run as children, each in its own process group with stdin from /dev/null; their
output is prefixed line by line with "[i] "; SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
SIGUSR2 are forwarded to every group; hwtune exits with the worst status (a signal death
counts as 128+N, as shells report it). With `fail_fast`, the first failure terminates the
others (SIGTERM, then SIGKILL after `kill_after` seconds).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Literal, cast

from hwtune.errors import HwtuneError
from hwtune.models.hardware import Hardware
from hwtune.models.profile import InstanceSlice, Profile

NumaPolicy = Literal["bind", "preferred", "none"]

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
FORWARDED_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_LONG_BITS = ctypes.sizeof(ctypes.c_ulong) * 8
_LIBC = ctypes.CDLL(None, use_errno=True)
_POLL_S = 0.1  # how often children are polled while output is quiet
_PIPE_GRACE_S = 2.0  # how long a dead child's pipes may stay open (a grandchild holding them)
_MAX_PARTIAL = 64 * 1024  # a "line" longer than this is flushed without waiting for "\n"


def _syscall_numbers() -> tuple[int, int]:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(38, f"set_mempolicy: unknown syscall number on {platform.machine()}")
    return numbers


def set_mempolicy(mode: int, nodes: Iterable[int]) -> None:
    """set_mempolicy(2) for the calling thread (inherited by children, kept across execve)."""
    chosen = sorted(set(nodes))
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
    words = 16  # 1024 nodes; the kernel's MAX_NUMNODES is at most 1 << 10 (NODES_SHIFT 10)
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


def instance_slice(profile: Profile, index: int) -> InstanceSlice:
    for candidate in profile.instances:
        if candidate.index == index:
            return candidate
    if profile.instance.index == index:
        return profile.instance
    raise HwtuneError(f"the profile has no instance {index} (it has {len(profile.instances)})")


def env_for_instance(
    profile: Profile, index: int, *, hardware: Hardware | None = None
) -> dict[str, str]:
    """The variables instance `index` gets on top of the caller's environment."""
    from hwtune.render import env_map

    env = env_map(profile)
    env["HWTUNE_INSTANCE"] = str(index)
    env["HWTUNE_INSTANCES"] = str(max(len(profile.instances), profile.intent.instances))
    mine = instance_slice(profile, index)
    if any(s.gpus for s in profile.instances) or mine.gpus:
        uuids = {g.index: g.uuid for g in hardware.gpus} if hardware is not None else {}
        if mine.gpus and all(uuids.get(g) for g in mine.gpus):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(uuids[g]) for g in mine.gpus)
        else:
            # NVML numbers GPUs in PCI bus order; CUDA's default order is "fastest first"
            # (CUDA C Programming Guide, CUDA_DEVICE_ORDER), so ask CUDA for bus order too.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in mine.gpus)
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


@dataclass(frozen=True)
class InstanceSpec:
    """How to start one instance: its complete environment and where it runs."""

    index: int
    env: Mapping[str, str]
    cpus: tuple[int, ...] = ()  # () leaves the affinity as it is
    numa_nodes: tuple[int, ...] = ()  # () leaves the memory policy as it is
    notes: tuple[str, ...] = field(default=())


def merge_environment(
    base: Mapping[str, str], planned: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """`base` plus `planned`; a variable the user already set to another value wins (noted).

    HWTUNE_INSTANCE(S) are hwtune's own protocol with its children and always set.
    """
    env = dict(base)
    notes: list[str] = []
    for name, value in planned.items():
        if name in base and base[name] != value and not name.startswith("HWTUNE_INSTANCE"):
            notes.append(
                f"keeping {name}={base[name]!r} from the environment (profile: {value!r})"
            )
            continue
        env[name] = value
    return env, notes


def _pin(
    cpus: tuple[int, ...],
    nodes: tuple[int, ...],
    policy: NumaPolicy,
    report: Callable[[str], object],
) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    if nodes and policy != "none":
        mode = MPOL_BIND if policy == "bind" else MPOL_PREFERRED
        try:
            set_mempolicy(mode, nodes if policy == "bind" else nodes[:1])
        except OSError as err:  # e.g. EPERM under docker's default seccomp profile
            report(f"hwtune exec: NUMA memory policy not set ({err.strerror}); CPUs are pinned\n")


def exec_replace(command: Sequence[str], spec: InstanceSpec, policy: NumaPolicy = "bind") -> None:
    """Pin this process and replace it with `command` (never returns on success)."""
    _pin(spec.cpus, spec.numa_nodes, policy, lambda text: os.write(2, text.encode()))
    try:
        os.execvpe(command[0], list(command), dict(spec.env))
    except OSError as err:
        raise HwtuneError(f"cannot run {command[0]!r}: {err.strerror}") from err


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128+N for a death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Launcher:
    """Runs several instances at once; see the module docstring for the behaviour."""

    def __init__(
        self,
        command: Sequence[str],
        specs: Sequence[InstanceSpec],
        *,
        stdout: IO[bytes],
        stderr: IO[bytes],
        policy: NumaPolicy = "bind",
        fail_fast: bool = False,
        kill_after: float = 10.0,
        prefix: bool = True,
    ) -> None:
        self.command = list(command)
        self.specs = list(specs)
        self.out = {1: stdout, 2: stderr}
        self.policy: NumaPolicy = policy
        self.fail_fast = fail_fast
        self.kill_after = kill_after
        self.prefix = prefix
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.statuses: dict[int, int] = {}
        self._stopping_since: float | None = None
        self._signalled = False

    def _forward(self, signum: int, _frame: object) -> None:
        self._signalled = True
        for child in self.children.values():
            if child.returncode is None:
                _killpg(child.pid, signum)

    def _start(self, spec: InstanceSpec) -> subprocess.Popen[bytes]:
        # The forwarded signals are blocked across fork+exec: one arriving in between would
        # run hwtune's handler in the child and be lost at exec. The child restores the
        # default actions, then unblocks, so a pending signal acts on the real command.
        def child_setup() -> None:  # runs in the child between fork and exec
            for sig in FORWARDED_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
            os.setpgid(0, 0)
            _pin(spec.cpus, spec.numa_nodes, self.policy, lambda text: os.write(2, text.encode()))

        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        try:
            return subprocess.Popen(
                self.command,
                env=dict(spec.env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=child_setup,
            )
        except OSError as err:
            raise HwtuneError(f"cannot run {self.command[0]!r}: {err.strerror}") from err
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED_SIGNALS}
        selector = selectors.DefaultSelector()
        partial: dict[tuple[int, int], bytes] = {}
        try:
            for spec in self.specs:
                if self._signalled:
                    break
                child = self._start(spec)
                self.children[spec.index] = child
                for fd_number, pipe in ((1, child.stdout), (2, child.stderr)):
                    assert pipe is not None
                    selector.register(pipe, selectors.EVENT_READ, (spec.index, fd_number))
                    partial[(spec.index, fd_number)] = b""
            exited_at: dict[int, float] = {}
            while selector.get_map() or len(self.statuses) < len(self.children):
                for key, _ in selector.select(timeout=_POLL_S):
                    index, fd_number = key.data
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        self._emit(index, fd_number, partial, chunk)
                    else:
                        self._close(
                            selector, cast(IO[bytes], key.fileobj), index, fd_number, partial
                        )
                self._reap(exited_at)
                self._close_orphaned_pipes(selector, exited_at, partial)
                self._enforce_fail_fast()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            selector.close()
        return max((exit_status(code) for code in self.statuses.values()), default=0)

    def _emit(
        self, index: int, fd_number: int, partial: dict[tuple[int, int], bytes], chunk: bytes
    ) -> None:
        data = partial[(index, fd_number)] + chunk
        *lines, rest = data.split(b"\n")
        if len(rest) > _MAX_PARTIAL:
            lines.append(rest)
            rest = b""
        partial[(index, fd_number)] = rest
        if lines:
            self._write(
                index, fd_number, b"".join(self._tag(index) + line + b"\n" for line in lines)
            )

    def _tag(self, index: int) -> bytes:
        return f"[{index}] ".encode() if self.prefix else b""

    def _write(self, index: int, fd_number: int, data: bytes) -> None:
        stream = self.out[fd_number]
        try:
            stream.write(data)
            stream.flush()
        except BrokenPipeError:
            pass  # `hwtune exec … | head`: the children keep running, their output is dropped

    def _close(
        self,
        selector: selectors.BaseSelector,
        pipe: IO[bytes],
        index: int,
        fd_number: int,
        partial: dict[tuple[int, int], bytes],
    ) -> None:
        selector.unregister(pipe)
        rest = partial.pop((index, fd_number), b"")
        if rest:
            self._write(index, fd_number, self._tag(index) + rest + b"\n")
        pipe.close()

    def _reap(self, exited_at: dict[int, float]) -> None:
        for index, child in self.children.items():
            if index not in self.statuses and child.poll() is not None:
                self.statuses[index] = child.returncode
                exited_at[index] = time.monotonic()

    def _close_orphaned_pipes(
        self,
        selector: selectors.BaseSelector,
        exited_at: dict[int, float],
        partial: dict[tuple[int, int], bytes],
    ) -> None:
        now = time.monotonic()
        for key in list(selector.get_map().values()):
            index, fd_number = key.data
            if index in exited_at and now - exited_at[index] > _PIPE_GRACE_S:
                self._close(selector, cast(IO[bytes], key.fileobj), index, fd_number, partial)

    def _enforce_fail_fast(self) -> None:
        if not self.fail_fast:
            return
        failed = any(code != 0 for code in self.statuses.values())
        live = [c for c in self.children.values() if c.returncode is None]
        if not failed or not live:
            return
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            for child in live:
                _killpg(child.pid, signal.SIGTERM)
        elif time.monotonic() - self._stopping_since > self.kill_after:
            for child in live:
                _killpg(child.pid, signal.SIGKILL)


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(pgid, signum)
