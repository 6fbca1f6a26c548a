"""`hwtune exec`: start a command (or N copies) pinned to the profile's CPUs, NUMA node and GPUs.

Each instance gets its slice of the node (`profile.instances[i]`): CPU affinity
(sched_setaffinity), a NUMA memory policy bound to the slice's nodes (set_mempolicy(2),
called through ctypes so numactl need not be installed), `CUDA_VISIBLE_DEVICES` for its GPUs
(UUIDs when known, so the numbering cannot differ from NVML's), the profile's environment and
`HWTUNE_INSTANCE`/`HWTUNE_INSTANCES`. Whether several instances are pinned is the profile's
`pinning` setting (`instance_pinning`): the rule of hwtune.planner.instances.pinning pins every
slice, one-core slices included, except where no CPU list was detected (the slices' numbers are
made up), and a tune result that measured unpinned copies faster leaves them unpinned, their
thread pools still capped to the slice.

One instance replaces hwtune (execve, `exec_replace`): the command keeps hwtune's PID,
terminal and signals. Several run as children of hwtune (hwtune.apply.launcher), each started
through `pin_instance` and asking the kernel to kill it when hwtune dies (PR_SET_PDEATHSIG),
even by SIGKILL. Before anything starts, every slice's CPUs are tried (in a thread of their
own), so a plan the kernel refuses starts no instance.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

from hwtune.apply.mempolicy import MPOL_BIND as MPOL_BIND
from hwtune.apply.mempolicy import MPOL_DEFAULT as MPOL_DEFAULT
from hwtune.apply.mempolicy import MPOL_PREFERRED as MPOL_PREFERRED
from hwtune.apply.mempolicy import get_mempolicy as get_mempolicy
from hwtune.apply.mempolicy import set_mempolicy as set_mempolicy
from hwtune.errors import CommandNotStarted, HwtuneError, stderr_line
from hwtune.models.cpulist import name_cpus
from hwtune.models.hardware import Hardware
from hwtune.models.profile import InstanceSlice, Profile
from hwtune.planner.instances import Pinning

NumaPolicy = Literal["bind", "preferred", "none"]


def instance_slice(profile: Profile, index: int) -> InstanceSlice:
    for candidate in profile.instances:
        if candidate.index == index:
            return candidate
    if profile.instance.index == index:
        return profile.instance
    raise HwtuneError(f"the profile has no instance {index} (it has {len(profile.instances)})")


def instance_pinning(profile: Profile, hardware: Hardware) -> Pinning:
    """Whether the profile's instances are pinned to their slices, and why: the profile's
    `pinning` (the rule, or what `hwtune tune` measured for this instance count), else, for
    one instance or a profile written before the field, the planner's rule applied to its
    slices (hwtune.planner.instances.pinning)."""
    from hwtune.planner.instances import pinning

    if profile.pinning is not None:
        return Pinning(bool(profile.pinning.value), profile.pinning.reason)
    return pinning(hardware, [s.cpus for s in profile.instances] or [profile.instance.cpus])


def env_for_instance(
    profile: Profile, index: int, *, hardware: Hardware | None = None
) -> dict[str, str]:
    """The variables instance `index` gets on top of the caller's environment.

    The GPUs named are those the plan gave the slice, which are among the ones the caller's
    CUDA_VISIBLE_DEVICES leaves (`hardware.gpu_visibility`), so a copy stays inside a
    scheduler's allocation. None are named for one instance under such a limit (the caller's
    variable is kept), nor where which GPUs the caller's names cannot be known."""
    from hwtune.apply.render import env_map

    env = env_map(profile)
    # What is set here beyond the plan must be in hwtune.apply.marker.LAUNCH_VARIABLES, so
    # that `hwtune env` evaluated in the instance does not unset it.
    count = max(len(profile.instances), profile.intent.instances)
    env["HWTUNE_INSTANCE"] = str(index)
    env["HWTUNE_INSTANCES"] = str(count)
    mine = instance_slice(profile, index)
    seen = hardware.gpu_visibility if hardware is not None else None
    if seen is not None and (seen.gpus is None or count < 2):
        return env
    mig = [d for d in mine.devices if not d.isdigit()]
    if mig:
        # A MIG slice is named by its UUID only (NVIDIA MIG User Guide); one whose UUID is
        # unknown is left to CUDA, which takes the first MIG device it enumerates.
        if all(d.startswith("MIG-") for d in mig):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(mig)
    elif any(s.gpus for s in profile.instances) or mine.gpus:
        uuids = {g.index: g.uuid for g in hardware.gpus} if hardware is not None else {}
        if mine.gpus and all(uuids.get(g) for g in mine.gpus):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(uuids[g]) for g in mine.gpus)
        else:
            # NVML numbers GPUs in PCI bus order; CUDA's default order is "fastest first"
            # (CUDA C Programming Guide, CUDA_DEVICE_ORDER), so ask CUDA for bus order too.
            # CUDA counts only the GPUs this process may open (cuda_visible.cuda_ordinals).
            from hwtune.probes.cuda_visible import cuda_ordinals

            ordinals = cuda_ordinals(hardware.gpus) if hardware is not None else {}
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(ordinals.get(g, g)) for g in mine.gpus)
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


