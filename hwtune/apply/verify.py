"""`hwtune verify`: did a running TensorFlow process really get the profile?

What can be checked from outside, honestly:
- its environment: the one it started with (psutil's `Process.environ()`, i.e.
  `/proc/PID/environ`), overlaid with what `hwtune.configure()` set inside it, which it
  records for verify (`hwtune.apply.record`): a setenv never shows in /proc (proc(5)).
  CUDA_VISIBLE_DEVICES matches when it names the planned GPUs, by index or by the UUID the
  planned hardware gives that index, which is how `hwtune exec` names them (`_same_gpus`);
- its CPU affinity (psutil `cpu_affinity()`, sched_getaffinity(2));
- its inter-op pool: TensorFlow names those threads "tf_Compute" (the "Compute" pool of
  tensorflow/core/common_runtime/process_util.cc, "tf_" prefixed by tsl's thread naming), so
  their number is the inter-op size once the runtime has started. XLA's CPU runtime (its
  threads are "tf_XLA…") starts tf_Compute threads of its own: with a Keras model compiled
  with jit_compile=True, TF 2.21 showed inter-op + 1 tf_Compute threads (on a 2-vCPU EPYC VM,
  for inter-op 1, 2 and 3). Then the count says nothing exact, and configure()'s record of
  `tf.config.threading` having taken the value is the evidence, else it cannot tell. Without
  XLA, Keras's fit runs further pools named "Compute" (TF 2.21: one thread beyond the pool
  after fit, five inside its epochs): more threads than the pool are OK when the variable is
  as planned, fewer never are;
- its intra-op pool only as a lower bound: the Eigen pool's threads are not named (they keep
  the process's name, like BLAS and Python threads), so "at least N such threads" is what
  can be said;
- its NUMA memory policy, where the node has several NUMA nodes: `/proc/PID/numa_maps`
  prints the task's policy ("bind:0") for mappings without their own.
Thread names come from /proc/PID/task/TID/comm: psutil lists a process's threads (ids and
times) but not their names. Each check is OK, DIFFERENT, or CANNOT TELL when the evidence is
not there (TensorFlow has not started, XLA's threads blur the pool, a record is unreadable).
psutil is imported here and in the daemon only, never on detect/configure/env's path: its
import costs about 28 ms (`python -X importtime`, on a 2-vCPU EPYC VM), configure()'s whole
budget is 30 ms.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hwtune.apply.render import INTER_OP_ENV
from hwtune.models.cpulist import format_cpulist
from hwtune.models.words import plural

if TYPE_CHECKING:
    from hwtune.pipeline.request import Planned

Status = Literal["OK", "DIFFERENT", "CANNOT TELL"]
CANNOT_TELL: Status = "CANNOT TELL"
INTER_OP_THREAD = "tf_Compute"  # comm is cut to 15 characters (TASK_COMM_LEN 16)
XLA_THREAD_PREFIX = "tf_XLA"  # tf_XLAEigen: XLA's CPU runtime pool
GPU_LIST = "CUDA_VISIBLE_DEVICES"
EXTRA_COMPUTE_NOTE = (
    "one tf_Compute thread more than the pool, as TensorFlow 2.21 runs while Keras trains "
    "(the pool alone shows before the first step and at exit)"
)


@dataclass(frozen=True)
class Check:
    setting: str
    expected: str
    actual: str
    status: Status
    note: str = ""


@dataclass(frozen=True)
class Expectation:
    env: Mapping[str, str]
    cpus: tuple[int, ...] = ()
    intra_op: int | None = None
    inter_op: int | None = None
    numa_nodes: tuple[int, ...] = ()  # checked only when non-empty (multi-node machines)
    numa_policy: str = "bind"
    # The planned hardware's GPU UUIDs by index ("0" -> "GPU-…"): CUDA_VISIBLE_DEVICES may
    # name the planned GPUs either way (_same_gpus).
    gpu_uuids: Mapping[str, str] = field(default_factory=dict)


def expected_for(planned: Planned, numa_policy: str = "bind") -> Expectation:
    """What a process planned as `planned` should run with: the env files' variables, the
    pools, and (for pinned instances) its slice's CPUs and NUMA nodes. Instances a tune result
    left unpinned (the profile's `pinning`) get no affinity or NUMA policy to check."""
    from hwtune.apply.launch import instance_pinning, instance_slice
    from hwtune.apply.render import env_map, thread_counts

    profile = planned.profile
    intra, inter = thread_counts(profile)
    mine = instance_slice(profile, profile.intent.instance)
    pinned = instance_pinning(profile, planned.hardware).pinned
    return Expectation(
        env=env_map(profile),
        cpus=mine.cpus if pinned else (),
        intra_op=intra,
        inter_op=inter,
        numa_nodes=mine.numa_nodes if pinned and len(planned.hardware.numa) > 1 else (),
        numa_policy=numa_policy,
        gpu_uuids={str(g.index): g.uuid for g in planned.hardware.gpus if g.uuid},
    )


@dataclass(frozen=True)
class Observation:
    pid: int
    environ: dict[str, str]
    cpus: tuple[int, ...] | None
    threads: Counter[str] = field(default_factory=Counter)
    comm: str = ""
    numa_policy: str | None = None
    record: Mapping[str, Any] | None = None  # what configure() set inside (hwtune.apply.record)
    record_note: str = ""  # why a record was not used
    rss_bytes: int | None = None
    # The ancestor with a configure() record this process was forked from without an exec
    # (`configured_ancestor`): its environment may hold what configure() set there.
    forked_from: int | None = None
    # `record` is that ancestor's (its "env" alone): this process was forked after
    # configure() set those variables there (`inherited_record`), so it holds them too.
    record_inherited: bool = False

    @property
    def tf_started(self) -> bool:
        return any(name.startswith("tf_") for name in self.threads)

    @property
    def xla_started(self) -> bool:
        return any(name.startswith(XLA_THREAD_PREFIX) for name in self.threads)

    def recorded(self, section: str) -> dict[str, Any]:
        value = (self.record or {}).get(section)
        return value if isinstance(value, dict) else {}


def read_or_none(path: str) -> bytes | None:
    """The bytes of `path` (a /proc file of a process that may end), or None."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def parse_numa_policy(text: str) -> str | None:
    """The policy of the first mapping in numa_maps ("default", "bind:0", "prefer:1"…)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            return fields[1]
    return None


def _thread_names(pid: int, tids: list[int]) -> Counter[str]:
    threads: Counter[str] = Counter()
    for tid in tids:
        comm = read_or_none(f"/proc/{pid}/task/{tid}/comm")
        if comm is not None:
            threads[comm.decode("utf-8", "replace").strip()] += 1
    return threads


def observe(pid: int) -> Observation | None:
    """What psutil and /proc show about `pid`; None when it is gone or not ours to read."""
    import psutil

    from hwtune.apply import record

    try:
        process = psutil.Process(pid)
        with process.oneshot():
            environ = process.environ()
            cpus = tuple(sorted(process.cpu_affinity() or ()))
            tids = [thread.id for thread in process.threads()]
            comm = process.name()
            rss = process.memory_info().rss
            uid = process.uids().real
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    # Threads are counted by /proc/PID/task/TID/comm, which the kernel cuts to 15 bytes;
    # psutil's name() gives the full name of a longer executable (tensorflow_model_server),
    # which no thread would then match.
    kernel_comm = read_or_none(f"/proc/{pid}/comm")
    if kernel_comm is not None:
        comm = kernel_comm.decode("utf-8", "replace").strip() or comm
    numa = read_or_none(f"/proc/{pid}/numa_maps")
    found, note = record.read(pid, [environ, os.environ], owner=uid)
    ancestor = None if found is not None or note else configured_ancestor(pid, environ)
    forked_from, inherited = (None, None) if ancestor is None else ancestor
    if inherited is not None:
        inherited = inherited_record(pid, inherited)
    return Observation(
        pid=pid,
        environ=dict(environ),
        cpus=cpus or None,
        threads=_thread_names(pid, tids),
        comm=comm,
        numa_policy=parse_numa_policy(numa.decode("utf-8", "replace")) if numa else None,
        record=found if found is not None else inherited,
        record_note=note,
        rss_bytes=rss,
        forked_from=forked_from,
        record_inherited=inherited is not None,
    )


def inherited_record(pid: int, found: Mapping[str, Any]) -> dict[str, Any] | None:
    """What of an ancestor's record (`configured_ancestor`) holds in `pid`, forked from it
    without an exec: its "env", when `pid` started after configure() set those variables
    (os.environ is copied at fork: multiprocessing docs, "Contexts and start methods"), else
    None. Not its "tensorflow" or "threads": they say what the ancestor's TensorFlow took.

    A child started before, or a record of an hwtune that did not say when (no
    `env_since_boot`), may not hold them: None, and verify cannot tell (`forked_note`)."""
    from hwtune.apply import record

    since = found.get("env_since_boot")
    started = record.start_time(pid)
    env = found.get("env")
    if not isinstance(since, (int, float)) or started is None or not isinstance(env, dict):
        return None
    # In clock ticks, cut down (proc(5)): the child's real start is no earlier than this.
    if int(started) / os.sysconf("SC_CLK_TCK") < since:
        return None
    return {"env": env}


def check_job_environment(seen: Observation) -> None:
    """ConfigError naming the observed process when its own launcher or HWTUNE_* variables
    are malformed: verify plans with the job's environment (its rank chooses its slice), and
    `LOCAL_RANK='x' is not a non-negative integer` alone read as verify's own environment,
    which has no LOCAL_RANK at all."""
    from hwtune.errors import ConfigError
    from hwtune.pipeline.config import overrides_from_environ
    from hwtune.pipeline.ranks import local_rank

    try:
        local_rank(seen.environ)
        overrides_from_environ(seen.environ)
    except ConfigError as err:
        raise ConfigError(
            f"in the environment of pid {seen.pid} (the job observed, not hwtune's own): "
            f"{err.message}",
            hint=err.hint,
        ) from err


# How many ancestors up a fork without exec is followed (a pool worker's own fork is two).
MAX_FORK_DEPTH = 4


def configured_ancestor(
    pid: int, environ: Mapping[str, str]
) -> tuple[int, Mapping[str, Any]] | None:
    """(pid, record) of the nearest ancestor with a configure() record that `pid` was forked
    from without an exec, else None.

    A child forked after configure() (a multiprocessing "fork" worker running TensorFlow)
    holds the variables configure() set, but /proc/PID/environ shows the environment the
    program was exec'd with, and such a child writes no record (hwtune.apply.record), so
    verify read its settings as missing. A fork without an exec keeps its parent's
    executable, command line and start environment; an exec'd child gets the environment
    configure() set (subprocess passes os.environ), which /proc shows as it is.
    """
    import psutil

    from hwtune.apply import record

    try:
        child = psutil.Process(pid)
        exe, cmdline = child.exe(), child.cmdline()
        for parent in child.parents()[:MAX_FORK_DEPTH]:
            with parent.oneshot():
                seen = (parent.exe(), parent.cmdline(), parent.environ())
                same = seen == (exe, cmdline, environ)
                owner = parent.uids().real
            if not same:
                return None
            found = record.read(parent.pid, [environ, os.environ], owner=owner)[0]
            if found is not None:
                return int(parent.pid), found
    except psutil.Error:
        return None
    return None


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, parents first."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return [pid]
    return [pid, *(child.pid for child in children)]


def observe_tree(pid: int, *, named: bool = False) -> Observation | None:
    """The process under `pid` (itself included) that runs TensorFlow; else `pid` itself when
    the user named it (`--pid`), or the deepest one below a command hwtune started (a
    wrapper's job, before TensorFlow starts). hwtune's own process is never one of them:
    `hwtune verify --pid $$` from a shell has hwtune below the shell."""
    mine = os.getpid()
    seen = [o for o in (observe(p) for p in descendants(pid) if p != mine) if o is not None]
    if not seen:
        return None
    with_tf = [o for o in seen if o.tf_started]
    if with_tf:
        return max(with_tf, key=lambda o: o.threads[INTER_OP_THREAD])
    if named:
        return next((o for o in seen if o.pid == pid), seen[0])
    return seen[-1]


def _same_gpus(want: str, have: str, uuids: Mapping[str, str]) -> bool:
    """Whether two CUDA_VISIBLE_DEVICES values name the same GPUs, in the same order.

    The plan names GPUs by index, in PCI bus order (its CUDA_DEVICE_ORDER=PCI_BUS_ID has CUDA
    number them so); `hwtune exec` names a copy's GPUs by UUID when the hardware knows them
    (hwtune.apply.launch.env_for_instance: a UUID survives reordering and a cgroup's
    renumbering). `uuids` (index -> UUID, from the planned hardware) makes the two one; a MIG
    device is named by its UUID in both."""

    def named(value: str) -> list[str]:
        return [uuids.get(entry.strip(), entry.strip()) for entry in value.split(",")]

    return named(want) == named(have)


BY_UUID_NOTE = (
    "the planned GPUs by UUID, as hwtune exec names them (a UUID survives reordering and a "
    "cgroup's renumbering); EXPECTED shows their indices in PCI bus order"
)


def _env_status(
    name: str, want: str, have: str | None, uuids: Mapping[str, str]
) -> tuple[Status, str]:
    if have == want:
        return "OK", ""
    if name == GPU_LIST and have is not None and _same_gpus(want, have, uuids):
        return "OK", BY_UUID_NOTE
    return "DIFFERENT", ""


def _env_check(name: str, want: str, seen: Observation, uuids: Mapping[str, str]) -> Check:
    inside = seen.recorded("env")
    if name in inside:
        have = inside[name]
        shown = "(unset)" if have is None else str(have)
        status, note = _env_status(name, want, None if have is None else str(have), uuids)
        recorded = "as hwtune.configure() left it inside the process (its record)"
        if seen.record_inherited:
            recorded = inherited_note(seen.forked_from)
        return Check(
            f"env {name}", want, shown, status, f"{recorded}; {note}" if note else recorded
        )
    started = seen.environ.get(name)
    if started is None and seen.record_note:
        return Check(
            f"env {name}",
            want,
            "(unset at start)",
            CANNOT_TELL,
            f"configure()'s record could not be used: {seen.record_note}",
        )
    status, note = _env_status(name, want, started, uuids)
    if status == "DIFFERENT" and seen.forked_from is not None and not seen.record_inherited:
        status, note = CANNOT_TELL, forked_note(seen.forked_from)
    return Check(f"env {name}", want, "(unset)" if started is None else started, status, note)


def inherited_note(ancestor: int | None) -> str:
    return (
        f"as hwtune.configure() left it in pid {ancestor}, which this process was forked from "
        "without an exec after configure() ran: it holds what that record says"
    )


def forked_note(ancestor: int) -> str:
    return (
        f"forked without an exec from pid {ancestor}, which ran hwtune.configure(): it holds "
        "what configure() had set when it forked, which /proc never shows, and a forked child "
        f"writes no record; verify pid {ancestor} (`hwtune verify --pid {ancestor}`)"
    )


def _inter_op_check(expected: int, seen: Observation) -> Check:
    setting = "inter-op pool (tf_Compute threads)"
    count = seen.threads[INTER_OP_THREAD]
    if not seen.tf_started:
        note = "TensorFlow's runtime has not started in this process"
        return Check(setting, str(expected), str(count), CANNOT_TELL, note)
    if count == expected:
        return Check(setting, str(expected), str(count), "OK")
    if count == expected + 1 and not seen.xla_started:
        # TF 2.21 under Keras's fit runs one tf_Compute thread more than the pool: inter-op
        # 1, 2 and 3 showed 2, 3 and 4 while training and sleeping after it, and the pool's
        # own N before fit and at exit (sampled every 50 ms, a 2-vCPU EPYC VM, XLA off).
        return Check(setting, str(expected), str(count), "OK", EXTRA_COMPUTE_NOTE)
    if not seen.xla_started:
        # More than one thread beyond the pool, with the variable as planned, is no mismatch:
        # TF 2.21 runs further pools named "Compute" while Keras's fit runs (5 threads beyond
        # the pool for inter-op 1 and 2, sampled inside fit's epochs on a 2-vCPU EPYC VM), so
        # only fewer threads than planned, or a variable not as planned, is a difference.
        variable = seen.recorded("env").get(INTER_OP_ENV) or seen.environ.get(INTER_OP_ENV)
        if count > expected and variable == str(expected):
            note = (
                f"{count} tf_Compute threads with {INTER_OP_ENV}={expected}: TensorFlow names "
                "other pools Compute too (TF 2.21 runs 5 more while Keras's fit runs)"
            )
            return Check(setting, str(expected), str(count), "OK", note)
        return Check(setting, str(expected), str(count), "DIFFERENT")
    applied = str(seen.recorded("tensorflow").get("inter_op_parallelism_threads", ""))
    taken = seen.recorded("threads").get("inter_op") == expected and (
        applied.startswith(("applied", "in effect"))
    )
    xla = "XLA's runtime starts tf_Compute threads of its own, so the count is not the pool"
    if taken:
        return Check(
            setting, str(expected), str(count), "OK", f"{xla}; configure() recorded: {applied}"
        )
    return Check(setting, str(expected), str(count), CANNOT_TELL, xla)


def compare(expected: Expectation, seen: Observation) -> list[Check]:
    checks: list[Check] = []
    for name in sorted(expected.env):
        checks.append(_env_check(name, expected.env[name], seen, expected.gpu_uuids))
    if expected.cpus:
        have_cpus = "(unreadable)" if seen.cpus is None else format_cpulist(seen.cpus)
        status: Status = (
            CANNOT_TELL
            if seen.cpus is None
            else ("OK" if set(seen.cpus) == set(expected.cpus) else "DIFFERENT")
        )
        checks.append(Check("CPU affinity", format_cpulist(expected.cpus), have_cpus, status))
    if expected.inter_op is not None:
        checks.append(_inter_op_check(expected.inter_op, seen))
    if expected.intra_op is not None:
        # Unnamed threads besides the main thread: the intra-op pool plus BLAS/Python threads.
        unnamed = max(0, seen.threads[seen.comm] - 1)
        checks.append(
            Check(
                "intra-op pool (unnamed threads)",
                f">= {expected.intra_op}",
                str(unnamed),
                CANNOT_TELL
                if not seen.tf_started
                else ("OK" if unnamed >= expected.intra_op else "DIFFERENT"),
                "a lower bound: TensorFlow does not name these threads",
            )
        )
    if expected.numa_nodes and expected.numa_policy != "none":
        # numa_maps writes the policy as mpol_to_str does: "bind:0-1", "prefer:0".
        if expected.numa_policy == "bind":
            want = f"bind:{format_cpulist(expected.numa_nodes)}"
        else:
            want = f"prefer:{expected.numa_nodes[0]}"
        have = seen.numa_policy or "(unreadable)"
        checks.append(
            Check(
                "NUMA memory policy",
                want,
                have,
                CANNOT_TELL
                if seen.numa_policy is None
                else ("OK" if have == want else "DIFFERENT"),
            )
        )
    return checks


def describe(seen: Observation) -> str:
    """The header line: which process, its memory and threads, and whether configure() ran."""
    parts = [f"pid {seen.pid} ({seen.comm})"]
    if seen.rss_bytes is not None:
        parts.append(f"{seen.rss_bytes / (1 << 20):.0f} MiB resident")
    parts.append(plural(sum(seen.threads.values()), "thread"))
    if seen.record_inherited:
        parts.append(f"forked from pid {seen.forked_from} after its hwtune.configure()")
    elif seen.record is not None:
        parts.append("hwtune.configure() ran inside")
    return ", ".join(parts)


def render_table(checks: list[Check]) -> str:
    header = ("SETTING", "EXPECTED", "ACTUAL", "RESULT")
    rows = [header] + [(c.setting, _cell(c.expected), _cell(c.actual), c.status) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    by_note: dict[str, list[str]] = {}
    for check in checks:
        if check.note:
            by_note.setdefault(check.note, []).append(check.setting)
    notes = [f"note: {', '.join(settings)}: {note}" for note, settings in by_note.items()]
    return "\n".join(lines + notes) + "\n"


def _cell(text: str) -> str:
    flat = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return flat if len(flat) <= 48 else flat[:45] + "..."
