"""`hwtune tune` progress: a line per trial when not on a terminal; a summary on Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.apply_profiles import PYTHON
from tests.test_tune_parts import gone

SLOW_TRIAL = [PYTHON, "-c", "import time; time.sleep(1.0)"]
TUNE = [PYTHON, "-m", "hwtune", "tune", "--time-whole", "--budget", "300", "--name", "slow"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    env.update(
        HWTUNE_TUNED_DIR=str(tmp_path / "tuned"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    return env


def _as_from_a_terminal() -> None:
    # A test run started in the background (`cmd &` in a script, nohup) ignores SIGINT, and
    # an ignored signal stays ignored across exec: give the child a terminal's default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_trials_are_logged_when_not_on_a_terminal_and_ctrl_c_prints_a_summary(
    tmp_path: Path,
) -> None:
    tune = subprocess.Popen(
        [*TUNE, "--", *SLOW_TRIAL],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        preexec_fn=_as_from_a_terminal,
    )
    try:
        assert tune.stderr is not None
        first = tune.stderr.readline()
        # stderr is a pipe: a plain line per trial, no carriage-return bar.
        assert first.startswith("hwtune tune: trial 1 (") and "\r" not in first, first
        tune.send_signal(signal.SIGINT)  # what Ctrl-C delivers
        _, err = tune.communicate(timeout=120)
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
    assert tune.returncode == 130, err
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("hwtune tune: interrupted after "), err
    assert re.match(r"hwtune tune: interrupted after (1 trial|\d+ trials) in ", summary), err
    assert "nothing stored" in summary
    assert "Traceback" not in err
    assert not (tmp_path / "tuned").exists() or not any((tmp_path / "tuned").rglob("*.json"))


def test_sigterm_stops_the_running_trial_and_stores_nothing(tmp_path: Path) -> None:
    """`kill`, `timeout` or a closed terminal: the trial runs in its own session, which the
    signal never reaches, so hwtune must stop it (as on Ctrl-C) before it exits 128 + 15."""
    pids = tmp_path / "trial.pids"
    trial = [
        PYTHON,
        "-c",
        f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(600)",
    ]
    tune = subprocess.Popen(
        [*TUNE, "--", *trial], stderr=subprocess.PIPE, text=True, env=_env(tmp_path)
    )
    try:
        deadline = time.monotonic() + 120
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids.exists(), "no trial started"
        tune.send_signal(signal.SIGTERM)
        _, err = tune.communicate(timeout=60)
        assert tune.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err
        for pid in map(int, pids.read_text().split()):
            assert gone(pid), pid
        assert not (tmp_path / "tuned").exists() or not any((tmp_path / "tuned").rglob("*.json"))
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
        for pid in map(int, pids.read_text().split()) if pids.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _bytes_under(directory: Path) -> int:
    """Disk space taken by the files under `directory` (allocated blocks, as du counts)."""
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(OSError):
            total += path.lstat().st_blocks * 512
    return total


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_chatty_trial_takes_no_disk_and_leaves_no_temporary_files(
    tmp_path: Path, signum: int
) -> None:
    """A trial's stdout and stderr went to files in its temporary directory, kept whole until
    it ended: a workload that logs for hours filled /tmp (a tmpfs: memory) during a long tune.
    Here one writes 32 MiB to each stream, then waits: its output must take no space under
    $TMPDIR, and the tune, interrupted there, must leave nothing under it."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    written = tmp_path / "written"
    workload = tmp_path / "chatty.py"
    workload.write_text(
        "import sys, time\n"
        "line = 'x' * 1023 + '\\n'\n"
        "for _ in range(32 * 1024):\n"
        "    sys.stdout.write(line)\n"
        "    sys.stderr.write(line)\n"
        "sys.stdout.flush()\n"
        "sys.stderr.flush()\n"
        f"open({str(written)!r}, 'w').close()\n"
        "time.sleep(600)\n"
    )
    env = {**_env(tmp_path), "TMPDIR": str(tmpdir)}
    tune = subprocess.Popen(
        [*TUNE, "--", PYTHON, "-I", "-S", str(workload)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 120
        while not written.exists() and time.monotonic() < deadline and tune.poll() is None:
            time.sleep(0.05)
        assert written.exists(), "the trial did not write its output"
        assert _bytes_under(tmpdir) < 1024 * 1024, sorted(tmpdir.rglob("*"))
        tune.send_signal(signum)
        _, err = tune.communicate(timeout=60)
        assert tune.returncode == 128 + signum, err
        assert "Traceback" not in err
        assert list(tmpdir.iterdir()) == []
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()


def test_a_second_ctrl_c_in_the_grace_still_stops_a_daemon_the_trial_started(
    tmp_path: Path,
) -> None:
    """A trial that ignores SIGTERM holds the first Ctrl-C in its grace; an impatient second
    Ctrl-C there went on to exit without stopping the daemon the trial had started (fork,
    setsid, fork), which kept running after `hwtune tune` had ended."""
    daemon_pid, started = tmp_path / "daemon.pid", tmp_path / "started"
    workload = tmp_path / "stubborn.py"
    workload.write_text(
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(daemon_pid)!r}, 'w').write(str(os.getpid()))\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        f"while not os.path.exists({str(daemon_pid)!r}): time.sleep(0.01)\n"
        f"open({str(started)!r}, 'w').close()\n"
        "time.sleep(600)\n"
    )
    tune = subprocess.Popen(
        [*TUNE, "--", PYTHON, "-I", "-S", str(workload)],
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        preexec_fn=_as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline and tune.poll() is None:
            time.sleep(0.05)
        assert started.exists(), "the trial did not start its daemon"
        tune.send_signal(signal.SIGINT)
        time.sleep(0.5)  # in the trial's grace (it ignores SIGTERM)
        tune.send_signal(signal.SIGINT)
        _, err = tune.communicate(timeout=30)
        assert tune.returncode == 130, err
        assert gone(int(daemon_pid.read_text()))
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
        if daemon_pid.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(daemon_pid.read_text()), signal.SIGKILL)


def test_a_trial_dies_with_tune_killed_by_sigkill(tmp_path: Path) -> None:
    """`kill -9` (the OOM killer, a CI job's timeout) lets no code of tune run: its trial ran on
    as an orphan, burning CPU, until the kernel was told to kill it with tune."""
    trial_pid = tmp_path / "trial.pid"
    written = tmp_path / "trial.pid.part"
    workload = tmp_path / "sleeper.py"
    workload.write_text(
        "import os, time\n"
        f"open({str(written)!r}, 'w').write(str(os.getpid()))\n"
        f"os.rename({str(written)!r}, {str(trial_pid)!r})\n"
        "time.sleep(600)\n"
    )
    tune = subprocess.Popen(
        [*TUNE, "--", PYTHON, "-I", "-S", str(workload)],
        stderr=subprocess.DEVNULL,
        env=_env(tmp_path),
    )
    try:
        deadline = time.monotonic() + 30
        while not trial_pid.exists() and time.monotonic() < deadline and tune.poll() is None:
            time.sleep(0.02)
        assert trial_pid.exists(), "the trial did not start"
        tune.kill()  # SIGKILL
        tune.wait()
        assert gone(int(trial_pid.read_text()), wait_s=3.0)
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
        if trial_pid.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(trial_pid.read_text()), signal.SIGKILL)
