"""The real daemon stops promptly and keeps talking to systemd whatever is in its way: another
`hwtune apply` holding the output lock, a `$NOTIFY_SOCKET` nobody reads, an over-long status.

systemd sends SIGTERM and SIGKILLs the service TimeoutStopSec= later (5 s in
systemd/hwtune.service), so a stop must take well under that.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hwtune.daemon.instance import HINT, LOCK_NAME
from hwtune.daemon.sdnotify import MIN_PING_S
from hwtune.daemon.stable import WAIT_S as STABLE_WAIT_S
from hwtune.status import ExitStatus
from tests.conftest import REPO
from tests.daemon_harness import (
    WAIT_S,
    DaemonProcess,
    Host,
    build_host,
    env_value,
    wait_for,
)

# Under systemd/hwtune.service's TimeoutStopSec=5s, with room for a loaded CI machine.
STOP_S = 4.0


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return build_host(tmp_path / "root")


@pytest.fixture
def daemon(tmp_path: Path, host: Host) -> Iterator[DaemonProcess]:
    process = DaemonProcess(tmp_path, host.root, tmp_path / "out")
    yield process
    process.close()


def _holds_open(pid: int, path: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(fds / name) == str(path):
                return True
        except OSError:
            continue
    return False


def test_sigterm_while_another_apply_holds_the_lock_stops_at_once(
    daemon: DaemonProcess,
) -> None:
    """The lock as `hwtune apply` takes it (fs.atomic.locked: flock on OUTPUT/.lock), held here
    for longer than the daemon's 30 s lock timeout would take."""
    daemon.output.mkdir()
    lock_path = daemon.output / ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        daemon.start()
        # The daemon opens the lock file only to wait for it, after detect and plan.
        wait_for(lambda: _holds_open(daemon.pid, lock_path), "the daemon to wait for the lock")
        time.sleep(0.2)  # a few tries into the wait
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.proc is not None and daemon.proc.wait(STOP_S) == 0
        assert time.monotonic() - started < STOP_S
    finally:
        os.close(fd)
    daemon.drain()
    assert daemon.count("STOPPING") == 1
    assert "Traceback" not in daemon.log()
    assert not (daemon.output / "hwtune.env").exists()  # nothing written without the lock


def test_sigterm_while_a_config_is_being_written_stops_at_once(daemon: DaemonProcess) -> None:
    """An editor (or `cat >> config.toml` in a terminal) keeps the config open for writing:
    the daemon waits up to stable.WAIT_S for it to finish before reading it, and that wait
    ignored SIGTERM, so a stop took up to 3 s more (once per read of a cycle). The wait now
    gives up on SIGTERM as the lock wait does, and nothing is written."""
    daemon.config.parent.mkdir(parents=True)
    daemon.config.write_text('mode = "throughput"\n')
    daemon.start()
    daemon.wait_ready()
    before = (daemon.output / "hwtune.env").read_bytes()
    with open(daemon.config, "a") as writer:  # held open: the read lease is refused
        writer.write("# being edited\n")
        writer.flush()  # wakes the daemon (inotify), whose read then waits for the writer
        time.sleep(0.5)
        start = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.proc is not None and daemon.proc.wait(STABLE_WAIT_S + STOP_S) == 0
        took = time.monotonic() - start
    assert took < 1.5, f"stopped {took:.1f} s after SIGTERM; log:\n{daemon.log()}"
    assert (daemon.output / "hwtune.env").read_bytes() == before
    assert "Traceback" not in daemon.log()


def test_a_notify_socket_nobody_reads_neither_hangs_nor_blocks_sigterm(
    daemon: DaemonProcess,
) -> None:
    """$NOTIFY_SOCKET bound but never read, with a small receive buffer: the queue fills after
    a few messages (a watchdog ping every 0.1 s, the shortest the daemon keeps, makes them),
    and a blocking send would then hang the daemon, SIGTERM included. The first dropped
    message is logged, once."""
    daemon.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    daemon.extra_env["WATCHDOG_USEC"] = "200000"
    daemon.start()
    wait_for(lambda: (daemon.output / "hwtune.env").exists(), "the first apply")
    time.sleep(1.0)  # ten pings: a 1 KB buffer holds one or two datagrams
    daemon.signal(signal.SIGTERM)
    assert daemon.proc is not None and daemon.proc.wait(STOP_S) == 0
    log = daemon.log()
    assert log.count("sd_notify to") == 1, log
    assert "Traceback" not in log


