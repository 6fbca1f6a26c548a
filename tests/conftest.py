"""Shared test fixtures: paths to captured machines, and the CLI runner."""

from __future__ import annotations

import functools
import io
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from hwtune.cli import Environment, main

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
# Captures that SOURCES.md says must stay in ../shared (not copied into the project).
SHARED_HW = REPO.parent / "shared" / "fixtures" / "hw"


@functools.cache
def usable_cores() -> tuple[int, str]:
    """(physical cores, CPU list) this process may use, counted as hwtune's planner counts them
    (planner.instances: online ∩ affinity ∩ cpuset, SMT siblings as one core): `--instances N`
    is refused with more instances than that. os.sched_getaffinity counts logical CPUs, so a
    2-vCPU VM presenting 1 core × 2 threads passes a "two CPUs" check and still has one core."""
    from hwtune.models.cpulist import format_cpulist
    from hwtune.planner.instances import physical_cores, usable_cpus
    from hwtune.probes import detect

    hw = detect("/", gpus=False, tensorflow=False)
    cpus = usable_cpus(hw)
    return len(physical_cores(hw, cpus)), format_cpulist(cpus)


def physical_core_count() -> int:
    return usable_cores()[0]


TWO_INSTANCES = "hwtune refuses `--instances 2` with fewer ('2 instances need 2 physical cores')"


def two_cores_missing(why: str = TWO_INSTANCES) -> str | None:
    """Why a test that needs two physical cores (`why`) cannot run here, or None when it can."""
    cores, cpus = usable_cores()
    if cores >= 2:
        return None
    return (
        f"needs 2 usable physical cores: {why}; this process can use {cores} (CPUs {cpus}; SMT "
        "siblings share a core)"
    )


# Marks a test (or one parameter set: pytest.param(..., marks=needs_two_cores)) that runs two
# instances; it skips, saying why, where hwtune would refuse them. Another need for two cores
# gives its own reason: @needs_two_cores(why="..."). Checked when the test is set up, so a run
# that selects none of them never detects the machine.
needs_two_cores = pytest.mark.needs_two_cores


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_two_cores: skips unless 2 physical cores are usable (--instances 2)"
    )
    # Tests send SIGINT to the processes they start and expect Python's Ctrl-C handling. A
    # shell without job control starts a background job (`cmd &`, nohup) with SIGINT ignored,
    # and an ignored signal stays ignored across fork and exec, so every child would ignore it
    # too (exiting 0, not 130). The run restores the default, which its children then get.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("needs_two_cores")
    if marker is not None:
        reason = two_cores_missing(marker.kwargs.get("why", TWO_INSTANCES))
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test starts from the environment the run started with: one that calls
    configure() in this process sets TF_* variables, which every later test's subprocesses
    would inherit (test_exec then saw TF_NUM_INTEROP_THREADS=1 as the caller's own)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class CliResult:
    exit_status: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str], environ: dict[str, str] | None = None) -> CliResult:
    """Call `hwtune.cli.main` in-process with captured streams."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out, stderr=err, environ=dict(os.environ if environ is None else environ)
    )
    status = main(list(argv), env)
    return CliResult(status, out.getvalue(), err.getvalue())


# Variables a caller's shell may hold that would change a plan: hwtune's own and the
# launchers' rank variables (hwtune/pipeline/ranks.py reads them).
_CALLER_PREFIXES = (
    "HWTUNE_",
    "XDG_",
    "SLURM_",
    "OMPI_",
    "MV2_",
    "PMI_",
    "PALS_",
    "MPI_",
    "HOROVOD_",
    "LOCAL_",
)


def isolated_environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without the caller's hwtune, XDG or launcher variables,
    with private XDG config and cache directories and tuned-results directory under
    `tmp_path`, TensorFlow's C++ logging quiet, then `extra`."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(_CALLER_PREFIXES)}
    environ.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        HWTUNE_TUNED_DIR=str(tmp_path / "tuned"),
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    environ.update(extra)
    return environ


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    return run_cli


@pytest.fixture
def shared_hw() -> Path:
    """The read-only captures in ../shared/fixtures/hw; skips when the folder is absent."""
    if not SHARED_HW.is_dir():
        pytest.skip(
            "the maintainers' shared captures (shared/fixtures/hw beside the repository) are "
            "not present; they are not copied into tests/"
        )
    return SHARED_HW
