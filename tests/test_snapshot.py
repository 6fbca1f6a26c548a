"""`hwtune snapshot`: a copy of what detect reads, which detect --root reads back the same."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hwtune.errors import HwtuneError
from hwtune.probes import snapshot as snapshot_module
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
        "cuda_visible_devices": "skipped (--no-gpu)",
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


def test_a_rhel6_thp_file_is_copied_and_read_back(tmp_path: Path) -> None:
    """RHEL 6 kernels have redhat_transparent_hugepage/enabled and no upstream file: the
    snapshot keeps it, so detect on the copy reads the mode the live machine had."""
    from hwtune.probes.issues import IssueLog
    from hwtune.probes.memory import probe_memory

    src = tmp_path / "src"
    thp = src / "sys/kernel/mm/redhat_transparent_hugepage/enabled"
    thp.parent.mkdir(parents=True)
    thp.write_text("[always] madvise never\n")
    (src / "proc").mkdir()
    (src / "proc/meminfo").write_text("MemTotal:       16384 kB\nMemAvailable:    8192 kB\n")
    snap = tmp_path / "snap"
    manifest = take_snapshot(snap, source=src, gpus=False, tensorflow=False)
    assert "sys/kernel/mm/redhat_transparent_hugepage/enabled" in manifest["files"]
    assert probe_memory(snap, IssueLog()).transparent_hugepages == "always"


def test_the_summary_of_a_one_file_snapshot_reads_singular(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = {"files": ["proc/cpuinfo"], "missing": [], "captures": {}, "issues": []}
    monkeypatch.setattr(snapshot_module, "take_snapshot", lambda *_a, **_k: manifest)
    result = run_cli(["snapshot", str(tmp_path / "snap"), "--no-gpu", "--no-tensorflow"])
    assert result.stdout.startswith(f"hwtune snapshot: 1 file in {tmp_path / 'snap'}\n")


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


# Run in a child: another user's link is swapped in for DIR right after the first trusted-path
# check (the window the reviewer widened by patching; here it is made deterministic).
_SWAP_AFTER_CHECK = r"""
import os, sys
from pathlib import Path
import hwtune.probes.snapshot as snapshot
from hwtune.cli import main

dest, victim = Path(sys.argv[1]), sys.argv[2]
real_check = snapshot.check_trusted_path
swapped = []

def check_then_swap(path, **options):
    real_check(path, **options)
    if not swapped:
        swapped.append(path)
        os.symlink(victim, dest)  # as `nobody` would, in a sticky directory they can write
        os.lchown(dest, 65534, 65534)