def test_a_watchdog_too_short_to_keep_is_pinged_at_the_floor_not_in_a_spin(
    daemon: DaemonProcess,
) -> None:
    """WATCHDOG_USEC=1 asks for a ping every half microsecond: the loop spun a CPU sending
    ~20000 datagrams a second (most dropped, each run of drops logged). The daemon pings
    every MIN_PING_S instead and says so, once."""
    daemon.extra_env["WATCHDOG_USEC"] = "1"
    daemon.start()
    daemon.wait_ready()
    mark = len(daemon.messages)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:  # read all the while: nothing is dropped
        daemon.drain()
        time.sleep(0.01)
    pings = sum(1 for m in daemon.messages[mark:] if m.get("WATCHDOG") == "1")
    assert daemon.stop() == 0
    assert 5 <= pings <= 2.0 / MIN_PING_S * 2, pings
    log = daemon.log()
    assert log.count("WATCHDOG_USEC=1 asks for a ping every 0.5 µs") == 1, log
    assert "sd_notify to" not in log, log


def test_ready_is_delivered_whatever_the_status_says(tmp_path: Path, host: Host) -> None:
    """A hostile config whose error quotes a 6 KB table name: PID 1 ignores a notification
    over 4096 bytes whole (sdnotify module doc), so READY=1 goes alone and STATUS= is cut to
    1 KB at a character boundary."""
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out")
    try:
        d.config.parent.mkdir(parents=True)
        d.config.write_text('["' + "é" * 3000 + '"]\nx = 1\n')
        d.start()
        d.wait_ready()
        assert {"READY": "1"} in d.messages, f"READY=1 shares a datagram; sizes {d.sizes}"
        after = d.messages.index({"READY": "1"}) + 1
        status = d.wait_message(lambda m: "STATUS" in m, after=after)["STATUS"]
        assert d.stop() == 0
        assert max(d.sizes) <= 4096, d.sizes
        assert status.startswith("error:") and status.endswith("éé…"), status
        assert len(status.encode()) <= 1024
    finally:
        d.close()


def test_a_second_daemon_on_the_same_output_refuses_to_start(tmp_path: Path, host: Host) -> None:
    """hwtune.service running and the same command started by hand: both rewrote the files
    from their own plans and neither saw the other's rewrite, so the profile on disk was
    whichever wrote last. The second one now stops at start, naming the first one's pid and
    what to do, and a daemon started after the first one stops takes the directory over. It
    exits 6, not 1: hwtune.service (Restart=on-failure) restarted it after 1 every 5 s for as
    long as the first one ran (test_systemd_units: RestartPreventExitStatus=)."""
    output = tmp_path / "out"
    first = DaemonProcess(tmp_path / "first", host.root, output)
    second = DaemonProcess(tmp_path / "second", host.root, output)
    third = DaemonProcess(tmp_path / "third", host.root, output)
    try:
        first.start()
        first.wait_ready()
        second.start()
        assert second.proc is not None and second.proc.wait(WAIT_S) == ExitStatus.LOCKED, (
            second.log()
        )
        expected = f"another hwtune daemon (pid {first.pid}) keeps {output} current"
        assert f"hwtune daemon: error: {expected}" in second.log(), second.log()
        assert f"hint: {HINT}" in second.log(), second.log()
        assert second.count("READY") == 0
        assert first.proc is not None and first.proc.poll() is None
        assert first.stop() == 0
        third.start()
        third.wait_ready()
        assert "another hwtune daemon" not in third.log(), third.log()
        assert third.stop() == 0
    finally:
        for d in (first, second, third):
            d.close()


def test_a_daemon_started_while_another_process_holds_its_lock_exits_6(
    tmp_path: Path, host: Host
) -> None:
    """Not a daemon: any process holding OUTPUT/.daemon.lock (here `flock`-style, by another
    interpreter) makes the daemon stop at start with 6, the status hwtune.service does not
    restart, naming that process's pid and what to do; nothing is written."""
    output = tmp_path / "out"
    output.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(120)\n",
            str(output / LOCK_NAME),
        ],
        stdout=subprocess.PIPE,
    )
    daemon = DaemonProcess(tmp_path / "daemon", host.root, output)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        daemon.start()
        assert daemon.proc is not None
        assert daemon.proc.wait(WAIT_S) == ExitStatus.LOCKED == 6, daemon.log()
        lock = output / LOCK_NAME
        expected = (
            f"hwtune daemon: error: another process (pid {holder.pid}) holds {lock}, the lock "
            f"a daemon keeps {output} current under; not starting a second one\n"
            f"hint: {HINT}\n"
        )
        assert daemon.log() == expected
        daemon.drain()
        assert daemon.count("READY") == 0
        assert sorted(p.name for p in output.iterdir()) == [LOCK_NAME]
    finally:
        holder.kill()
        holder.wait()
        daemon.close()


