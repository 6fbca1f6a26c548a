"""This process's local rank and the number of ranks on this node, from the launcher's env.

Schedulers and MPI launchers start one process per rank; each should get its own slice of
the node (`Intent.instance` of `Intent.instances`) instead of every rank assuming it owns all
cores (the oversubscription pytorch/pytorch#123711 fixed with LOCAL_RANK/LOCAL_WORLD_SIZE).

Sources, innermost launcher first (a launcher started inside another sets its own, more
specific variables, e.g. torchrun under srun, or mpirun inside a Slurm allocation):

- `HWTUNE_INSTANCE` / `HWTUNE_INSTANCES`: set by `hwtune exec --instances N` for its children.
- `LOCAL_RANK` / `LOCAL_WORLD_SIZE`: torchrun and torch.distributed.elastic, Accelerate.
- `LOCAL_RANK` / `LOCAL_SIZE`: the DeepSpeed launcher, which sets no LOCAL_WORLD_SIZE
  (deepspeed/launcher/launch.py: `LOCAL_SIZE` is `num_local_procs`, its processes on this node).
- `HOROVOD_LOCAL_RANK` / `HOROVOD_LOCAL_SIZE`: horovodrun's Gloo launcher, which sets no MPI
  variables (horovod/runner/gloo_run.py, `create_slot_env_vars`).
- `OMPI_COMM_WORLD_LOCAL_RANK` / `OMPI_COMM_WORLD_LOCAL_SIZE`: Open MPI (mpirun/prterun).
- `MV2_COMM_WORLD_LOCAL_RANK` / `MV2_COMM_WORLD_LOCAL_SIZE`: MVAPICH2.
- `MPI_LOCALRANKID` / `MPI_LOCALNRANKS`: MPICH Hydra and Intel MPI.
- `PALS_LOCAL_RANKID` / `PALS_LOCAL_SIZE`, `PMI_LOCAL_RANK` / `PMI_LOCAL_SIZE`: HPE/Cray PALS
  (mpiexec on PBS) and Cray PMI.
- `SLURM_LOCALID` with, for the count, `SLURM_STEP_TASKS_PER_NODE`, `SLURM_NTASKS_PER_NODE` or
  `SLURM_TASKS_PER_NODE`; the last two are per-node lists such as "2(x3),1" (sbatch(1),
  OUTPUT ENVIRONMENT VARIABLES) indexed by `SLURM_NODEID`. Only in a task of an srun step:
  the batch script (sbatch's one process on the first node) also has SLURM_LOCALID=0 and the
  job's SLURM_NTASKS_PER_NODE/SLURM_TASKS_PER_NODE, which describe the tasks its srun steps
  will start, not it (sbatch(1): SLURM_NTASKS_PER_NODE is "Number of tasks requested per
  node", the --ntasks-per-node request). srun sets SLURM_STEP_ID and SLURM_STEP_TASKS_PER_NODE
  for every step's tasks (srun(1), OUTPUT ENVIRONMENT VARIABLES; src/common/env.c,
  env_array_for_step), and the batch step has neither, or a special step id (`_SPECIAL_STEP`).

A rank variable counts only with a count of the same launcher. One set alone (LOCAL_RANK from
a custom script or an older `torch.distributed.launch --use_env`, which sets no
LOCAL_WORLD_SIZE; torchrun documents both, pytorch.org/docs/stable/elastic/run.html,
"Environment Variables") says this process is one of an unknown number started inside
whatever launcher encloses it. An enclosing launcher's count is never paired with it: the
process plans that launcher's whole slice for its own rank (e.g. SLURM_LOCALID of the step's
tasks: the share it splits with its siblings), or, with none, the process's whole allowance;
`LocalRank.uncounted` and `uncounted_rank` name the variable so that the plan says so.

Standard library only: `hwtune.configure()` resolves ranks on its fast path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from hwtune.errors import ConfigError
from hwtune.models.digits import is_ascii_digits
from hwtune.models.words import plural

# (rank variable, size variables tried in order, launcher name)
_SOURCES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("HWTUNE_INSTANCE", ("HWTUNE_INSTANCES",), "hwtune exec"),
    ("LOCAL_RANK", ("LOCAL_WORLD_SIZE",), "torchrun"),
    ("LOCAL_RANK", ("LOCAL_SIZE",), "DeepSpeed"),
    ("HOROVOD_LOCAL_RANK", ("HOROVOD_LOCAL_SIZE",), "Horovod"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", ("OMPI_COMM_WORLD_LOCAL_SIZE",), "Open MPI"),
    ("MV2_COMM_WORLD_LOCAL_RANK", ("MV2_COMM_WORLD_LOCAL_SIZE",), "MVAPICH2"),
    ("MPI_LOCALRANKID", ("MPI_LOCALNRANKS",), "MPICH/Intel MPI"),
    ("PALS_LOCAL_RANKID", ("PALS_LOCAL_SIZE",), "PALS"),
    ("PMI_LOCAL_RANK", ("PMI_LOCAL_SIZE",), "PMI"),
    (
        "SLURM_LOCALID",
        ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        "Slurm",
    ),
)
_SLURM_LISTS = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}
# Step ids above SLURM_MAX_NORMAL_STEP_ID (0xfffffff0, slurm/slurm.h) name the special steps:
# batch 0xfffffffb, extern 0xfffffffc, interactive 0xfffffffa (Slurm 20.11+); before 20.11
# batch was 0xfffffffe (4294967294) and extern 0xffffffff. Names as scontrol and sacct print.
_MAX_NORMAL_STEP = 0xFFFFFFF0
_SPECIAL_STEP_NAMES = {"batch", "extern", "interactive"}
SLURM_BATCH_NOTE = (
    "a Slurm process outside any srun step (the batch script, the extern step): "
    "SLURM_LOCALID and the job's tasks per node describe the tasks srun will start, not it"
)
# The sanity bound on a rank count; no node runs more ranks than it has CPUs, and the largest
# NR_CPUS the kernel supports is 8192 (arch/x86/Kconfig MAXSMP).
MAX_RANKS = 8192
# A bound on a Slurm node list, far above any machine (the largest systems have ~10^4 nodes).
MAX_NODES = 1 << 20
_MAX_DIGITS = 9


class LocalRank(NamedTuple):
    rank: int  # 0-based rank among the processes of this job on this node
    size: int  # how many there are on this node
    launcher: str
    variables: tuple[str, str]  # the two variables it came from, for messages
    # An inner launcher's rank variable set without its count (LOCAL_RANK, no LOCAL_WORLD_SIZE)
    uncounted: str | None = None

    def describe(self) -> str:
        return (
            f"local rank {self.rank} of {self.size} ({self.launcher}: "
            f"{self.variables[0]}, {self.variables[1]})"
        )


def expand_slurm_tasks(text: str) -> list[int]:
    """Expand Slurm's per-node task list: "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in text.strip().split(","):
        count, sep, repeat = item.strip().partition("(x")
        if sep:
            if not repeat.endswith(")"):
                raise ValueError(f"{item!r} is not COUNT or COUNT(xREPEAT)")
            repeat = repeat[:-1]
        if not is_ascii_digits(count) or (sep and not is_ascii_digits(repeat)):
            raise ValueError(f"{item!r} is not COUNT or COUNT(xREPEAT)")
        if len(count) > _MAX_DIGITS or len(repeat) > _MAX_DIGITS:
            raise ValueError(f"{item!r} has an implausibly large number")
        times = int(repeat or 1)
        if len(counts) + times > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} nodes")
        counts.extend([int(count)] * times)
    return counts


