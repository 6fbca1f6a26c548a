"""The daemon on this machine's own root, following a real cgroup v1 CPU quota.

The daemon is moved into a fresh `cpu` cgroup and given a CFS quota of one CPU: no inotify
event comes from cgroupfs, so this is the polling path against the real kernel files. Needs
root and a writable cgroup v1 `cpu` hierarchy; skips otherwise, saying which is missing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_harness import DaemonProcess, env_value, wait_for

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
INTRA = "TF_NUM_INTRAOP_THREADS"


@pytest.fixture
def cgroup() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a cgroup")
    if not (CPU_CGROUP / "cpu.cfs_quota_us").is_file():
        pytest.skip(f"no cgroup v1 cpu hierarchy at {CPU_CGROUP}")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs at least 2 usable CPUs for a 1-CPU quota to show")
    path = CPU_CGROUP / f"hwtune-test-{uuid.uuid4().hex[:12]}"
    try:
        path.mkdir()
    except OSError as err:
        pytest.skip(f"cannot create a cgroup under {CPU_CGROUP}: {err}")
    try:
        yield path
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            (CPU_CGROUP / "cgroup.procs").write_text(pid)
        path.rmdir()


@pytest.mark.root
def test_live_daemon_follows_its_cgroup_quota(tmp_path: Path, cgroup: Path) -> None:
    d = DaemonProcess(tmp_path, Path("/"), tmp_path / "out")
    try:
        d.start()
        d.wait_ready()
        before = env_value(d.output, INTRA)
        assert before is not None and int(before) >= 2, before
        (cgroup / "cgroup.procs").write_text(str(d.pid))
        (cgroup / "cpu.cfs_quota_us").write_text("100000")  # one CPU per 100 ms period
        wait_for(lambda: env_value(d.output, INTRA) == "1", f"{INTRA}=1; log:\n{d.log()}")
        d.wait_message(lambda m: "cpu quota none→1.0" in m.get("STATUS", ""))
        (CPU_CGROUP / "cgroup.procs").write_text(str(d.pid))  # back to the root cgroup
        wait_for(lambda: env_value(d.output, INTRA) == before, f"{INTRA}={before}")
        assert d.stop() == 0
    finally:
        d.close()
