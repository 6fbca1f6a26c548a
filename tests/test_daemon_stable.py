"""daemon.stable: a config file is read only when no one is writing it (issue 15 item 11)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from hwtune.daemon import stable
from hwtune.errors import HwtuneError


def _aged(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_file_open_for_writing_is_busy_then_read_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('mode = "latency"\n')
    _aged(path, 10)
    with open(path, "a") as writer:  # the lease is refused while this is open
        writer.write("[threads]\n")
        writer.flush()
        assert stable.read_once(path) == ("busy", None)
    _aged(path, 10)
    assert stable.read_once(path) == ("ok", b'mode = "latency"\n[threads]\n')


def test_without_a_lease_a_file_changed_just_now_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An fcntl command the kernel does not know fails with EINVAL, as F_SETLEASE does for a
    # file neither ours nor leasable: the quiet-period rule applies then.
    monkeypatch.setattr(stable, "F_SETLEASE", 0x7FFF)
    path = tmp_path / "config.toml"
    path.write_text('mode = "latency"\n')
    assert stable.read_once(path) == ("busy", None)
    _aged(path, stable.QUIET_S + 1)
    assert stable.read_once(path) == ("ok", b'mode = "latency"\n')


def test_absent_files_and_a_writer_that_never_finishes(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert stable.read_stable([path]) == {path: None}
    path.write_text("x = 1\n")
    with open(path, "a"), pytest.raises(HwtuneError, match="still being written"):
        stable.read_stable([path], wait=0.2)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    os.mkfifo(path)
    with pytest.raises(HwtuneError, match="not a regular file"):
        stable.read_stable([path], wait=0.2)


def test_without_a_lease_an_mtime_in_the_future_is_not_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock stepped back (NTP, a restored VM) or a file unpacked from a host whose clock
    was ahead: nobody is writing it, and waiting for the clock to catch up could take hours."""
    monkeypatch.setattr(stable, "F_SETLEASE", 0x7FFF)  # no lease, as for a root-owned config
    path = tmp_path / "config.toml"
    path.write_text('mode = "latency"\n')
    future = time.time() + 3600
    os.utime(path, (future, future))
    assert stable.read_stable([path], wait=1.0) == {path: b'mode = "latency"\n'}


def test_an_oversized_config_is_refused_naming_the_file(tmp_path: Path) -> None:
    """A config that is no config (2 MB written over it by mistake): the daemon's log line
    said only "larger than 1048576 bytes", not which of the two config files it was."""
    path = tmp_path / "config.toml"
    path.write_bytes(b"#" * (2 * stable.MAX_BYTES))
    _aged(path, 10)
    expected = f"^{re.escape(str(path))}: larger than {stable.MAX_BYTES} bytes"
    with pytest.raises(HwtuneError, match=expected):
        stable.read_stable([path], wait=0.2)
