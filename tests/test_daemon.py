"""The real daemon, as a subprocess, on a host tree the test changes under it.

Each test starts `python -m hwtune daemon --root TREE --output OUT --interval 0.2` with a
NOTIFY_SOCKET bound here, changes the tree the way the kernel or an admin would, and waits for
the applied files to follow. Waits are generous (a loaded CI machine); how fast the daemon
follows is measured in bench/bench_daemon.py, not asserted here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hwtune.daemon.stable import WAIT_S as STABLE_WAIT_S
from tests.conftest import REPO
from tests.daemon_harness import (
    WAIT_S,
    DaemonProcess,
    Host,
    build_host,
    env_value,
    replace_file,
    wait_for,
)
from tests.test_nfd import parse_feature_file

INTRA = "TF_NUM_INTRAOP_THREADS"


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return build_host(tmp_path / "root")


@pytest.fixture
def daemon(tmp_path: Path, host: Host) -> Iterator[DaemonProcess]:
    process = DaemonProcess(tmp_path, host.root, tmp_path / "out")
    yield process
    process.close()


def follows(d: DaemonProcess, name: str, value: str) -> None:
    wait_for(
        lambda: env_value(d.output, name) == value,
        f"{name}={value} in {d.output}/hwtune.dotenv; log:\n{d.log()}",
    )


def gpu_strategy(output: Path) -> tuple[object, tuple[int, ...]]:
    profile = json.loads((output / "profile.json").read_text())
    distribution = profile.get("distribution") or {}
    return (distribution.get("strategy") or {}).get("value"), tuple(distribution.get("gpus", ()))


def test_follows_cpu_quota_and_gpu_changes(daemon: DaemonProcess, host: Host) -> None:
    daemon.start()
    daemon.wait_ready()
    after = daemon.messages.index({"READY": "1"}) + 1  # READY=1 goes alone, the status next
    status = daemon.wait_message(lambda m: "STATUS" in m, after=after)["STATUS"]
    assert status.startswith("applied"), status
    assert env_value(daemon.output, INTRA) == "24"  # 2 sockets x 12 cores, no quota

    host.set_online("0-22")  # CPU 23 taken offline
    follows(daemon, INTRA, "23")
    host.set_quota(2.0)
    follows(daemon, INTRA, "2")
    host.set_quota(1.0)
    follows(daemon, INTRA, "1")
    line = daemon.wait_message(lambda m: "cpu quota 2.0→1.0" in m.get("STATUS", ""))["STATUS"]
    assert "threads.intra_op 2→1" in line and f"env.{INTRA}" not in line, line  # said once

    assert gpu_strategy(daemon.output) == ("MirroredStrategy", (0, 1))
    host.set_gpus(1)  # a GPU lost
    wait_for(lambda: gpu_strategy(daemon.output)[1] == (0,), "one GPU in profile.json")
    daemon.wait_message(lambda m: "gpus 2 (Tesla T4)→1 (Tesla T4)" in m.get("STATUS", ""))
    log = daemon.log()
    # One line per change, naming the fact and the settings that moved.
    assert sum("online cpus 0-23→0-22" in ln for ln in log.splitlines()) == 1, log
    assert sum("gpus 2 (Tesla T4)→1 (Tesla T4)" in ln for ln in log.splitlines()) == 1, log
    assert daemon.count("READY") == 1

    assert daemon.stop() == 0
    assert daemon.messages[-1].get("STOPPING") == "1"


def test_bad_config_keeps_the_last_profile_and_recovers(daemon: DaemonProcess) -> None:
    daemon.start()
    daemon.wait_ready()
    before = (daemon.output / "hwtune.dotenv").read_text()
    daemon.config.parent.mkdir(parents=True)
    replace_file(daemon.config, "[threads]\nintra_op = 'many'\n")
    status = daemon.wait_message(lambda m: m.get("STATUS", "").startswith("degraded"))["STATUS"]
    assert str(daemon.config) in status and "keeping the profile" in status, status
    assert (daemon.output / "hwtune.dotenv").read_text() == before
    assert daemon.proc is not None and daemon.proc.poll() is None  # still running

    replace_file(daemon.config, "[threads]\nintra_op = 3\n")
    follows(daemon, INTRA, "3")
    daemon.wait_message(lambda m: m.get("STATUS", "").startswith("recovered"))
    assert "recovered" in daemon.log()
    assert daemon.count("READY") == 1
    assert daemon.stop() == 0


def test_failing_probe_keeps_the_last_profile_and_recovers(
    daemon: DaemonProcess, host: Host
) -> None:
    daemon.start()
    daemon.wait_ready()
    membership = host.root / "proc/self/cgroup"
    good = membership.read_text()
    # A torn write of the cgroup membership: the limits cannot be found, so planning from it
    # would drop the cgroup limits; the daemon must keep the profile it has.
    host.set_quota(2.0)
    follows(daemon, INTRA, "2")
    before = (daemon.output / "hwtune.dotenv").read_text()
    replace_file(membership, "7:memory:/job\n5:cpuset\n")
    status = daemon.wait_message(lambda m: m.get("STATUS", "").startswith("degraded"))["STATUS"]
    assert "probe cgroup" in status and "proc/self/cgroup:2" in status, status
    assert (daemon.output / "hwtune.dotenv").read_text() == before
    replace_file(membership, good)
    host.set_quota(3.0)
    follows(daemon, INTRA, "3")
    assert daemon.stop() == 0


def test_start_with_a_bad_config_reports_then_applies(tmp_path: Path, host: Host) -> None:
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out")
    try:
        d.config.parent.mkdir(parents=True)
        d.config.write_text("mode = 'fastest'\n")
        d.start()
        d.wait_ready()  # READY=1 after the first attempt, then the error in STATUS=
        after = d.messages.index({"READY": "1"}) + 1
        status = d.wait_message(lambda m: "STATUS" in m, after=after)["STATUS"]
        assert status.startswith("error:") and "fastest" in status, status
        assert not (d.output / "hwtune.dotenv").exists()
        replace_file(d.config, "mode = 'latency'\n")
        wait_for(lambda: env_value(d.output, INTRA) is not None, "a first profile")
        assert d.count("READY") == 1
        assert d.stop() == 0
    finally:
        d.close()


def test_sighup_reloads(daemon: DaemonProcess) -> None:
    daemon.start()
    daemon.wait_ready()
    daemon.config.parent.mkdir(parents=True)
    # Written while the daemon cannot see it (same content signature race is not the point):
    # SIGHUP must re-read it regardless.
    daemon.config.write_text("[threads]\ninter_op = 1\nintra_op = 5\n")
    mark = len(daemon.messages)
    daemon.signal(signal.SIGHUP)
    reloading = daemon.wait_message(lambda m: m.get("RELOADING") == "1", after=mark)
    assert int(reloading["MONOTONIC_USEC"]) > 0
    index = daemon.messages.index(reloading)
    daemon.wait_message(lambda m: m.get("READY") == "1", after=index + 1)
    assert env_value(daemon.output, INTRA) == "5"
    assert daemon.stop() == 0


def test_sigusr1_and_sigusr2_check_the_inputs_at_once_and_never_stop_it(
    tmp_path: Path, host: Host
) -> None:
    """logrotate's postrotate scripts and stray `kill -USR1`s send SIGUSR1 to daemons to
    reopen their logs; unhandled, it ended the daemon. It has no log file, so either signal
    now makes it check its inputs at once (a 60 s poll interval: nothing else would see these
    cgroupfs changes within the test's waits). A SIGUSR1 and a SIGHUP pending together (sent
    while the daemon is stopped) make one reload that is their check; neither is lost."""
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out", interval=60)
    d.extra_args = ("--poll-only",)
    try:
        d.start()
        d.wait_ready()
        for signum, cpus in ((signal.SIGUSR1, 3), (signal.SIGUSR2, 2)):
            host.set_quota(cpus)
            d.signal(signum)
            follows(d, INTRA, str(cpus))
            assert f"{signal.Signals(signum).name}: checking the inputs now" in d.log()
        assert d.proc is not None and d.proc.poll() is None
        mark = len(d.messages)
        os.kill(d.pid, signal.SIGSTOP)
        try:
            host.set_quota(1)
            d.signal(signal.SIGUSR1)
            d.signal(signal.SIGHUP)
        finally:
            os.kill(d.pid, signal.SIGCONT)
        follows(d, INTRA, "1")
        d.wait_message(lambda m: m.get("READY") == "1", after=mark)
        wait_for(lambda: "reloading (SIGHUP, with SIGUSR1)" in d.log(), "the reload's line")
        assert d.log().count("SIGUSR1: checking the inputs now") == 1, d.log()
        assert d.stop() == 0
        d.drain()
        assert sum(1 for m in d.messages[mark:] if m.get("RELOADING") == "1") == 1
    finally:
        d.close()


def test_sigint_stops_cleanly_with_130(daemon: DaemonProcess) -> None:
    """Ctrl-C: a clean stop, reported as shells report SIGINT (128+2, README's exit table)."""
    daemon.start()
    daemon.wait_ready()
    daemon.signal(signal.SIGINT)
    assert daemon.proc is not None and daemon.proc.wait(WAIT_S) == 130
    daemon.drain()
    assert any(m.get("STOPPING") == "1" for m in daemon.messages)
    assert "Traceback" not in daemon.log()
    # Its last line says what it cost (psutil: its own memory and CPU time).
    assert re.search(r"stopping \(\d+ MiB resident, \d+\.\d\d s CPU used\)", daemon.log())


def test_sigterm_during_the_first_detection_exits_zero(daemon: DaemonProcess) -> None:
    daemon.start()
    # STATUS=starting is sent once the handlers are in place, right before detect() runs.
    daemon.wait_message(lambda m: m.get("STATUS", "").startswith("starting"))
    daemon.signal(signal.SIGTERM)
    assert daemon.proc is not None and daemon.proc.wait(WAIT_S) == 0
    assert "Traceback" not in daemon.log()


def test_polling_alone_notices_changes(tmp_path: Path, host: Host) -> None:
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out", extra_args=("--poll-only",))
    try:
        d.start()
        d.wait_ready()
        assert "polling only" in d.log()
        host.set_quota(4.0)
        follows(d, INTRA, "4")
        assert d.stop() == 0
    finally:
        d.close()


def test_watchdog_pings_only_for_this_pid(tmp_path: Path, host: Host) -> None:
    mine = DaemonProcess(
        tmp_path / "a", host.root, tmp_path / "a/out", extra_env={"WATCHDOG_USEC": "300000"}
    )
    other = None
    try:
        mine.start()
        mine.wait_ready()
        mine.wait_message(lambda m: m.get("WATCHDOG") == "1")
        mark = len(mine.messages)
        mine.wait_message(lambda m: m.get("WATCHDOG") == "1", after=mark)  # and again
        assert mine.stop() == 0
        other = DaemonProcess(
            tmp_path / "b",
            host.root,
            tmp_path / "b/out",
            extra_env={"WATCHDOG_USEC": "300000", "WATCHDOG_PID": "1"},
        )
        other.start()
        other.wait_ready()
        host.set_quota(3.0)  # let a few watchdog periods pass while something happens
        follows(other, INTRA, "3")
        assert other.stop() == 0
        assert other.count("WATCHDOG") == 0
    finally:
        mine.close()
        if other is not None:
            other.close()


def _tensorflow_snapshot(root: Path) -> dict[str, Any] | None:
    """This interpreter's TensorFlow, saved into the tree as `hwtune snapshot` does; None
    where no TensorFlow is installed (the upgrade step is then skipped)."""
    from hwtune.probes.issues import IssueLog
    from hwtune.probes.tensorflow import SNAPSHOT_FILE, save_tf_snapshot

    save_tf_snapshot(root, IssueLog())
    data: dict[str, Any] = json.loads((root / SNAPSHOT_FILE).read_text())
    return data if data.get("install") else None


def test_nfd_file_follows_the_machine(tmp_path: Path, host: Host) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    tf_snapshot = _tensorflow_snapshot(host.root)
    d = DaemonProcess(
        tmp_path, host.root, tmp_path / "out", extra_args=("--nfd", "--nfd-dir", str(features))
    )
    try:
        d.start()
        d.wait_ready()
        now = datetime.now(timezone.utc)

        def labels() -> dict[str, str]:
            return parse_feature_file((features / "hwtune").read_text(), now)

        first = labels()
        assert first["hwtune.io/effective-cpus"] == "24"
        assert first["hwtune.io/gpu-count"] == "2"
        assert first["hwtune.io/gpu-cc"] == "7.5"  # T4
        host.set_quota(2.0)
        wait_for(lambda: labels().get("hwtune.io/effective-cpus") == "2", "effective-cpus=2")
        if tf_snapshot is not None:  # an upgrade in place: the dist-info carries the version
            assert first["hwtune.io/tensorflow-version"] == tf_snapshot["install"]["version"]
            tf_snapshot["install"]["version"] = "2.99.0"
            replace_file(host.root / "tensorflow.json", json.dumps(tf_snapshot))
            wait_for(
                lambda: labels().get("hwtune.io/tensorflow-version") == "2.99.0",
                "tensorflow-version=2.99.0",
            )
            assert (
                "→"
                in d.wait_message(
                    lambda m: "tensorflow" in m.get("STATUS", "") and "2.99.0" in m["STATUS"]
                )["STATUS"]
            )
        text = (features / "hwtune").read_text()
        expiry = next(ln for ln in text.splitlines() if ln.startswith("# +expiry-time="))
        when = datetime.strptime(expiry.split("=", 1)[1], "%Y-%m-%dT%H:%M:%SZ")
        assert when.replace(tzinfo=timezone.utc) > datetime.now(timezone.utc)
        assert sorted(p.name for p in features.iterdir()) == ["hwtune"]
        assert d.stop() == 0
    finally:
        d.close()


def _haswell_named(directory: Path, name: str) -> None:
    """A user knowledge file that renames the Haswell entry (visible in hardware.json)."""
    shipped = json.loads((REPO / "hwtune/knowledge/data/microarchitectures.json").read_text())
    entry = next(e for e in shipped["entries"] if e["key"] == "haswell")
    replace_file(
        directory / "microarchitectures.json",
        json.dumps({"entries": [{**entry, "name": name}]}),
    )


def test_sighup_rereads_knowledge_overrides(tmp_path: Path, host: Host) -> None:
    # Issue 15 item 12: SIGHUP cleared default_knowledge's cache but not the per-table one,
    # so an edited user knowledge file was ignored until a restart.
    knowledge = tmp_path / "knowledge"
    knowledge.mkdir()
    _haswell_named(knowledge, "Haswell (site table 1)")
    d = DaemonProcess(
        tmp_path / "d",
        host.root,
        tmp_path / "out",
        extra_env={"HWTUNE_KNOWLEDGE_DIR": str(knowledge)},
    )
    try:
        d.start()
        d.wait_ready()
        assert "site table 1" in (d.output / "hardware.json").read_text()
        _haswell_named(knowledge, "Haswell (site table 2)")
        mark = len(d.messages)
        d.signal(signal.SIGHUP)
        reloading = d.wait_message(lambda m: m.get("RELOADING") == "1", after=mark)
        d.wait_message(lambda m: m.get("READY") == "1", after=d.messages.index(reloading) + 1)
        assert "site table 2" in (d.output / "hardware.json").read_text(), d.log()
        assert d.stop() == 0
    finally:
        d.close()


def _write_slowly(daemon: DaemonProcess, pause: float) -> list[str | None]:
    """Rewrite the config in place as an editor without rename does: the first part (valid
    TOML on its own, without the [threads] table), a pause, then the rest. Returns the
    intra_op values the applied files held during the pause."""
    seen: list[str | None] = []
    with open(daemon.config, "w") as f:
        f.write('[env]\nKEEP = "2"\n')
        f.flush()
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline:
            seen.append(env_value(daemon.output, INTRA))
            time.sleep(0.05)
        f.write("[threads]\nintra_op = 3\n")
    return seen


# The longer pause is twice how long the daemon waits for a writer (daemon.stable.WAIT_S): its
# wait begins when it sees the first write, on a loaded machine a while after the write, and
# must still run out mid-pause.
@pytest.mark.parametrize(
    "pause", [1.5, 2 * STABLE_WAIT_S], ids=["short-write", "longer-than-the-wait"]
)
def test_a_config_caught_mid_write_is_never_applied(daemon: DaemonProcess, pause: float) -> None:
    # Issue 15 item 11: the daemon planned from the first half of an in-place write and
    # applied it, dropping intra_op = 3 until the writer finished.
    daemon.config.parent.mkdir(parents=True)
    daemon.config.write_text('[env]\nKEEP = "1"\n[threads]\nintra_op = 3\n')
    daemon.start()
    daemon.wait_ready()
    follows(daemon, INTRA, "3")
    seen = _write_slowly(daemon, pause)
    assert set(seen) == {"3"}, (seen, daemon.log())
    follows(daemon, "KEEP", "2")
    assert env_value(daemon.output, INTRA) == "3"
    if pause > STABLE_WAIT_S:  # waited past daemon.stable.WAIT_S: reported, kept, recovered
        assert "still being written" in daemon.log(), daemon.log()
    assert daemon.stop() == 0


def test_an_nfd_write_failure_is_logged_once_and_retried_alone(
    tmp_path: Path, host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """features.d read-only (a unit given --nfd without ReadWritePaths=): one "degraded" line,
    no "recovered" one per interval, and no full re-plan just to retry the NFD file."""
    import io

    from hwtune.apply import nfd
    from hwtune.daemon.loop import Daemon, DaemonOptions
    from hwtune.daemon.sdnotify import Notifier
    from hwtune.errors import ApplyError

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise ApplyError("read-only file system")

    monkeypatch.setattr(nfd, "write_feature_file", refuse)
    log = io.StringIO()
    options = DaemonOptions(host.root, tmp_path / "out", 0.2, nfd_dir=tmp_path / "nfd")
    daemon = Daemon(options, {"HOME": str(tmp_path)}, log, notifier=Notifier(None))
    daemon._inputs()
    assert daemon.cycle(["start"])
    daemon.poll()  # the watcher's first look may count as a change
    cycles = daemon.cycles
    for _ in range(3):
        daemon.poll()
    text = log.getvalue()
    assert text.count("degraded") == 1 and "recovered" not in text, text
    assert daemon.cycles == cycles and daemon.error is None
    assert "read-only file system" in daemon.status
    monkeypatch.undo()
    (tmp_path / "nfd").mkdir()
    daemon.poll()
    assert daemon.nfd_error is None and (tmp_path / "nfd" / "hwtune").is_file()
    assert "nfd: recovered" in log.getvalue()
    # Written for the first time, not put back: the file was never there to be deleted.
    assert "put back" not in log.getvalue(), log.getvalue()


def _expiry(feature_file: Path) -> str:
    text = feature_file.read_text()
    return next(ln for ln in text.splitlines() if ln.startswith("# +expiry-time="))


# A sitecustomize for the daemon's interpreter: time.time() runs ahead of or behind the real
# clock by the seconds in OFFSET_FILE, read at each call, as when the wall clock is stepped
# (NTP, an admin's `date -s`) under a running process. CLOCK_MONOTONIC is left alone, as the
# kernel leaves it.
_STEPPED_CLOCK = """
import time
_real = time.time
def _stepped():
    try:
        with open({offset!r}) as f:
            return _real() + float(f.read())
    except (OSError, ValueError):
        return _real()
time.time = _stepped
"""


def _expiry_time(feature_file: Path) -> datetime:
    return datetime.fromisoformat(_expiry(feature_file).split("=", 1)[1].replace("Z", "+00:00"))


def test_nfd_labels_are_restamped_when_the_clock_is_stepped_back(
    tmp_path: Path, host: Host
) -> None:
    """A clock that ran an hour fast is corrected: the expiry stamped by the fast clock is an
    hour away, and the half-life refresh, timed by the wall clock alone, waited that hour,
    so labels outlived a stop or a failure by an hour. The refresh is timed by the monotonic
    clock too, and a clock behind the last stamp re-stamps it at once."""
    shim = tmp_path / "shim"
    shim.mkdir()
    offset = tmp_path / "clock-offset"
    offset.write_text("3600")  # the clock runs an hour fast from the start
    (shim / "sitecustomize.py").write_text(_STEPPED_CLOCK.format(offset=str(offset)))
    features = tmp_path / "features.d"
    features.mkdir()
    d = DaemonProcess(
        tmp_path,
        host.root,
        tmp_path / "out",
        extra_args=("--nfd-dir", str(features)),
        extra_env={"PYTHONPATH": f"{shim}{os.pathsep}{REPO}"},
    )
    try:
        d.start()
        d.wait_ready()
        feature_file = features / "hwtune"
        wait_for(feature_file.exists, "the NFD file")
        fast = _expiry_time(feature_file)
        assert fast > datetime.now(timezone.utc) + timedelta(minutes=50), fast
        offset.write_text("0")  # corrected: the wall clock steps back an hour
        wait_for(
            lambda: _expiry_time(feature_file) < datetime.now(timezone.utc) + timedelta(minutes=5),
            f"the NFD expiry re-stamped by the corrected clock (was {fast}); log:\n{d.log()}",
        )
        assert d.stop() == 0
    finally:
        d.close()


def _degraded_daemon(tmp_path: Path, host: Host) -> tuple[Any, Path, Path]:
    """A daemon (in this process, so the half-life can be wound forward) that applied once
    with a config and NFD file, and the config and feature file paths."""
    import io

    from hwtune.daemon.loop import Daemon, DaemonOptions
    from hwtune.daemon.sdnotify import Notifier

    config = tmp_path / "xdg" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("mode = 'latency'\n")
    environ = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    options = DaemonOptions(host.root, tmp_path / "out", 0.2, nfd_dir=tmp_path / "nfd")
    (tmp_path / "nfd").mkdir()
    daemon = Daemon(options, environ, io.StringIO(), notifier=Notifier(None))
    daemon._inputs()
    assert daemon.cycle(["start"])
    return daemon, config, tmp_path / "nfd" / "hwtune"


def _half_life_passes(daemon: Any) -> None:
    """One pass of the main loop after the half-life: poll, then the refresh."""
    time.sleep(1.1)  # the stamp has one-second resolution
    daemon._nfd_written_at -= 3600
    daemon.poll()
    daemon._write_nfd()


def test_a_config_typo_keeps_the_nfd_labels_until_a_fact_moves(tmp_path: Path, host: Host) -> None:
    """A config that no longer parses keeps the last good profile on disk, and with the
    hardware unchanged its labels are still true: the half-life refresh goes on, so a typo
    does not drop the node's labels. Once a labelled fact's input moves (the CPU quota) the
    daemon, still unable to plan, can no longer confirm them: they lapse at the expiry stamped
    then; the first good apply writes them afresh."""
    daemon, config, feature_file = _degraded_daemon(tmp_path, host)
    stamped = _expiry(feature_file)
    replace_file(config, "mode = 'fastest'\n")  # no such mode: every apply fails from now
    daemon.poll()
    assert daemon.error is not None and "fastest" in daemon.error
    _half_life_passes(daemon)
    refreshed = _expiry(feature_file)
    assert refreshed > stamped
    host.set_quota(1.0)
    _half_life_passes(daemon)
    assert daemon.error is not None and _expiry(feature_file) == refreshed
    replace_file(config, "mode = 'latency'\n")
    daemon.poll()
    assert daemon.error is None and _expiry(feature_file) > refreshed
    assert "effective-cpus=1" in feature_file.read_text()


def test_outputs_that_cannot_be_put_back_let_the_nfd_labels_lapse(
    tmp_path: Path, host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Degraded by a config typo, then a profile file deleted and not written back (the
    apply fails): the profile on disk is no longer the last good apply's, so its labels are
    not refreshed any more."""
    from hwtune.apply import outputs
    from hwtune.errors import HwtuneError

    daemon, config, feature_file = _degraded_daemon(tmp_path, host)
    replace_file(config, "mode = 'fastest'\n")
    daemon.poll()
    _half_life_passes(daemon)
    refreshed = _expiry(feature_file)

    def failing(*_args: object, **_kwargs: object) -> None:
        raise HwtuneError("out/hwtune.env: No space left on device")

    monkeypatch.setattr(outputs, "apply_all", failing)
    daemon._restore_outputs()
    assert daemon.error is not None and "No space left" in daemon.error
    _half_life_passes(daemon)
    assert _expiry(feature_file) == refreshed


def test_a_failing_probe_lets_the_nfd_labels_lapse(tmp_path: Path, host: Host) -> None:
    """A probe failing (a torn cgroup membership) leaves facts the daemon cannot confirm: the
    half-life refresh is skipped so the labels lapse at the expiry stamped at the last good
    apply, as if the daemon had stopped."""
    daemon, _, feature_file = _degraded_daemon(tmp_path, host)
    stamped = _expiry(feature_file)
    replace_file(host.root / "proc/self/cgroup", "7:memory:/job\n5:cpuset\n")
    daemon.poll()
    assert daemon.error is not None and "probe cgroup" in daemon.error
    _half_life_passes(daemon)
    assert _expiry(feature_file) == stamped


def test_deleted_outputs_are_written_again(tmp_path: Path, host: Host) -> None:
    """The profile files and the NFD file are the daemon's to keep: someone deleting them
    (a clean-up script, `rm -r /etc/hwtune/*`) is noticed and they are put back, without a
    re-plan. A poll interval of 30 s: inotify on their directories says it at once."""
    features = tmp_path / "features.d"
    features.mkdir()
    d = DaemonProcess(
        tmp_path,
        host.root,
        tmp_path / "out",
        interval=30,
        extra_args=("--nfd", "--nfd-dir", str(features)),
    )
    try:
        d.start()
        d.wait_ready()
        env_file, feature_file = d.output / "hwtune.env", features / "hwtune"
        before = env_file.read_bytes()
        assert feature_file.is_file()
        env_file.unlink()
        feature_file.unlink()
        wait_for(env_file.exists, f"{env_file} to be written again; log:\n{d.log()}", 10)
        wait_for(feature_file.exists, f"{feature_file} to be written again", 10)
        assert env_file.read_bytes() == before
        wait_for(lambda: "put back" in d.log(), "the log line")
        assert "hwtune.env (created)" in d.log()
        # Degraded (a config that no longer parses): the last good profile is still kept
        d.config.parent.mkdir(parents=True)
        replace_file(d.config, "mode = 'fastest'\n")
        d.wait_message(lambda m: m.get("STATUS", "").startswith("degraded"), timeout=10)
        env_file.unlink()
        wait_for(env_file.exists, f"{env_file} to be written again while degraded", 10)
        assert env_file.read_bytes() == before
        assert d.stop() == 0
    finally:
        d.close()


def test_outputs_deleted_before_the_first_poll_are_written_again(
    tmp_path: Path, host: Host
) -> None:
    """The outputs' baseline was taken before the first apply wrote them: deleting them all
    before the first poll (polling only: no inotify wake-up from the daemon's own writes)
    brought them back to that baseline, so no poll saw a change and they stayed deleted."""
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out", interval=1)
    d.extra_args = ("--poll-only",)
    try:
        d.start()
        d.wait_ready()
        written = sorted(p.name for p in d.output.glob("[!.]*"))
        for path in d.output.glob("[!.]*"):
            path.unlink()
        wait_for(
            lambda: sorted(p.name for p in d.output.glob("[!.]*")) == written,
            f"every output written again; log:\n{d.log()}",
            timeout=10,
        )
        assert d.stop() == 0
    finally:
        d.close()


def test_a_tune_result_in_a_fingerprint_subdirectory_wakes_the_daemon(
    tmp_path: Path, host: Host
) -> None:
    """`hwtune tune` saves `<tuned>/<fingerprint>/<workload>.json`. inotify does not recurse,
    so the fingerprint directories are watched too, one made after the start as well; a poll
    interval of 30 s shows that inotify, not polling, brought the re-plan."""
    tuned = tmp_path / "tuned"
    (tuned / "fp-old").mkdir(parents=True)
    d = DaemonProcess(
        tmp_path,
        host.root,
        tmp_path / "out",
        interval=30,
        extra_env={"HWTUNE_TUNED_DIR": str(tuned)},
    )

    def replans(write: Callable[[], None]) -> None:
        mark = len(d.messages)
        write()
        d.wait_message(lambda m: "STATUS" in m, timeout=10, after=mark)

    try:
        d.start()
        d.wait_ready()
        d.drain()
        replans(lambda: replace_file(tuned / "fp-old" / "builtin_cnn.json", "{}"))
        new = tuned / "fp-new"
        replans(new.mkdir)  # the directory's arrival is seen in tuned/ itself
        replans(lambda: replace_file(new / "builtin_cnn.json", "{}"))
        assert d.stop() == 0
    finally:
        d.close()


def test_nfd_dir_alone_asks_for_the_nfd_file(tmp_path: Path, host: Host) -> None:
    """`--nfd-dir DIR` without `--nfd` was ignored: a unit naming a directory got no labels."""
    features = tmp_path / "features.d"
    features.mkdir()
    d = DaemonProcess(
        tmp_path, host.root, tmp_path / "out", extra_args=("--nfd-dir", str(features))
    )
    try:
        d.start()
        d.wait_ready()
        assert (features / "hwtune").is_file(), d.log()
        assert d.stop() == 0
    finally:
        d.close()


def test_the_first_tune_result_wakes_the_daemon_when_its_directory_is_made(
    tmp_path: Path, host: Host
) -> None:
    """The tuned store does not exist before the first `hwtune tune` result, which makes it
    (and its <fingerprint>/ directory) on saving. inotify cannot watch a missing directory,
    so its nearest existing ancestor is watched for the next one down; before, nothing was
    and the result was seen only at the next poll (30 s here, the wait 10 s)."""
    state = tmp_path / "state"
    state.mkdir()
    tuned = state / "hwtune" / "tuned"
    d = DaemonProcess(
        tmp_path,
        host.root,
        tmp_path / "out",
        interval=30,
        extra_env={"HWTUNE_TUNED_DIR": str(tuned)},
    )
    try:
        d.start()
        d.wait_ready()
        d.drain()
        mark = len(d.messages)
        (tuned / "fp-first").mkdir(parents=True)  # as save_result's make_dirs
        replace_file(tuned / "fp-first" / "builtin_cnn.json", "{}")
        d.wait_message(lambda m: "STATUS" in m, timeout=10, after=mark)
        # and the directories made meanwhile are watched from then on
        mark = len(d.messages)
        replace_file(tuned / "fp-first" / "other.json", "{}")
        d.wait_message(lambda m: "STATUS" in m, timeout=10, after=mark)
        assert d.stop() == 0
    finally:
        d.close()


def test_the_longest_interval_the_message_names_is_taken(tmp_path: Path, host: Host) -> None:
    """`--interval 86400` was refused with "must be ... from 0.1 to 86400": the check (and
    run_daemon's own) excluded the bound the message includes."""
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out", interval=86400)
    try:
        d.start()
        ready = d.wait_ready()
        assert "READY" in ready, d.log()
        assert d.stop() == 0
    finally:
        d.close()


def _signal_bit(pid: int, field: str, signum: int) -> bool:
    """Whether `signum` is in a signal-set line of /proc/PID/status (SigBlk, SigCgt: proc(5))."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError(f"no {field} line")


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM])
def test_a_signal_before_the_handlers_are_in_place_is_served(
    tmp_path: Path, host: Host, signum: signal.Signals
) -> None:
    """The handlers came 0.1-0.3 s into the start (after the imports): a SIGHUP from a
    unit's ExecReload=, a logrotate SIGUSR1 or a SIGTERM sent then killed the daemon by the
    default action. Now they wait, blocked from the CLI's first line, for the loop."""
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out").start()
    try:
        # Sent in the window: blocked (the fix), its handler not yet installed.
        wait_for(lambda: _signal_bit(d.pid, "SigBlk", signum), "the signal blocked", step=0.001)
        early = not _signal_bit(d.pid, "SigCgt", signum)
        d.signal(signum)
        if signum == signal.SIGTERM:
            assert d.proc is not None and d.proc.wait(WAIT_S) == 0, d.log()
            assert "stopping" in d.log()
        else:
            said = "reloading (SIGHUP)" if signum == signal.SIGHUP else "SIGUSR1: checking"
            wait_for(lambda: said in d.log(), f"{said!r} in the log:\n{d.log()}")
            d.wait_ready()
            assert d.stop() == 0, d.log()
        assert early, "sent after the handlers were installed: the test saw no early window"
    finally:
        d.close()