snapshot.check_trusted_path = check_then_swap
sys.exit(main(["snapshot", str(dest), "--no-gpu", "--no-tensorflow"]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the race is against root's writes")
def test_as_root_a_link_swapped_in_after_the_check_is_not_written_through(
    tmp_path: Path,
) -> None:
    """check_trusted_path, then exists()/iterdir, then make_dirs: a link planted between the
    check and the creation was followed, and MANIFEST.json, proc/ and sys/ went into the
    link's target. Now the directory is made with mkdir and opened O_NOFOLLOW: the link is
    refused, naming the path, and the victim stays empty."""
    shared = tmp_path / "shared"  # a /tmp of its own: root's, sticky, writable by everyone
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.mkdir(0o755)
    dest = shared / "snaprace"
    done = subprocess.run(
        [sys.executable, "-c", _SWAP_AFTER_CHECK, str(dest), str(victim)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        check=False,
    )
    assert list(victim.iterdir()) == [], done.stdout
    assert done.returncode == ExitStatus.ERROR, done.stderr
    assert str(dest) in done.stderr and "symbolic link" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert os.readlink(dest) == str(victim)  # the link itself left as it was


def _swap_in_place(monkeypatch: pytest.MonkeyPatch, dest: Path, make: Callable[[], None]) -> None:
    """Run `make` right after the first trusted-path check of `dest` (in this process)."""
    real_check = snapshot_module.check_trusted_path
    calls: list[Path] = []

    def check_then_make(path: Path, **options: str) -> None:
        real_check(path, **options)
        if not calls:
            calls.append(path)
            make()

    monkeypatch.setattr(snapshot_module, "check_trusted_path", check_then_make)


@pytest.mark.skipif(os.geteuid() != 0, reason="the owner check is root's")
def test_as_root_a_directory_another_user_made_in_the_window_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a link but their own empty directory, made after the check: they could plant
    `proc -> /etc` in it; it is refused by owner, nothing is written in it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    dest = shared / "snap"

    def plant() -> None:
        dest.mkdir()
        os.chown(dest, 65534, 65534)

    _swap_in_place(monkeypatch, dest, plant)
    with pytest.raises(HwtuneError, match=r"snap.*nobody"):
        take_snapshot(dest, gpus=False, tensorflow=False)
    assert list(dest.iterdir()) == []


def test_writes_inside_the_snapshot_never_pass_a_link(tmp_path: Path) -> None:
    """Sub-directories are opened O_NOFOLLOW relative to the snapshot's descriptor: a link
    inside (here one the copy made, node0/cpu0 -> ../../cpu/cpu0 style) is not written
    through, and neither is a link that later replaces the snapshot's own path."""
    dest = tmp_path / "snap"
    out = snapshot_module.open_destination(dest)
    try:
        out.symlink("sys/node0/cpu0", "../cpu/cpu0")
        out.write("sys/cpu/cpu0/online", b"1\n")
        with pytest.raises(OSError) as raised:
            out.write("sys/node0/cpu0/online", b"0\n")
        assert str(dest / "sys/node0/cpu0/online") in str(raised.value)
        assert (dest / "sys/cpu/cpu0/online").read_bytes() == b"1\n"
        moved = tmp_path / "moved"
        dest.rename(moved)
        dest.symlink_to(tmp_path / "elsewhere")
        out.write("MANIFEST.json", b"{}\n")  # into the directory opened, not the new link
        assert (moved / "MANIFEST.json").read_bytes() == b"{}\n"
        assert out.files() == ["MANIFEST.json", "sys/cpu/cpu0/online"]  # links not entered
    finally:
        out.close()
    assert not (tmp_path / "elsewhere").exists()


def test_an_existing_empty_directory_is_used_and_made_shareable(tmp_path: Path) -> None:
    dest = tmp_path / "empty"
    dest.mkdir(0o755)
    manifest = take_snapshot(dest, gpus=False, tensorflow=False)
    assert (dest / MANIFEST).is_file() and manifest["files"]
    fresh = tmp_path / "fresh"
    old = os.umask(0o077)
    try:
        take_snapshot(fresh, gpus=False, tensorflow=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o755
    assert stat.S_IMODE((fresh / "proc").stat().st_mode) == 0o755
    assert stat.S_IMODE((fresh / MANIFEST).stat().st_mode) == 0o644


def test_gpu_snapshot_writer_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    """gpu._write_atomic opened its temporary with open("wb"): a link planted at the
    temporary's name was followed and its target overwritten. Now O_CREAT|O_EXCL|O_NOFOLLOW:
    it is an error, the target and the link are left alone."""
    from hwtune.probes.gpu import _write_atomic

    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "nvidia-smi-q.xml"
    planted = tmp_path / f".{target.name}.tmp{os.getpid()}"
    planted.symlink_to(victim)
    with pytest.raises(FileExistsError):
        _write_atomic(target, b"<nvidia_smi_log/>")
    assert victim.read_text() == "precious"
    assert planted.is_symlink() and not target.exists()
    planted.unlink()
    old = os.umask(0o077)
    try:
        _write_atomic(target, b"<nvidia_smi_log/>")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"<nvidia_smi_log/>"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="the trusted-path check runs as root only")
def test_a_refused_snapshot_directory_hints_at_its_own_argument(tmp_path: Path) -> None:
    """The hint said "choose another directory with --output", an option snapshot lacks (it
    takes DIR)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = run_cli(["snapshot", "--no-gpu", "--no-tensorflow", str(shared / "snap")])
    assert result.exit_status != 0
    assert f"chmod go-w {shared}, or choose another directory" in result.stderr, result.stderr
    assert "--output" not in result.stderr
