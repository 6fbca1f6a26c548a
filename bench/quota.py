"""A real cgroup with a CFS CPU quota, for scenario S3 ("a container with --cpus=1").

cgroup v1: /sys/fs/cgroup/cpu/hwtune-bench-<pid>/ with cpu.cfs_period_us = 100000 and
cpu.cfs_quota_us = quota × period (kernel Documentation/scheduler/sched-bwc.rst, what
`docker run --cpus` writes); cgroup v2: /sys/fs/cgroup/hwtune-bench-<pid>/cpu.max =
"<quota> <period>". Processes join it by writing their pid to its cgroup.procs between fork
and exec, so everything they start (TensorFlow's threads, a tuner's trials) stays inside.
Needs root; otherwise `QuotaUnavailable` says why and the scenario is skipped with that reason.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kernel's default CFS period, and docker's


class QuotaUnavailable(Exception):
    pass


def _v1_dir() -> Path | None:
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (CGROUP_ROOT / name / "cpu.cfs_quota_us").exists():
            return CGROUP_ROOT / name
    return None


def _v2_ready() -> bool:
    controllers = CGROUP_ROOT / "cgroup.subtree_control"
    try:
        return "cpu" in controllers.read_text().split()
    except OSError:
        return False


@contextmanager
def cpu_quota(cpus: float, name: str | None = None) -> Iterator[Path]:
    """Make the cgroup; yield its cgroup.procs; remove it once its processes are gone."""
    if os.geteuid() != 0:
        raise QuotaUnavailable("not root: creating a cgroup needs root")
    name = name or f"hwtune-bench-{os.getpid()}"
    quota = int(cpus * PERIOD_US)
    v1 = _v1_dir()
    try:
        if v1 is not None:
            directory = v1 / name
            directory.mkdir(exist_ok=True)
            (directory / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (directory / "cpu.cfs_quota_us").write_text(str(quota))
        elif _v2_ready():
            directory = CGROUP_ROOT / name
            directory.mkdir(exist_ok=True)
            (directory / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            raise QuotaUnavailable(
                "no cgroup v1 cpu hierarchy and no cpu controller in the v2 root"
            )
    except OSError as err:
        raise QuotaUnavailable(f"cannot set up a cgroup: {err}") from err
    try:
        yield directory / "cgroup.procs"
    finally:
        _remove(directory)


def _remove(directory: Path, wait_s: float = 30.0) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if not (directory / "cgroup.procs").read_text().split():
                directory.rmdir()
                return
        except OSError:
            return
        time.sleep(0.2)


def joiner(procs: Path | None, cpus: Sequence[int] = ()) -> Callable[[], None] | None:
    """A preexec_fn that moves the child into the cgroup (and pins it), or None."""
    if procs is None and not cpus:
        return None

    def join() -> None:
        if procs is not None:
            with open(procs, "w", encoding="ascii") as handle:
                handle.write(str(os.getpid()))
        if cpus:
            os.sched_setaffinity(0, cpus)

    return join