def _int(environ: Mapping[str, str], name: str) -> int:
    text = environ[name].strip()
    # A length bound before int(): Python refuses strings over 4300 digits with ValueError
    # (sys.get_int_max_str_digits), and no rank count needs more than a few digits.
    if not is_ascii_digits(text) or len(text) > _MAX_DIGITS:
        raise ConfigError(
            f"{name}={environ[name]!r} is not a non-negative integer",
            hint="the launcher set it; check how the job was started",
        )
    return int(text)


def _size(environ: Mapping[str, str], name: str) -> int:
    if name not in _SLURM_LISTS:
        return _int(environ, name)
    try:
        counts = expand_slurm_tasks(environ[name])
    except ValueError as err:
        raise ConfigError(f"{name}={environ[name]!r} is malformed: {err}") from err
    node = _int(environ, "SLURM_NODEID") if "SLURM_NODEID" in environ else 0
    if node >= len(counts):
        raise ConfigError(
            f"SLURM_NODEID={node} is beyond the {plural(len(counts), 'node')} of {name}"
        )
    return counts[node]


def local_rank(environ: Mapping[str, str]) -> LocalRank | None:
    """The local rank and ranks-per-node, or None outside any known launcher.

    A source counts only when both its rank and a size variable are set; an inner rank
    variable without its count is named in `uncounted` (see the module's docstring). Raises
    ConfigError when the variables are malformed or contradict each other (rank >= size).
    """
    skipped: list[str] = []
    for rank_var, size_vars, launcher in _SOURCES:
        if rank_var not in environ or (launcher == "Slurm" and slurm_batch(environ)):
            continue
        size_var = next((v for v in size_vars if environ.get(v, "").strip()), None)
        if size_var is None:
            skipped.append(rank_var)
            continue
        rank, size = _int(environ, rank_var), _size(environ, size_var)
        if size < 1 or size > MAX_RANKS:
            raise ConfigError(f"{size_var}={environ[size_var]!r} is not a usable rank count")
        if rank >= size:
            raise ConfigError(
                f"{rank_var}={rank} is not below {size_var}={size}",
                hint="the launcher's rank variables contradict each other",
            )
        inner = next((v for v in skipped if v != rank_var and _is_rank(environ, v)), None)
        return LocalRank(rank, size, launcher, (rank_var, size_var), inner)
    return None


