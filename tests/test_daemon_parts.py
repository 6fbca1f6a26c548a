"""The daemon's parts on their own: sd_notify, the watcher, the one-line change summary."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import select
import socket
import uuid
from pathlib import Path

import pytest

from hwtune.daemon import changes
from hwtune.daemon.inputs import plan_inputs
from hwtune.daemon.instance import LOCK_NAME, hold_output
from hwtune.daemon.sdnotify import Notifier, monotonic_usec, socket_address, watchdog_interval
from hwtune.daemon.watch import Input, Part, Watcher
from hwtune.models.hardware import Gpu, Hardware, Limits, TensorFlowInfo
from tests.daemon_harness import build_host, replace_file

# ---------------------------------------------------------------------------- sd_notify


def test_notify_to_a_path_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": str(path)})
        assert notifier.send(READY=1, STATUS="two\nlines")
        assert server.recv(4096) == b"READY=1\nSTATUS=two lines"
        notifier.close()


def test_notify_to_an_abstract_socket() -> None:
    name = f"hwtune-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0" + name)
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        usec = monotonic_usec()
        assert notifier.send(RELOADING=1, MONOTONIC_USEC=usec)
        assert server.recv(4096) == f"RELOADING=1\nMONOTONIC_USEC={usec}".encode()
        notifier.close()


def test_notify_without_systemd_or_listener_never_raises(tmp_path: Path) -> None:
    assert not Notifier.from_environ({}).send(READY=1)
    odd = Notifier.from_environ({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not odd.enabled and odd.error and "not a unix socket" in odd.error
    gone = Notifier.from_environ({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert not gone.send(READY=1)
    assert gone.error and "nobody" in gone.error
    gone.close()


def test_socket_address_forms() -> None:
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("@abc") == "\0abc"
    assert socket_address("@") is None
    assert socket_address("relative") is None


def test_watchdog_interval() -> None:
    assert watchdog_interval({}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "junk"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "2000000"}) == 1.0
    mine = str(os.getpid())
    assert watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": mine}) == 1.0
    assert watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}, pid=2) is None


# ---------------------------------------------------------------------------- watcher


def test_parts_fingerprint_what_they_should(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("VmRSS: 100\nCpus_allowed_list:\t0-3\n")
    lines = Part("lines", status, "Cpus_allowed_list")
    before = lines.signature()
    status.write_text("VmRSS: 200\nCpus_allowed_list:\t0-3\n")
    assert lines.signature() == before  # other lines do not count
    status.write_text("VmRSS: 200\nCpus_allowed_list:\t0-1\n")
    assert lines.signature() != before

    (tmp_path / "dev").mkdir()
    listing = Part("listing", tmp_path / "dev", "nvidia*")
    empty = listing.signature()
    (tmp_path / "dev/tty0").write_text("")
    assert listing.signature() == empty
    (tmp_path / "dev/nvidia1").write_text("")
    assert listing.signature() == ("nvidia1",)

    tree = Part("tree", tmp_path / "caps", depth=3)
    missing = tree.signature()
    (tmp_path / "caps/gpu0/mig/gi1").mkdir(parents=True)
    assert tree.signature() != missing
    assert Part("content", tmp_path / "absent").signature() == ("error", 2)


def _wait_relevant(watcher: Watcher, timeout: float = 5.0) -> bool:
    fd = watcher.fileno()
    assert fd is not None
    ready, _, _ = select.select([fd], [], [], timeout)
    return bool(ready) and watcher.pending()


def test_inotify_wakes_for_watched_names_only(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "config.toml"
    config.parent.mkdir()
    watcher = Watcher([Input("config", (Part("content", config),))])
    try:
        assert watcher.inotify_active, watcher.note
        (tmp_path / "etc" / "other.txt").write_text("x")
        assert not _wait_relevant(watcher, 0.3)  # an unrelated file: drained, not relevant
        replace_file(config, "mode = 'latency'\n")  # atomic rename, as editors do
        assert _wait_relevant(watcher)
        assert watcher.changed() == ["config"]
        assert watcher.changed() == []
    finally:
        watcher.close()


def test_a_directory_that_appears_later_is_watched(tmp_path: Path) -> None:
    config = tmp_path / "xdg" / "hwtune" / "config.toml"
    watcher = Watcher([Input("config", (Part("content", config),))])
    try:
        assert config.parent not in watcher.watched_directories
        config.parent.mkdir(parents=True)
        config.write_text("x = 1\n")
        assert watcher.changed() == ["config"]  # the poll sees it, and arms the watch
        assert config.parent in watcher.watched_directories
        config.write_text("x = 2\n")
        assert _wait_relevant(watcher)
    finally:
        watcher.close()


def test_a_missing_tree_is_watched_at_its_nearest_ancestor(tmp_path: Path) -> None:
    """inotify cannot watch a directory that does not exist: its nearest existing ancestor is
    watched for the next directory down, each arrival wakes the watcher and moves the watch
    one level lower, and the tree is watched itself once it exists; unrelated names there
    wake nothing. Before, nothing watched until a poll."""
    tuned = tmp_path / "state" / "hwtune" / "tuned"
    watcher = Watcher([Input("measured", (Part("tree", tuned, depth=2),))])
    try:
        assert watcher.inotify_active, watcher.note
        assert watcher.watched_directories == [tmp_path]
        (tmp_path / "unrelated").mkdir()
        assert not _wait_relevant(watcher, 0.3)
        (tmp_path / "state").mkdir()
        assert _wait_relevant(watcher)
        assert watcher.changed() == []  # the tree is still missing
        assert watcher.watched_directories == [tmp_path / "state"]
        (tuned / "fp").mkdir(parents=True)
        assert _wait_relevant(watcher)
        assert watcher.changed() == ["measured"]
        assert watcher.watched_directories == [tuned, tuned / "fp"]
        (tuned / "fp" / "w.json").write_text("{}")
        assert _wait_relevant(watcher)
    finally:
        watcher.close()


def test_polling_only_still_sees_changes(tmp_path: Path) -> None:
    value = tmp_path / "cpu.max"
    value.write_text("max 100000\n")
    watcher = Watcher(
        [Input("cgroup", (Part("content", value, notify=False),))], use_inotify=False
    )
    assert watcher.fileno() is None and watcher.note
    value.write_text("200000 100000\n")
    assert watcher.changed() == ["cgroup"]
    watcher.close()


def test_set_inputs_keeps_the_baseline_of_unchanged_inputs(tmp_path: Path) -> None:
    value = tmp_path / "online"
    value.write_text("0-3\n")
    item = Input("cpus", (Part("content", value),))
    watcher = Watcher([item], use_inotify=False)
    value.write_text("0-2\n")  # changes while the daemon re-detects...
    watcher.set_inputs([item])  # ...and the inputs are rebuilt afterwards
    assert watcher.changed() == ["cpus"]  # the change is still reported
    watcher.close()


def test_inputs_of_a_host_tree(tmp_path: Path) -> None:
    host = build_host(tmp_path / "root")
    config = tmp_path / "config.toml"
    inputs = {i.name: i for i in plan_inputs(host.root, live=False, config_files=[config])}
    assert set(inputs) == {
        "cpus",
        "affinity",
        "cgroup",
        "numa",
        "memory",
        "gpus",
        "tensorflow",
        "config",
        "measured",
    }
    cgroup_files = {p.path.name for p in inputs["cgroup"].parts}
    assert {
        "cgroup",
        "cpu.cfs_quota_us",
        "cpuset.effective_cpus",
        "memory.limit_in_bytes",
    } <= cgroup_files
    watcher = Watcher(list(inputs.values()))
    try:
        host.set_quota(1.5)
        host.set_gpus(1)
        assert _wait_relevant(watcher)
        assert sorted(watcher.changed()) == ["cgroup", "gpus"]
    finally:
        watcher.close()


def test_live_inputs_poll_pseudo_files() -> None:
    inputs = {i.name: i for i in plan_inputs(Path("/"), live=True, config_files=[])}
    cpus = inputs["cpus"].parts
    assert all(not p.notify for p in cpus)  # sysfs: no inotify events to rely on
    assert all(p.notify for p in inputs["gpus"].parts if str(p.path).startswith("/dev"))
    assert not any(p.path.name == "cpuinfo" for p in cpus)  # its MHz lines change all the time


# ---------------------------------------------------------------------------- change lines


def test_hardware_changes_name_the_fact() -> None:
    base = Hardware(limits=Limits(cpu_quota=2.0, effective_cpus=2))
    lower = dataclasses.replace(base, limits=Limits(cpu_quota=1.0, effective_cpus=1))
    assert changes.hardware_changes(base, lower) == ["cpu quota 2.0→1.0"]
    two = dataclasses.replace(base, gpus=(Gpu(0, "A100"), Gpu(1, "A100")))
    one = dataclasses.replace(base, gpus=(Gpu(0, "A100"),))
    assert changes.hardware_changes(two, one) == ["gpus 2 (A100)→1 (A100)"]
    tf = dataclasses.replace(base, tensorflow=TensorFlowInfo("2.20.0", "tensorflow"))
    newer = dataclasses.replace(base, tensorflow=TensorFlowInfo("2.21.0", "tensorflow"))
    assert changes.hardware_changes(tf, newer) == [
        "tensorflow tensorflow 2.20.0→tensorflow 2.21.0"
    ]
    assert changes.hardware_changes(base, base) == []


def test_profile_changes_from_real_plans(tmp_path: Path) -> None:
    from hwtune.planner import plan
    from hwtune.probes import detect

    host = build_host(tmp_path / "root", gpus=0)
    host.set_quota(2.0)
    before = plan(detect(host.root))
    host.set_quota(1.0)
    after = plan(detect(host.root))
    moved = changes.profile_changes(before, after)
    assert moved[0] == "threads.inter_op 2→1" or moved[0] == "threads.intra_op 2→1", moved
    assert "threads.intra_op 2→1" in moved  # stored once: no env.TF_NUM_* twin
    assert not [line for line in moved if line.startswith("env.TF_NUM_")]
    assert changes.profile_changes(after, after) == []
    # Lists of options (bazel.options) read as what was added and removed, the rest old→new.
    for entry in moved:
        assert "→" in entry or " added " in entry or " removed " in entry, entry


def test_option_lists_show_what_was_added_and_removed() -> None:
    assert changes._change(
        "bazel.options", ("--config=opt", "--jobs=2"), ("--config=opt", "--jobs=1")
    ) == ("bazel.options added --jobs=1; removed --jobs=2")
    assert changes._change("x", ("a",), ("a",)) is None
    assert changes._change("threads.intra_op", 2, 1) == "threads.intra_op 2→1"


@pytest.mark.parametrize(
    ("hw", "settings", "expected"),
    [
        (
            ["cpu quota 2.0→1.0"],
            ["threads.intra_op 2→1"],
            "cpu quota 2.0→1.0: threads.intra_op 2→1",
        ),
        ([], ["env.X unset→1"], "config changed: env.X unset→1"),
        (["gpus 2→1"], [], "gpus 2→1: profile unchanged"),
    ],
)
def test_summary(hw: list[str], settings: list[str], expected: str) -> None:
    assert changes.summary(["config"], hw, settings) == expected


def test_summary_is_bounded() -> None:
    line = changes.summary([], ["x 1→2"], [f"s{i} 1→2" for i in range(50)])
    assert line.endswith("and 30 more") and line.count("→") == 21


# ---------------------------------------------------------------------------- command line


_TTL_RANGE = "--ttl {}: must be a number of seconds from 60 to 315360000 (10 years)"


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["daemon", "--interval", "0"], 1, "--interval 0"),
        (
            ["daemon", "--interval", "inf"],
            2,
            "--interval: expected a number of seconds from 0.1 to 86400",
        ),
        (["daemon", "--root", "/nonexistent/tree"], 1, "not a directory"),
        (["nfd", "--ttl", "nan", "--print"], 2, "--ttl: expected a number of seconds from 60 to"),
        (["nfd", "--ttl", "0", "--print"], 1, "--ttl 0: must be a number of seconds from 60"),
        # one nfd-worker rescan (60 s by default): a shorter expiry lapsed before it was read
        (["nfd", "--ttl", "0.4", "--print"], 1, "--ttl 0.4: must be a number of seconds from 60"),
        (["daemon", "--interval", "0.05"], 1, "--interval 0.05: must be a number of seconds from"),
        (
            ["daemon", "--interval", "86400.5"],
            1,
            "--interval 86400.5: must be a number of seconds from 0.1 to 86400",
        ),
        # Any finite number parses and the command checks the range: -5 was exit 2 with a
        # parse message while 59.9 was exit 1, the maximum printed as 3.1536e+08.
        (["nfd", "--ttl", "-5", "--print"], 1, _TTL_RANGE.format("-5")),
        (["nfd", "--ttl", "59.9", "--print"], 1, _TTL_RANGE.format("59.9")),
        (["nfd", "--ttl", "315360001", "--print"], 1, _TTL_RANGE.format("315360001")),
        (["nfd", "--ttl", "1e300", "--print"], 1, _TTL_RANGE.format("1e+300")),
        (["nfd", "--ttl", "abc", "--print"], 2, "from 60 to 315360000 (10 years) (ASCII"),
        (["daemon", "--interval", "-1"], 1, "--interval -1: must be a number of seconds from"),
    ],
)
def test_bad_arguments_are_refused(cli, argv: list[str], status: int, message: str) -> None:  # type: ignore[no-untyped-def]
    result = cli(argv)
    assert result.exit_status == status
    assert message in result.stderr


def _open_on(path: Path) -> list[str]:
    """This process's descriptors open on `path`."""
    fds = Path("/proc/self/fd")
    found = []
    for name in os.listdir(fds):
        with contextlib.suppress(OSError):
            if os.readlink(fds / name) == str(path):
                found.append(name)
    return found


def test_a_lock_the_filesystem_refuses_leaves_no_descriptor_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flock failing otherwise than 'held by another' (ENOLCK: an NFS mount without lockd)
    propagated with `.daemon.lock` still open: one descriptor leaked per try. Only flock is
    made to fail; the directory, the lock file and its checks are real."""
    output = tmp_path / "out"

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(OSError) as raised:
            hold_output(output)
        assert raised.value.errno == errno.ENOLCK
    assert (output / LOCK_NAME).is_file()  # it got as far as opening the real file
    assert _open_on(output / LOCK_NAME) == []
    assert len(os.listdir("/proc/self/fd")) == before
