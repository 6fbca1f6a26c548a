"""`hwtune verify --pid` of a job under limits the verifier does not share (taskset, a cgroup
CPU quota): real processes, real affinity, a real cgroup v1."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.apply_profiles import PYTHON

HWTUNE = [PYTHON, "-m", "hwtune"]
CPU_V1 = Path("/sys/fs/cgroup/cpu")
JOB = (
    "import hwtune, time; hwtune.configure(tensorflow=False); print('up', flush=True); "
    "time.sleep(60)"
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_", "TF_", "KMP_", "OMP_"))
    }
    env.pop("LOCAL_RANK", None)
    (tmp_path / "run").mkdir(exist_ok=True)
    env.update(
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    return env


def _cgroup_v1_writable() -> bool:
    return os.geteuid() == 0 and os.access(CPU_V1 / "cgroup.procs", os.W_OK)


needs_two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs in this process's affinity"
)


@needs_two_cpus
@pytest.mark.parametrize("limit", ["taskset", "quota"])
def test_verify_pid_judges_a_job_by_its_own_affinity_and_quota(tmp_path: Path, limit: str) -> None:
    """The job's configure() planned for CPU 0 (taskset -c 0) or half a CPU (cpu.cfs_quota_us
    50000 of 100000); before, verify planned from its own /proc/self (every CPU, no quota)
    and judged the job's thread variables and affinity DIFFERENT (exit 5)."""
    env = _env(tmp_path)
    group: Path | None = None
    if limit == "taskset":
        if shutil.which("taskset") is None:
            pytest.skip("needs taskset (util-linux)")
        command = ["taskset", "-c", "0", PYTHON, "-c", JOB]
    else:
        if not _cgroup_v1_writable():
            pytest.skip("needs root and a writable cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
        group = CPU_V1 / f"hwtune-test-{os.getpid()}"
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("50000")
        # The shell joins the cgroup, then becomes the job: no moment outside it to plan in.
        command = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh"]
        command += [PYTHON, "-c", JOB]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert job.stdout is not None
        assert job.stdout.readline() == "up\n"
        result = subprocess.run(
            [*HWTUNE, "verify", "--pid", str(job.pid)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "hwtune.configure() ran inside" in result.stdout
        rows = {
            line.split()[1]: line.split()[-1]
            for line in result.stdout.splitlines()
            if line.startswith("env TF_NUM_")
        }
        assert rows == {"TF_NUM_INTEROP_THREADS": "OK", "TF_NUM_INTRAOP_THREADS": "OK"}, (
            result.stdout
        )
        affinity = next(line for line in result.stdout.splitlines() if line.startswith("CPU"))
        assert affinity.split()[-1] == "OK", result.stdout
        if limit == "taskset":
            assert affinity.split()[2:4] == ["0", "0"], result.stdout
    finally:
        job.kill()
        job.wait()
        assert job.stdout is not None
        job.stdout.close()
        if group is not None:
            deadline = time.monotonic() + 10
            while True:
                try:
                    group.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)


def _remove(group: Path) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_verify_says_when_the_jobs_quota_cannot_be_read(tmp_path: Path) -> None:
    """A verifier in a cgroup namespace of its own (unshare -C) sees the job's cgroup as
    /../job, outside its namespace: the quota cannot be read, and verify said nothing of it
    while planning as if there were none (the issue also named proc/self/cgroup)."""
    if not _cgroup_v1_writable() or shutil.which("unshare") is None:
        pytest.skip("needs root, unshare(1) and a writable cgroup v1 cpu hierarchy")
    env = _env(tmp_path)
    job_group = CPU_V1 / f"hwtune-test-job-{os.getpid()}"
    own_group = CPU_V1 / f"hwtune-test-verifier-{os.getpid()}"
    job_group.mkdir()
    own_group.mkdir()
    (job_group / "cpu.cfs_quota_us").write_text("50000")
    job = subprocess.Popen(
        ["sh", "-c", f'echo $$ > {job_group}/cgroup.procs && exec "$@"', "sh", "sleep", "60"],
        env=env,
    )
    try:
        time.sleep(0.3)  # the shell has joined (and become sleep) by now
        verifier = " ".join([*HWTUNE, "verify", "--pid", str(job.pid)])
        result = subprocess.run(
            ["sh", "-c", f"echo $$ > {own_group}/cgroup.procs && exec unshare -C {verifier}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if "unshare failed" in result.stderr:
            pytest.skip(f"no cgroup namespace here: {result.stderr[-200:]}")
        note = next(
            (line for line in result.stderr.splitlines() if "hwtune verify: note:" in line), ""
        )
        assert "outside hwtune's own cgroup namespace" in note, result.stderr
        assert f"[proc/{job.pid}/cgroup]" in note, result.stderr
    finally:
        job.kill()
        job.wait()
        for group in (job_group, own_group):
            _remove(group)


@needs_two_cpus
def test_verify_command_judges_a_job_by_the_affinity_it_ran_with(tmp_path: Path) -> None:
    """`verify -- taskset -c 0 CMD`: the job's configure() planned for CPU 0. verify planned
    only after CMD had ended, when /proc no longer had the job's affinity, so it planned for
    every CPU and judged the job's affinity (and thread variables) DIFFERENT (exit 5)."""
    if shutil.which("taskset") is None:
        pytest.skip("needs taskset (util-linux)")
    env = _env(tmp_path)
    job = "import hwtune, time; hwtune.configure(tensorflow=False); time.sleep(1.5)"
    result = subprocess.run(
        [*HWTUNE, "verify", "--", "taskset", "-c", "0", PYTHON, "-c", job],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "file missing" not in result.stderr, result.stderr
    affinity = next(line for line in result.stdout.splitlines() if line.startswith("CPU"))
    assert affinity.split()[2:] == ["0", "0", "OK"], result.stdout
