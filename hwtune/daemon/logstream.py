"""The daemon's log: its stderr at exit (`flush_or_discard`; each line goes through the CLI's
stderr guard, hwtune/fs/streams.py), whether that stderr is the journal
(`is_journal_stream`), and the daemon's own resource use for its last line.

A daemon's stderr is a pipe (`hwtune daemon 2>&1 | tee`, a supervisor) or a terminal as often
as the journal, and either can vanish while it runs: the reader exits (EPIPE; Python ignores
SIGPIPE, so the write fails instead of killing the process) or the terminal hangs up (EIO).
A failed line cannot be logged anywhere, so it is dropped; but it stays in the stream's
buffer, the interpreter's last flush at exit fails on it again, and Python then exits 120
("Exception ignored ... BrokenPipeError") where the daemon returned 0 after SIGTERM. Once the
reader is known to be gone the stream's descriptor is pointed at /dev/null (as the Python docs
advise for SIGPIPE, "Note on SIGPIPE"), so the buffered text is discarded and the exit status
is the daemon's. A stderr on a full disk (`2>/dev/full`, ENOSPC) is no gone reader: the guard
drops the line and the text stays buffered, so the flush at exit is made on the stream the
guard wraps, whose error then discards it (the CLI hands the daemon a guarded stderr, whose
flush raises nothing, and SIGTERM ended in 120).
"""

from __future__ import annotations

import io
import os
from typing import TextIO

from hwtune.fs.streams import discard
from hwtune.models.digits import is_ascii_digits


def flush_or_discard(stream: TextIO | None) -> None:
    """At exit: flush what is buffered, or throw it away if it cannot be written (a full
    disk, a reader gone), so the interpreter's own last flush cannot change the exit status."""
    if stream is None:
        return
    try:
        stream.flush()
    except OSError:
        discard(stream)
    except ValueError:
        pass


def own_usage() -> str:
    """This daemon's memory and CPU time, for its last log line (the figure docs/daemon.md
    quotes for idle cost can be read from it). psutil is the standard reader of a process's
    resources; its ~28 ms import (on a 2-vCPU EPYC VM) is nothing for a long-running daemon,
    while detect, configure() and env never import it."""
    import psutil

    try:
        me = psutil.Process()
        with me.oneshot():
            rss = me.memory_info().rss
            times = me.cpu_times()
    except (OSError, psutil.Error):
        return "resource use unknown"
    return f"{rss / (1 << 20):.0f} MiB resident, {times.user + times.system:.2f} s CPU used"


def is_journal_stream(announced: str, stream: TextIO) -> bool:
    """Whether `stream` is the journal connection `$JOURNAL_STREAM` ("DEV:INODE") names.

    systemd.exec(5), "$JOURNAL_STREAM": the variable is inherited by children whose stderr
    may have been redirected, so a program must compare it with fstat(2) of its own stderr
    (st_dev and st_ino, in decimal) before trusting it."""
    dev, sep, ino = announced.partition(":")
    if not (sep and is_ascii_digits(dev) and is_ascii_digits(ino)):
        return False
    if len(dev) > 20 or len(ino) > 20:  # u64s (and int() refuses 4300+ digits)
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False  # not a file (a StringIO in tests), or closed
    return st.st_dev == int(dev) and st.st_ino == int(ino)
