"""`hwtune snapshot`: a copy of what detect reads, which detect --root reads back the same."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import pytest

from hwtune.errors import HwtuneError
from hwtune.probes.snapshot import MANIFEST, REQUIRED, record_reads, take_snapshot
from hwtune.status import ExitStatus

from .conftest import run_cli


def require_probes(*names: str) -> None:
    missing = [n for n in names if importlib.util.find_spec(f"hwtune.probes.{n}") is None]
    if missing:
        pytest.skip(f"hwtune.probes.{', '.join(missing)} (other parts of issue 2) not written yet")


def test_snapshot_then_detect_gives_the_same_answers(tmp_path: Path) -> None:
    require_probes("cpu", "numa")
    from hwtune.probes import detect

    snap = tmp_path / "snap"
    take_snapshot(snap, gpus=False, tensorflow=False)
    live = detect("/", gpus=False, tensorflow=False)
    copy = detect(snap, gpus=False, tensorflow=False)
    assert copy.cpu == live.cpu
    assert copy.numa == live.numa
    assert copy.limits == live.limits
    # MemAvailable moves between two reads; everything else about memory must not.
    assert dataclasses.replace(copy.memory, available_bytes=None) == dataclasses.replace(
        live.memory, available_bytes=None
    )
    assert copy.memory.available_bytes is not None


def test_manifest_lists_what_was_copied(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    manifest = take_snapshot(snap, gpus=False, tensorflow=False)
    assert json.loads((snap / MANIFEST).read_text()) == manifest
    on_disk = sorted(
        str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file() and p.name != MANIFEST
    )
    assert manifest["files"] == on_disk
    for relative in REQUIRED:
        if Path("/", relative).exists():
            assert relative in manifest["files"]
            assert (snap / relative).read_bytes() != b""
    assert manifest["missing"] == [
        {"path": p, "reason": "absent on this machine"}
        for p in REQUIRED
        if not Path("/", p).exists()
    ]
    assert manifest["captures"] == {
        "gpu": "skipped (--no-gpu)",
        "tensorflow": "skipped (--no-tensorflow)",
    }
    # this process's cgroup files came along, so limits can be read back
    assert any(f.startswith("sys/fs/cgroup/") for f in manifest["files"])
    assert ("lscpu.txt" in manifest["files"]) == ("lscpu.txt" in manifest["commands"])


def test_snapshot_of_a_tree(tmp_path: Path) -> None:
    """From a made-up source tree: layout kept, noisy sysfs parts skipped, links kept."""
    src = tmp_path / "src"
    files = {
        "proc/cpuinfo": "processor\t: 0\n",
        "proc/self/status": "Cpus_allowed_list:\t0\n",
        "proc/self/cgroup": "0::/a/b\n",
        "proc/self/mountinfo": "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        "sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
        "sys/fs/cgroup/a/cpu.max": "50000 100000\n",
        "sys/fs/cgroup/a/b/cpu.max": "max 100000\n",
        "sys/fs/cgroup/a/b/unrelated.stat": "x\n",
        "sys/devices/system/cpu/online": "0\n",
        "sys/devices/system/cpu/cpu0/topology/core_id": "0\n",
        "sys/devices/system/cpu/cpu0/cpuidle/state0/name": "POLL\n",
        "sys/devices/system/node/node0/cpulist": "0\n",
    }
    for relative, text in files.items():
        (src / relative).parent.mkdir(parents=True, exist_ok=True)
        (src / relative).write_text(text)
    (src / "sys/devices/system/node/node0/cpu0").symlink_to("../../cpu/cpu0")
    (src / "sys/devices/system/node/node0/outside").symlink_to("../../../../elsewhere")
    snap = tmp_path / "snap"
    manifest = take_snapshot(snap, source=src, gpus=False, tensorflow=False)
    copied = set(manifest["files"])
    assert {
        "proc/cpuinfo",
        "sys/fs/cgroup/a/cpu.max",
        "sys/fs/cgroup/a/b/cpu.max",
        "sys/devices/system/cpu/cpu0/topology/core_id",
        "sys/devices/system/node/node0/cpulist",
    } <= copied
    assert "sys/devices/system/cpu/cpu0/cpuidle/state0/name" not in copied
    assert "sys/fs/cgroup/a/b/unrelated.stat" not in copied
    assert os.readlink(snap / "sys/devices/system/node/node0/cpu0") == "../../cpu/cpu0"
    assert not (snap / "sys/devices/system/node/node0/outside").is_symlink()
    assert {m["path"] for m in manifest["missing"]} == {
        "proc/meminfo",
        "sys/kernel/mm/transparent_hugepage/enabled",
    }


def test_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(HwtuneError, match="not an empty directory"):
        take_snapshot(tmp_path, gpus=False, tensorflow=False)
    result = run_cli(["snapshot", str(tmp_path)])
    assert result.exit_status == ExitStatus.ERROR
    assert "hint:" in result.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_an_unusable_destination_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_cli(["snapshot", str(blocker / "snap"), "--no-gpu", "--no-tensorflow"])
    assert result.exit_status == ExitStatus.ERROR, result.stderr
    assert "Traceback" not in result.stderr and "snap" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the check of other users' directories is root's")
def test_as_root_a_destination_another_user_controls_is_refused(tmp_path: Path) -> None:
    """Another user's empty directory: they could plant `proc -> /etc/...` in it after the
    emptiness check, and root would write through the link."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(HwtuneError, match="theirs"):
        take_snapshot(theirs, gpus=False, tensorflow=False)
    assert list(theirs.iterdir()) == []
    # The CLI says why with the refusal's own hint, not "cannot write ... no room".
    result = run_cli(["snapshot", str(theirs), "--no-gpu", "--no-tensorflow"])
    assert result.exit_status == ExitStatus.ERROR
    assert "refusing to write under" in result.stderr and "chown root" in result.stderr
    assert "room" not in result.stderr and "incomplete" not in result.stderr


def test_cli_snapshot(tmp_path: Path) -> None:
    require_probes("cpu", "numa")
    result = run_cli(["snapshot", str(tmp_path / "snap"), "--no-gpu", "--no-tensorflow"])
    manifest = json.loads((tmp_path / "snap" / MANIFEST).read_text())
    assert manifest["missing"] == [] and manifest["issues"] == [], manifest
    assert result.exit_status == ExitStatus.SUCCESS, result.stdout
    assert f"{len(manifest['files'])} files" in result.stdout


def test_gpu_and_tensorflow_captures_are_called(tmp_path: Path) -> None:
    require_probes("gpu", "tensorflow")
    manifest = take_snapshot(tmp_path / "snap")
    for name in ("gpu", "tensorflow"):
        assert manifest["captures"][name].startswith("done"), manifest


def test_record_reads_sees_opens_inside_the_block_only(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in.txt", tmp_path / "out.txt"
    inside.write_text("1")
    outside.write_text("2")
    with record_reads() as opened:
        inside.read_text()
    outside.read_text()
    assert str(inside) in opened
    assert str(outside) not in opened
