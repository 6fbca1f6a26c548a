"""Issue 15 item 5: `--root` stays inside the root. A hostile snapshot (links out of it, FIFOs,
devices, endless or huge files) is read without following, hanging or swallowing memory, and
no content of a refused or unparseable file is printed beyond a short escaped excerpt."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.daemon_harness import build_host

SECRET = "root:SECRET-HASH-1234:19000:0:99999:7:::\n"
# The detect subprocess runs under this address-space limit: far more than a bounded detect
# needs, far less than reading a 1 GiB file (2.1 GB RSS in the issue).
ADDRESS_SPACE = 1 << 30
TIMEOUT_S = 120


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def detect(root: Path) -> tuple[dict[str, object], str]:
    """`hwtune detect --root ROOT --json` in a subprocess: (the model, stdout + stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "hwtune", "detect", "--root", str(root), "--json"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        preexec_fn=_limit,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr[-2000:]
    return json.loads(done.stdout), done.stdout + done.stderr


def reasons(model: dict[str, object]) -> str:
    return "\n".join(f"{i['path']}: {i['reason']}" for i in model["issues"])  # type: ignore[attr-defined, index]


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    return build_host(tmp_path / "root", gpus=1).root


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "shadow"
    path.write_text(SECRET)
    return path


@pytest.mark.parametrize("relative", ["proc/self/cgroup", "proc/meminfo", "proc/self/status"])
@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_a_link_out_of_the_root_is_not_followed(
    host_root: Path, secret: Path, relative: str, kind: str
) -> None:
    path = host_root / relative
    path.unlink()
    depth = len(Path(relative).parts) - 1
    path.symlink_to(secret if kind == "absolute" else "../" * (depth + 1) + secret.name)
    model, output = detect(host_root)
    assert "SECRET" not in output
    assert "outside the root" in reasons(model) or "climbs out" in reasons(model), reasons(model)


def test_a_linked_directory_out_of_the_root_is_not_followed(
    host_root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "cgroup").write_text(SECRET)
    (outside / "status").write_text(SECRET)
    for name in ("cgroup", "status", "mountinfo"):
        (host_root / "proc/self" / name).unlink()
    (host_root / "proc/self").rmdir()
    (host_root / "proc/self").symlink_to(outside)
    model, output = detect(host_root)
    assert "SECRET" not in output
    assert "outside the root" in reasons(model), reasons(model)


def test_links_inside_the_root_still_resolve(host_root: Path) -> None:
    from hwtune.probes.root import UnsafeRead, read_bytes

    moved = host_root / "captured-status"
    os.replace(host_root / "proc/self/status", moved)
    (host_root / "proc/self/status").symlink_to("../../captured-status")
    assert b"Cpus_allowed_list" in read_bytes(host_root, "proc/self/status")
    with pytest.raises(UnsafeRead, match="outside the root"):
        (host_root / "abs").symlink_to(moved)
        read_bytes(host_root, "abs")


@pytest.mark.parametrize(
    "relative",
    ["proc/cpuinfo", "proc/self/mountinfo", "sys/devices/system/cpu/online", "nvidia-smi-q.xml"],
)
def test_a_fifo_anywhere_does_not_hang_detect(host_root: Path, relative: str) -> None:
    path = host_root / relative
    path.unlink()
    os.mkfifo(path)
    model, _ = detect(host_root)  # the old code blocked in open() until TIMEOUT_S
    assert "not a regular file" in reasons(model), reasons(model)


@pytest.mark.parametrize("relative", ["proc/cpuinfo", "proc/meminfo", "proc/self/status"])
def test_a_device_is_never_read(host_root: Path, relative: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    path = host_root / relative
    path.unlink()
    os.mknod(path, stat.S_IFCHR | 0o444, os.makedev(1, 5))  # /dev/zero: endless
    model, _ = detect(host_root)
    assert "not a regular file" in reasons(model), reasons(model)


def test_a_huge_file_is_refused_within_bounded_memory(host_root: Path) -> None:
    from hwtune.probes.root import MAX_LARGE

    path = host_root / "proc/cpuinfo"
    with path.open("r+b") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB to read, nothing on disk
    model, _ = detect(host_root)
    assert f"larger than {MAX_LARGE >> 20} MiB" in reasons(model), reasons(model)


def test_a_cgroup_path_deeper_than_the_kernel_prints_is_refused_in_bounded_memory(
    host_root: Path,
) -> None:
    """Before: a 600 KB /proc/self/cgroup naming /a/a/a/... 300,000 levels deep made the list
    of ancestors quadratic in the depth; detect hit its memory limit and lost the limits probe
    ('probe failed unexpectedly: MemoryError'). The kernel prints no path past PATH_MAX."""
    deep = "/" + "a/" * 300_000
    (host_root / "proc/self/cgroup").write_text(f"5:cpuset:/job\n4:cpu,cpuacct:{deep}\n")
    model, _ = detect(host_root)
    said = reasons(model)
    assert "unexpectedly" not in said, said
    assert "proc/self/cgroup: not a cgroup line: its path is 600001 characters" in said, said
    limits = model["limits"]
    assert limits["cpuset_cpus"] == list(range(24)), limits  # type: ignore[index]


def test_a_cgroup_mount_point_longer_than_path_max_is_skipped(host_root: Path) -> None:
    """Before: a cgroup2 mount point 250,000 levels deep (one 500 KB mountinfo line) was
    joined to each of the 2,000 ancestors of a cgroup path the kernel can print; the chain took
    gigabytes, and detect lost the limits probe to a MemoryError or ran past its timeout."""
    point = "/m" * 250_000
    (host_root / "proc/self/mountinfo").write_text(
        f"30 20 0:26 / {point} rw shared:4 - cgroup2 cgroup2 rw\n"
    )
    (host_root / "proc/self/cgroup").write_text("0::/" + "a/" * 2000 + "\n")
    model, _ = detect(host_root)
    said = reasons(model)
    assert "unexpectedly" not in said, said
    assert "proc/self/mountinfo: a cgroup2 mount whose root or mount point is 4096" in said, said
    assert model["limits"]["effective_cpus"] == 24  # type: ignore[index]


def test_an_unparseable_file_is_quoted_short_and_escaped(host_root: Path) -> None:
    from hwtune.probes.issues import MAX_REASON

    garbage = "\x1b[31m" + "X" * 100_000 + "\nmore\n"
    (host_root / "proc/self/cgroup").write_text(garbage)
    model, output = detect(host_root)
    for issue in model["issues"]:  # type: ignore[attr-defined]
        assert len(issue["reason"]) <= MAX_REASON and "\x1b" not in issue["reason"], issue
    assert "X" * 200 not in output and "\x1b" not in output


def test_issue_reasons_are_bounded_one_liners() -> None:
    from hwtune.probes.issues import MAX_REASON, IssueLog

    issues = IssueLog()
    issues.add("x", "bad: " + "\n".join(["line"] * 1000))
    (issue,) = issues.freeze()
    assert len(issue.reason) <= MAX_REASON and "\n" not in issue.reason


@pytest.mark.parametrize("relative", ["proc/self/status", "sys/devices/system/cpu/online"])
def test_the_daemon_does_not_hang_on_a_fifo_under_its_root(
    tmp_path: Path, host_root: Path, relative: str
) -> None:
    from tests.daemon_harness import DaemonProcess

    (host_root / relative).unlink()
    os.mkfifo(host_root / relative)
    daemon = DaemonProcess(tmp_path / "d", host_root, tmp_path / "out")
    try:
        daemon.start()
        daemon.wait_ready()  # detect and the watcher's fingerprints blocked in open() before
        assert (tmp_path / "out" / "hwtune.env").is_file(), daemon.log()
        assert daemon.stop() == 0
    finally:
        daemon.close()


def test_a_linked_directory_out_of_the_root_is_not_listed(host_root: Path, tmp_path: Path) -> None:
    from hwtune.probes.root import UnsafeRead, list_dir

    outside = tmp_path / "other-machine"
    (outside / "node7").mkdir(parents=True)
    (outside / "node7" / "cpulist").write_text("0-23\n")
    nodes = host_root / "sys/devices/system/node"
    os.rename(nodes, tmp_path / "kept-nodes")
    nodes.symlink_to(outside)
    with pytest.raises(UnsafeRead, match="outside the root"):
        list_dir(host_root, "sys/devices/system/node")
    model, _ = detect(host_root)
    assert 7 not in [node["id"] for node in model["numa"]], model["numa"]  # type: ignore[attr-defined, index]