def divides_callers_gpus(hardware: Hardware, environ: Mapping[str, str]) -> bool:
    """Whether the GPUs exec names for its copies may replace the CUDA_VISIBLE_DEVICES of
    `environ`: when it has none, or when the plan's GPUs are what that very value leaves
    (`hardware` was detected under it). A model read from --hardware or --root under another
    value proves nothing about this allocation, and the caller's variable is kept."""
    caller = environ.get("CUDA_VISIBLE_DEVICES")
    if caller is None:
        return True
    seen = hardware.gpu_visibility
    return (
        seen is not None
        and seen.value == caller
        and seen.device_order == environ.get("CUDA_DEVICE_ORDER")
    )


def merge_environment(
    base: Mapping[str, str],
    planned: Mapping[str, str],
    *,
    keep_launch: bool = False,
    force: Iterable[str] = (),
) -> tuple[dict[str, str], list[str]]:
    """`base` plus `planned`; a variable the user already set to another value wins (noted).

    Values hwtune itself wrote earlier (`eval "$(hwtune env)"`, an outer `hwtune exec`; see
    hwtune.apply.marker) are not the user's: they are replaced, except, in a copy an outer
    exec started, its launch variables the plan does not set (marker.stale). HWTUNE_INSTANCE(S)
    are hwtune's own protocol with its children and always set.

    `keep_launch`: this exec starts no copies of its own but runs the command as the copy it
    is in (a plain `hwtune exec -- CMD` there), so the plan sets none of the launch variables
    (marker.LAUNCH_VARIABLES): the copy keeps its index, count and GPUs. The plan's would be
    another launch's: in a copy pinned to its slice, instance 0 of 1 with every GPU.

    `force`: planned variables set whatever `base` holds, as HWTUNE_INSTANCE(S) are: a copy's
    share of the GPUs the caller's CUDA_VISIBLE_DEVICES leaves replaces that list.
    """
    from hwtune.apply.marker import (
        INSTANCE_VARIABLES,
        LAUNCH_VARIABLES,
        fatal_values,
        replace_own,
        replaced_note,
    )

    if keep_launch:
        planned = {name: value for name, value in planned.items() if name not in LAUNCH_VARIABLES}
    always = [name for name in (*INSTANCE_VARIABLES, *force) if name in planned]
    fatal = fatal_values(base, planned)
    env, kept = replace_own(base, planned, always=[*always, *fatal])
    notes = [
        f"keeping {name}={user!r} from the environment (profile: {value!r})"
        for name, (user, value) in kept.items()
    ]
    notes += [replaced_note(n, base[n], planned[n], why) for n, why in fatal.items()]
    return env, notes


