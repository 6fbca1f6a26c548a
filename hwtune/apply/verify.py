"""`hwtune verify`: did a running TensorFlow process really get the profile?

What can be checked from outside, honestly (read from /proc, proc(5)):
- its environment: `/proc/PID/environ` is the environment execve gave it (later setenv calls
  inside the process are not visible there), compared variable by variable;
- its CPU affinity: `Cpus_allowed_list` in `/proc/PID/status`;
- its inter-op pool: TensorFlow names those threads "tf_Compute" (the "Compute" pool of
  tensorflow/core/common_runtime/process_util.cc, "tf_" prefixed by tsl's thread naming), so
  their number is exactly the inter-op size once the runtime has started;
- its intra-op pool only as a lower bound: the Eigen pool's threads are not named (they keep
  the process's name, like BLAS and Python threads), so "at least N such threads" is what
  can be said;
- its NUMA memory policy, where the node has several NUMA nodes: `/proc/PID/numa_maps`
  prints the task's policy ("bind:0") for mappings without their own.
Each check is OK, DIFFERENT, or UNKNOWN when the evidence is not there yet (no TF threads).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from hwtune.models.cpulist import CpuListError, format_cpulist, parse_cpulist
from hwtune.models.digits import is_ascii_digits

Status = Literal["OK", "DIFFERENT", "UNKNOWN"]
INTER_OP_THREAD = "tf_Compute"  # comm is cut to 15 characters (TASK_COMM_LEN 16)


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


@dataclass(frozen=True)
class Observation:
    pid: int
    environ: dict[str, str]
    cpus: tuple[int, ...] | None
    threads: Counter[str] = field(default_factory=Counter)
    comm: str = ""
    numa_policy: str | None = None

    @property
    def tf_started(self) -> bool:
        return any(name.startswith("tf_") for name in self.threads)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def parse_environ(data: bytes) -> dict[str, str]:
    """NUL-separated NAME=VALUE records; bytes that are not UTF-8 are kept (surrogateescape)."""
    env: dict[str, str] = {}
    for record in data.split(b"\0"):
        name, sep, value = record.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def parse_status_affinity(text: str) -> tuple[int, ...] | None:
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            try:
                return parse_cpulist(line.split(":", 1)[1])
            except CpuListError:
                return None
    return None


def parse_numa_policy(text: str) -> str | None:
    """The policy of the first mapping in numa_maps ("default", "bind:0", "prefer:1"…)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            return fields[1]
    return None


def observe(pid: int) -> Observation | None:
    """Read what /proc shows about `pid`; None when it is gone."""
    base = f"/proc/{pid}"
    status = _read(f"{base}/status")
    environ = _read(f"{base}/environ")
    if status is None or environ is None:
        return None
    threads: Counter[str] = Counter()
    try:
        tids = os.listdir(f"{base}/task")
    except OSError:
        tids = []
    for tid in tids:
        comm = _read(f"{base}/task/{tid}/comm")
        if comm is not None:
            threads[comm.decode("utf-8", "replace").strip()] += 1
    comm_bytes = _read(f"{base}/comm") or b""
    numa = _read(f"{base}/numa_maps")
    return Observation(
        pid=pid,
        environ=parse_environ(environ),
        cpus=parse_status_affinity(status.decode("utf-8", "replace")),
        threads=threads,
        comm=comm_bytes.decode("utf-8", "replace").strip(),
        numa_policy=parse_numa_policy(numa.decode("utf-8", "replace")) if numa else None,
    )


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, parents first (from /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not is_ascii_digits(name):
            continue
        stat = _read(f"/proc/{name}/stat")
        if stat is None:
            continue
        # The 2nd field (comm) is parenthesised and may contain spaces: split after the last ')'.
        after = stat[stat.rfind(b")") + 2 :].split()
        if len(after) >= 2:
            parents.setdefault(int(after[1]), []).append(int(name))
    order, queue = [], [pid]
    while queue:
        current = queue.pop(0)
        order.append(current)
        queue.extend(sorted(parents.get(current, [])))
    return order


def observe_tree(pid: int) -> Observation | None:
    """The process under `pid` (itself included) that runs TensorFlow, else the deepest one."""
    seen = [o for o in (observe(p) for p in descendants(pid)) if o is not None]
    if not seen:
        return None
    with_tf = [o for o in seen if o.tf_started]
    if with_tf:
        return max(with_tf, key=lambda o: o.threads[INTER_OP_THREAD])
    return seen[-1]


def compare(expected: Expectation, seen: Observation) -> list[Check]:
    checks: list[Check] = []
    for name in sorted(expected.env):
        want, have = expected.env[name], seen.environ.get(name)
        checks.append(
            Check(
                f"env {name}",
                want,
                "(unset)" if have is None else have,
                "OK" if have == want else "DIFFERENT",
            )
        )
    if expected.cpus:
        have_cpus = "(unreadable)" if seen.cpus is None else format_cpulist(seen.cpus)
        status: Status = (
            "UNKNOWN"
            if seen.cpus is None
            else ("OK" if set(seen.cpus) == set(expected.cpus) else "DIFFERENT")
        )
        checks.append(Check("CPU affinity", format_cpulist(expected.cpus), have_cpus, status))
    if expected.inter_op is not None:
        count = seen.threads[INTER_OP_THREAD]
        checks.append(
            Check(
                "inter-op pool (tf_Compute threads)",
                str(expected.inter_op),
                str(count),
                "UNKNOWN"
                if not seen.tf_started
                else ("OK" if count == expected.inter_op else "DIFFERENT"),
                "" if seen.tf_started else "TensorFlow's runtime has not started in this process",
            )
        )
    if expected.intra_op is not None:
        # Unnamed threads besides the main thread: the intra-op pool plus BLAS/Python threads.
        unnamed = max(0, seen.threads[seen.comm] - 1)
        checks.append(
            Check(
                "intra-op pool (unnamed threads)",
                f">= {expected.intra_op}",
                str(unnamed),
                "UNKNOWN"
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
                "UNKNOWN" if seen.numa_policy is None else ("OK" if have == want else "DIFFERENT"),
            )
        )
    return checks


def render_table(checks: list[Check]) -> str:
    header = ("SETTING", "EXPECTED", "ACTUAL", "RESULT")
    rows = [header] + [(c.setting, _cell(c.expected), _cell(c.actual), c.status) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    notes = sorted({f"note: {c.setting}: {c.note}" for c in checks if c.note})
    return "\n".join(lines + notes) + "\n"


def _cell(text: str) -> str:
    flat = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return flat if len(flat) <= 48 else flat[:45] + "..."
