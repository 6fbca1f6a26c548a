"""Under systemd the CLI's stderr is the journal stream: its error, warning and note lines
carry sd-daemon(3) "<N>" priorities so `journalctl -p err` shows them, and only then.

A real `python -m hwtune` with stderr on a file whose "st_dev:st_ino" is announced in
$JOURNAL_STREAM, as systemd.exec(5) describes the variable.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from hwtune.daemon.instance import HINT, LOCK_NAME
from hwtune.status import ExitStatus
from tests.conftest import REPO

ROOT_HINT = "hint: give / or a directory made by `hwtune snapshot DIR`"


def _hwtune(args: list[str], log: Path, journal_stream: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    env["PYTHONPATH"] = str(REPO)
    if journal_stream is not None:
        env["JOURNAL_STREAM"] = journal_stream
    with log.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "hwtune", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            cwd=REPO,
            timeout=120,
        )
    return done.returncode, log.read_text(encoding="utf-8")


def _names(path: Path) -> str:
    st = path.stat()
    return f"{st.st_dev}:{st.st_ino}"


def test_an_error_and_its_hint_on_the_journal_stream_are_logged_at_err(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    log.touch()
    missing = tmp_path / "missing"
    status, text = _hwtune(["daemon", "--root", str(missing)], log, _names(log))
    assert status == ExitStatus.ERROR
    assert text == (
        f"<3>hwtune daemon: error: --root {missing}: not a directory\n<3>{ROOT_HINT}\n"
    )


def test_a_daemon_refused_its_lock_says_so_at_err_on_the_journal_stream(
    tmp_path: Path,
) -> None:
    output = tmp_path / "out"
    output.mkdir()
    lock = output / LOCK_NAME
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # its own open file description: the child's conflicts
        log = tmp_path / "stderr"
        log.touch()
        status, text = _hwtune(
            ["daemon", "--root", "/", "--output", str(output)], log, _names(log)
        )
    finally:
        os.close(fd)
    assert status == ExitStatus.LOCKED, text
    error, hint = text.splitlines()
    assert error.startswith("<3>hwtune daemon: error: another process (pid ")
    assert hint == f"<3>hint: {HINT}"


def test_no_prefix_when_stderr_is_not_the_journal_stream(tmp_path: Path) -> None:
    """Unset, or naming another file (a child whose stderr was redirected inherits the
    variable): the lines are plain."""
    log = tmp_path / "stderr"
    log.touch()
    other = tmp_path / "other"
    other.touch()
    missing = tmp_path / "missing"
    plain = f"hwtune daemon: error: --root {missing}: not a directory\n{ROOT_HINT}\n"
    for announced in (None, _names(other)):
        status, text = _hwtune(["daemon", "--root", str(missing)], log, announced)
        assert (status, text) == (ExitStatus.ERROR, plain)


def test_warnings_and_notes_get_their_own_priorities_and_a_hint_its_lines() -> None:
    from hwtune.errors import hint_line, stderr_line

    assert stderr_line("apply", "warning", "w", journal=True) == "<4>hwtune apply: warning: w"
    assert stderr_line("apply", "note", "n", journal=True) == "<5>hwtune apply: note: n"
    assert hint_line("h", "warning", journal=True) == "<4>hint: h"
    assert stderr_line("apply", "note", "n") == "hwtune apply: note: n"