def pin_instance(
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
            why = f"NUMA memory policy not set ({err.strerror}); CPUs are pinned"
            report(stderr_line("exec", "warning", why) + "\n")


# Python ignores these at start-up and an ignored signal stays ignored across execve (POSIX
# execve), so the command would not die of SIGPIPE under `| head`; subprocess.Popen's
# restore_signals resets the same three for the instances.
_PYTHON_IGNORES = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


def exec_replace(command: Sequence[str], spec: InstanceSpec, policy: NumaPolicy = "bind") -> None:
    """Pin this process and replace it with `command` (never returns on success)."""
    env = checked_environment(spec.env)
    check_program(command)
    try:
        pin_instance(spec.cpus, spec.numa_nodes, policy, lambda text: os.write(2, text.encode()))
    except OSError as err:  # CPUs this kernel or cpuset will not give (a plan for elsewhere)
        raise HwtuneError(
            f"cannot pin to {name_cpus(spec.cpus)}: {err.strerror or err}",
            hint="plan for this machine (no --hardware or --root), or run with --no-pin",
        ) from err
    saved = [(number, signal.signal(number, signal.SIG_DFL)) for number in _PYTHON_IGNORES]
    try:
        try:
            os.execvpe(command[0], list(command), env)
        except OSError as err:
            fallback = shell_fallback(command, env) if err.errno == errno.ENOEXEC else None
            if fallback is None:
                raise
            os.execve(fallback[0], fallback, env)
    except OSError as err:
        for number, handler in saved:
            signal.signal(number, handler)
        raise not_started(command[0], err) from err


def shell_fallback(command: Sequence[str], env: Mapping[str, str]) -> list[str] | None:
    """`command` as execvp(3) runs it when execve(2) says ENOEXEC (an executable file the
    kernel cannot load, a script without `#!`): `/bin/sh FILE ARGS…`, FILE found as execvp
    finds it (the name itself when it has a `/`, else the first executable regular file on
    the environment's PATH). None when there is no such file."""
    program = command[0]
    if "/" in program:
        return ["/bin/sh", program, *command[1:]]
    for directory in os.get_exec_path(env):
        candidate = os.path.join(directory or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return ["/bin/sh", candidate, *command[1:]]
    return None


def not_started(program: str, err: OSError) -> CommandNotStarted:
    """The error for a command execve refused: 127 when not found, else 126 (as shells)."""
    return CommandNotStarted(
        f"cannot run {program!r}: {err.strerror or err}",
        not_found=err.errno in (errno.ENOENT, errno.ENOTDIR),
    )


def check_program(command: Sequence[str]) -> None:
    """CommandNotStarted (127) for an empty program name, as `env ""` exits.

    POSIX exec lists "path or file is an empty string" under ENOENT; Python's os.execvpe
    raises ValueError for it instead, and Popen tries "" in every PATH directory, which
    names the directory itself (EACCES): neither says what is wrong.
    """
    if not command[0]:
        raise not_started(command[0], OSError(errno.ENOENT, os.strerror(errno.ENOENT)))


def _affinity_error(cpus: tuple[int, ...]) -> OSError | None:
    """What sched_setaffinity(2) says to `cpus`, asked in a thread of its own.

    With pid 0 the call sets the calling thread's mask only (sched_setaffinity(2)), and that
    thread ends at once, so hwtune's own mask is untouched while the kernel applies every
    rule it would apply in the instance (offline CPUs, the cpuset).
    """
    errors: list[OSError] = []

    def attempt() -> None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as err:
            errors.append(err)

    probe = threading.Thread(target=attempt, name="hwtune-affinity-check", daemon=True)
    probe.start()
    probe.join()
    return errors[0] if errors else None


def check_affinities(specs: Sequence[InstanceSpec]) -> None:
    """HwtuneError naming the first instance whose CPUs the kernel refuses, before any starts.

    In the child the same refusal would surface only as subprocess's "Exception occurred in
    preexec_fn", once the instances before it were already running.
    """
    for spec in specs:
        err = _affinity_error(spec.cpus) if spec.cpus else None
        if err is not None:
            raise HwtuneError(
                f"cannot pin instance {spec.index} to {name_cpus(spec.cpus)}: "
                f"{err.strerror or err}",
                hint="plan for this machine (no --hardware or --root), or run with --no-pin",
            )


# prctl(2) through libc, looked up now: after fork only the forking thread exists in the
# child, and dlopen/dlsym there could wait forever on a lock another thread held (fork(2)).
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None  # no PR_SET_PDEATHSIG: the instances may outlive a killed hwtune
    try:
        return cast(Callable[..., int], ctypes.CDLL(None, use_errno=True).prctl)
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def die_with_parent(parent: int) -> None:
    """In the child, before exec: get SIGKILL when the parent dies (kept across execve).

    SIGKILL, because hwtune forwards every signal it can handle while it lives: it dies
    without doing so only of one it cannot (SIGKILL from `timeout -k`, the OOM killer), sent
    by someone who wanted the job gone without grace. A SIGTERM could be trapped or ignored
    (`trap "" TERM`), and the instance would run on, orphaned, its output going nowhere.
    The "parent" is the thread that forked (prctl(2)): the one in Launcher.run, which returns
    only once every instance is reaped. Executing a set-user-ID or file-capability binary
    clears the setting (prctl(2)).
    """
    if _PRCTL is None:
        return
    # prctl is variadic and glibc reads its arguments as unsigned long (sys/prctl.h).
    # Best effort: a refusal (a seccomp filter) leaves the instance as it was before.
    _PRCTL(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL))
    if os.getppid() != parent:  # hwtune died between fork and prctl: the signal never comes
        os.kill(os.getpid(), signal.SIGKILL)


def checked_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` as a dict, or HwtuneError naming a variable no environment can hold.

    execve(2) passes "NAME=value" as C strings, so a NUL (or an "=" in a name) cannot travel;
    config.py refuses those at the source, this is the last guard before the process starts.
    """
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise HwtuneError(
                f"the environment variable {name!r} cannot be passed to a program: "
                "names and values may not contain a NUL character (names no '=' either)",
                hint="fix the value where it is set (config file [env], --set or the profile)",
            )
    return dict(env)


def passable_environment(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The inherited `environ` without the entries no program can be given, and a note for
    each one dropped.

    The caller's environment may hold an entry execve(2) took but Python cannot pass on
    (`env '=x' hwtune exec …` gives a variable with an empty name: os.execve and Popen refuse
    the whole environment for it). It is not hwtune's to fix: it is dropped, said on stderr,
    and the command runs; the planned variables are still checked (`checked_environment`).
    """
    kept: dict[str, str] = {}
    notes: list[str] = []
    for name, value in environ.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            notes.append(
                f"dropping the inherited environment entry {f'{name}={value}'!r}: "
                "a variable with an empty name (or a NUL or '=' in it) cannot be passed on"
            )
        else:
            kept[name] = value
    return kept, notes