def test_an_output_directory_deleted_under_the_daemon_is_still_its_alone(
    tmp_path: Path, host: Host
) -> None:
    """`rm -rf OUTPUT` while the daemon runs took its .daemon.lock with it: the daemon put
    its profile files back but not its lock, so a second daemon started on the same output
    took a new lock and both rewrote the files. The daemon now takes its lock again (at
    once: the lock is watched with its outputs) before it puts the files back, and a second
    one is refused as at start."""
    output = tmp_path / "out"
    first = DaemonProcess(tmp_path / "first", host.root, output, interval=30)
    second = DaemonProcess(tmp_path / "second", host.root, output)
    try:
        first.start()
        first.wait_ready()
        written = sorted(p.name for p in output.iterdir() if not p.name.startswith("."))
        # rm -rf, all at once: the daemon, woken by the first deletion, must not put files
        # back into a directory still being emptied (rmdir would then fail, as rm -rf does)
        os.rename(output, tmp_path / "deleted")
        shutil.rmtree(tmp_path / "deleted")
        wait_for(
            lambda: sorted(p.name for p in output.glob("[!.]*")) == written,
            f"every output put back; log:\n{first.log()}",
        )
        wait_for(lambda: (output / LOCK_NAME).exists(), "the lock file")
        assert f"{output / LOCK_NAME} was deleted or replaced: held again" in first.log()
        second.start()
        assert second.proc is not None and second.proc.wait(WAIT_S) == ExitStatus.LOCKED, (
            second.log()
        )
        assert f"another hwtune daemon (pid {first.pid})" in second.log(), second.log()
        assert first.stop() == 0
    finally:
        first.close()
        second.close()


def test_a_daemon_whose_lock_another_took_meanwhile_stops(tmp_path: Path, host: Host) -> None:
    """A second daemon started between the deletion and the first one's next look (polling
    only, a long interval) takes the new lock; when the first one looks (SIGHUP here) it must
    not go on rewriting the files the other keeps: it stops with 6 (as at start, which
    systemd does not restart), naming the other and what to do."""
    output = tmp_path / "out"
    first = DaemonProcess(tmp_path / "first", host.root, output, interval=60)
    first.extra_args = ("--poll-only",)
    second = DaemonProcess(tmp_path / "second", host.root, output)
    try:
        first.start()
        first.wait_ready()
        shutil.rmtree(output)
        second.start()
        second.wait_ready()
        first.signal(signal.SIGHUP)
        assert first.proc is not None and first.proc.wait(WAIT_S) == ExitStatus.LOCKED, first.log()
        expected = f"another hwtune daemon (pid {second.pid}) keeps {output} current"
        assert expected in first.log(), first.log()
        assert f"hwtune daemon: hint: {HINT}" in first.log(), first.log()
        assert second.proc is not None and second.proc.poll() is None
        assert second.stop() == 0
    finally:
        first.close()
        second.close()


def test_a_lock_that_could_not_be_had_at_start_is_taken_once_it_can(
    tmp_path: Path, host: Host
) -> None:
    """An output that cannot be made at start (a file where its parent directory should be)
    leaves the daemon unguarded and degraded; once it can be made, the daemon takes its lock
    as it applies, and a second daemon is refused."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be\n")
    output = blocker / "out"
    first = DaemonProcess(tmp_path / "first", host.root, output)
    second = DaemonProcess(tmp_path / "second", host.root, output)
    try:
        first.start()
        first.wait_ready()
        assert "not guarding" in first.log(), first.log()
        blocker.unlink()
        blocker.mkdir()
        wait_for(lambda: env_value(output, "TF_NUM_INTRAOP_THREADS") is not None, "applied")
        wait_for(lambda: "now guarding" in first.log(), f"the lock; log:\n{first.log()}")
        second.start()
        assert second.proc is not None and second.proc.wait(WAIT_S) == ExitStatus.LOCKED, (
            second.log()
        )
        assert f"another hwtune daemon (pid {first.pid})" in second.log(), second.log()
        assert first.stop() == 0
    finally:
        first.close()
        second.close()


# A sitecustomize for the daemon's interpreter: flock on a `.daemon.lock` fails with ENOLCK,
# as on an NFS mount without lockd (flock(2), "ENOLCK"); every other flock is the real one.
_NO_LOCKD = """
import errno, fcntl, os
_real = fcntl.flock
def _flock(fd, operation):
    if os.readlink(f"/proc/self/fd/{fd}").endswith("/.daemon.lock"):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    return _real(fd, operation)
