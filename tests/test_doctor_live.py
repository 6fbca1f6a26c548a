"""`hwtune doctor` on real TensorFlow jobs in subprocesses: each verdict, on this machine.

The jobs are tests/doctor_jobs/*.py. Each runs under `python -m hwtune doctor --json` with
a short window; HWTUNE_DOCTOR_REPEATS=N runs each verdict N times (the verdicts are meant to
hold run after run on a loaded 2-vCPU machine, so they rest on ratios, not absolute speed).
The throttling job runs inside a real cgroup with a 0.5-CPU CFS quota (v1 cpu controller,
or v2 cpu.max), which needs root and a writable cgroup file system.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parent / "doctor_jobs"
REPEATS = range(int(os.environ.get("HWTUNE_DOCTOR_REPEATS", "1")))
WINDOW = ["--seconds", "6", "--warmup", "3"]

pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install '.[tf]')")
pytestmark = pytest.mark.tf


def doctor(*argv: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "hwtune", "doctor", "--json", *WINDOW, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hwtune doctor: sampling pid" in done.stderr  # the progress line
    result: dict[str, object] = json.loads(done.stdout)
    return result


def job(name: str) -> list[str]:
    return [sys.executable, str(JOBS / f"{name}.py"), "120"]


@pytest.mark.parametrize("attempt", REPEATS)
def test_input_bound_job(attempt: int) -> None:
    result = doctor("--", *job("input_bound"))
    assert result["bottleneck"] == "input", result["findings"]
    assert result["findings"][0]["id"] == "input-bound"  # type: ignore[index]


@pytest.mark.parametrize("attempt", REPEATS)
def test_compute_bound_job(attempt: int) -> None:
    result = doctor("--", *job("compute_bound"))
    assert result["bottleneck"] == "compute", result["findings"]
    ids = [f["id"] for f in result["findings"]]  # type: ignore[attr-defined]
    # The doctor started it, so TF's own output says whether oneDNN ran the dense layers.
    assert "onednn-in-use" in ids or "onednn-not-used" in ids
    assert "xla-not-used" in ids  # Keras 3 leaves XLA off on a CPU unless asked


def _cpu_cgroup() -> tuple[Path, str, str] | None:
    """(a new cgroup directory, its quota file, what to write) under v1 cpu or v2; else None."""
    name = f"hwtune-doctor-test-{uuid.uuid4().hex[:8]}"
    v1 = Path("/sys/fs/cgroup/cpu")
    v2 = Path("/sys/fs/cgroup")
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1 / name, "cpu.cfs_quota_us", "50000"
    controllers = v2 / "cgroup.subtree_control"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return v2 / name, "cpu.max", "50000 100000"
    return None


@pytest.mark.root
@pytest.mark.parametrize("attempt", REPEATS)
def test_throttled_job_in_a_half_cpu_quota(attempt: int) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup with a CPU quota needs root")
    found = _cpu_cgroup()
    if found is None:
        pytest.skip("no cgroup v1 cpu controller and no v2 cpu controller in subtree_control")
    group, quota_file, quota = found
    try:
        group.mkdir()
        if quota_file == "cpu.cfs_quota_us":
            (group / "cpu.cfs_period_us").write_text("100000")
        (group / quota_file).write_text(quota)
    except OSError as err:
        pytest.skip(f"the cgroup file system is not writable here: {err}")
    try:
        env = dict(os.environ, TF_NUM_INTRAOP_THREADS="2")
        enter = f'echo $$ > "{group}/cgroup.procs" && exec "$@"'
        result = doctor("--", "sh", "-c", enter, "sh", *job("compute_bound"), env=env)
    finally:
        for _ in range(50):  # the stopped job leaves the group a moment after it exits
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert result["bottleneck"] == "throttling", result["findings"]
    # Throttled in the CFS counters, or (when other load keeps the job below its quota, so
    # the kernel seldom has to throttle it) wanting ≥ 2× the quota.
    assert result["findings"][0]["id"] in ("throttled", "oversubscribed")  # type: ignore[index]
    assert result["samples"]["budget"]["quota"] == 0.5  # type: ignore[index]
    assert result["metrics"]["capacity"] == 0.5  # type: ignore[index]


def test_watching_a_running_job_by_pid() -> None:
    process = subprocess.Popen(
        job("python_bound"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            names = {
                p.read_text().strip() for p in Path(f"/proc/{process.pid}/task").glob("*/comm")
            }
            if any(n.startswith("tf_") for n in names):
                break
            time.sleep(0.2)
        time.sleep(2)  # past the first trace
        result = doctor("--pid", str(process.pid))
        assert process.poll() is None, "--pid must leave the job running"
    finally:
        process.kill()
        process.wait()
    assert result["pid"] == process.pid
    assert result["bottleneck"] == "python", result["findings"]
    ids = [f["id"] for f in result["findings"]]  # type: ignore[attr-defined]
    assert not any(i.startswith(("onednn", "xla")) for i in ids)  # no output to read


def test_a_job_under_hwtune_exec_got_its_settings() -> None:
    # exec plans, then starts the job: its TF start-up reaches further into the window than a
    # job the doctor starts itself, so a longer warm-up (argparse: the last --warmup wins). On a
    # busy 2-core VM the 3 s one once sampled the model still building, and said "unknown".
    argv = ["--warmup", "8", "--", sys.executable, "-m", "hwtune", "exec", "--"]
    result = doctor(*argv, *job("compute_bound"))
    ids = [f["id"] for f in result["findings"]]  # type: ignore[attr-defined]
    assert "settings-not-applied" not in ids, result["findings"]
    assert result["bottleneck"] == "compute", result["findings"]


def test_sigterm_to_the_doctor_stops_the_job() -> None:
    argv = [sys.executable, "-m", "hwtune", "doctor", "--seconds", "120", "--warmup", "0"]
    doctor_process = subprocess.Popen(
        [*argv, "--", *job("python_bound")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert doctor_process.stderr is not None
    pid = None
    try:
        for line in doctor_process.stderr:
            if line.startswith("hwtune doctor: sampling pid"):
                pid = int(line.split()[4])
                break
        assert pid is not None and Path(f"/proc/{pid}").exists()
        doctor_process.terminate()
        assert doctor_process.wait(30) == 128 + 15
        deadline = time.monotonic() + 15
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), "the job outlived the doctor"
    finally:
        doctor_process.kill()
        doctor_process.wait()


def test_step_times_where_the_job_calls_configure() -> None:
    result = doctor("--", *job("compute_configured"))
    metrics = result["metrics"]
    assert metrics["steps"] >= 3, metrics  # type: ignore[index]
    assert 0 < metrics["step_median_s"] < 6  # type: ignore[index]
    steps = result["samples"]["steps"]  # type: ignore[index]
    assert steps == sorted(steps) and steps[0] >= 0 and steps[-1] <= metrics["window_s"]  # type: ignore[index]
    assert "training steps, median" in result["findings"][0]["evidence"]  # type: ignore[index]