def uncounted_rank(environ: Mapping[str, str]) -> str | None:
    """The innermost rank variable set without its launcher's count, when no launcher gave a
    complete pair (`local_rank` is None): this process is one of an unknown number."""
    for rank_var, _, launcher in _SOURCES:
        if launcher == "Slurm" and slurm_batch(environ):
            continue
        if rank_var in environ and _is_rank(environ, rank_var):
            return rank_var
    return None


def slurm_batch(environ: Mapping[str, str]) -> str | None:
    """How the environment shows a Slurm process that is no srun step's task (the batch
    script, the extern step), whose SLURM_LOCALID and the job's task counts are not its own;
    None for a step's task or outside Slurm."""
    if "SLURM_LOCALID" not in environ:
        return None
    for name in ("SLURM_STEP_ID", "SLURM_STEPID"):  # SLURM_STEPID: the older spelling
        step = environ.get(name, "").strip()
        if not step:
            continue
        if step.lower() in _SPECIAL_STEP_NAMES or (
            is_ascii_digits(step) and len(step) <= _MAX_DIGITS + 1 and int(step) > _MAX_NORMAL_STEP
        ):
            return f"{name}={step}"
        return None
    if environ.get("SLURM_STEP_TASKS_PER_NODE", "").strip():
        return None
    return "no SLURM_STEP_ID"


def uncounted_note(environ: Mapping[str, str], name: str, planned: str) -> str:
    """Says that `name` came without its count and what was planned instead."""
    counts = " or ".join(v for r, sizes, _ in _SOURCES if r == name for v in sizes)
    return (
        f"{name}={environ[name].strip()} is set without {counts}, so how many processes share "
        f"this node at its level is unknown; {planned} (set {counts} where the launcher "
        "starts them, or pass --instances N)"
    )


def _is_rank(environ: Mapping[str, str], name: str) -> bool:
    # Not a rank: LOCAL_RANK=-1 is how some training scripts say "not distributed".
    text = environ[name].strip()
    return is_ascii_digits(text) and len(text) <= _MAX_DIGITS


def already_pinned(affinity: tuple[int, ...], allowed: tuple[int, ...]) -> bool:
    """True when the launcher bound this rank to part of what the job may use.

    `allowed` is the job's CPU set (cgroup cpuset, else online CPUs). When a rank's affinity is
    a strict subset (srun --cpu-bind, mpirun --bind-to core), its slice is already cut: hwtune
    then plans one instance on that affinity instead of cutting it again.
    """
    return bool(affinity) and set(affinity) < set(allowed)