fcntl.flock = _flock
"""


def test_a_lock_the_file_system_refuses_is_run_without(tmp_path: Path, host: Host) -> None:
    """ENOLCK from flock (an output on NFS without lockd) ended the daemon at start in a
    traceback, and under Restart=on-failure it was started again every 5 s; as for any other
    reason the lock cannot be had, it now says so and runs without it."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(_NO_LOCKD)
    d = DaemonProcess(
        tmp_path, host.root, tmp_path / "out", extra_env={"PYTHONPATH": f"{shim}:{REPO}"}
    )
    try:
        d.start()
        d.wait_ready()
        assert env_value(d.output, "TF_NUM_INTRAOP_THREADS") is not None, d.log()
        assert "not guarding" in d.log() and "No locks available" in d.log(), d.log()
        (d.output / LOCK_NAME).unlink()  # taken again at the next look: refused again
        host.set_quota(3.0)
        wait_for(lambda: env_value(d.output, "TF_NUM_INTRAOP_THREADS") == "3", "the change")
        assert d.stop() == 0, d.log()
        assert d.log().count("not guarding") == 1, d.log()
        assert "Traceback" not in d.log()
    finally:
        d.close()


def test_a_log_reader_that_went_away_does_not_change_the_exit_status(
    tmp_path: Path, host: Host
) -> None:
    """`hwtune daemon 2>&1 | head -1`, or a supervisor that stopped reading: once the pipe's
    reader is gone every log line fails with EPIPE and stays in stderr's buffer, and the
    interpreter's last flush failed on it again, so SIGTERM ended in exit status 120, not 0
    (and systemd would have called the stop a failure)."""
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(d.config_home),
        "PYTHONPATH": str(REPO),
    }
    argv = [sys.executable, "-m", "hwtune", "daemon", "--root", str(host.root)]
    argv += ["--output", str(d.output), "--interval", "0.2"]
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=write_end)
    finally:
        os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as reader:
            assert b"applied to" in reader.readline()
        # the reader is gone: the next lines (a change, then "stopping") cannot be written
        host.set_quota(3.0)
        wait_for(lambda: env_value(d.output, "TF_NUM_INTRAOP_THREADS") == "3", "the change")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        d.close()


def test_a_log_on_a_full_disk_does_not_change_the_exit_status(tmp_path: Path, host: Host) -> None:
    """stderr on a full disk (/dev/full: every write fails with ENOSPC): each line was
    dropped by the CLI's stderr guard but stayed buffered, and the flush at exit went through
    that guard too, which hides ENOSPC, so the interpreter's own last flush failed on it and
    SIGTERM ended in exit status 120, not 0."""
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(d.config_home),
        "PYTHONPATH": str(REPO),
    }
    argv = [sys.executable, "-m", "hwtune", "daemon", "--root", str(host.root)]
    argv += ["--output", str(d.output), "--interval", "0.2"]
    with open("/dev/full", "w") as full:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=full)
    try:
        wait_for(lambda: env_value(d.output, "TF_NUM_INTRAOP_THREADS") is not None, "applied")
        host.set_quota(3.0)  # one more line that cannot be written
        wait_for(lambda: env_value(d.output, "TF_NUM_INTRAOP_THREADS") == "3", "the change")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        d.close()


def test_journal_prefixes_only_when_stderr_is_the_announced_stream(
    tmp_path: Path, host: Host
) -> None:
    """systemd.exec(5): $JOURNAL_STREAM is inherited by children whose stderr may go
    elsewhere, so it is trusted only when it names stderr's own device and inode."""
    logs = {}
    for name, matching in (("stale", False), ("journal", True)):
        d = DaemonProcess(tmp_path / name, host.root, tmp_path / name / "out")
        try:
            d.log_path.touch()  # start() reopens it in place: the inode is the one stderr gets
            st = d.log_path.stat()
            d.extra_env["JOURNAL_STREAM"] = (
                f"{st.st_dev}:{st.st_ino}" if matching else f"{st.st_dev}:{st.st_ino + 1}"
            )
            d.start()
            d.wait_ready()
            assert d.stop() == 0
            logs[name] = d.log()
        finally:
            d.close()
    assert "<6>hwtune daemon: applied" not in logs["stale"], logs["stale"]
    assert "hwtune daemon: applied" in logs["stale"]
    assert "<6>hwtune daemon: applied" in logs["journal"], logs["journal"]
