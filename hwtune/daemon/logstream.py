"""Writing the daemon's log lines to a stderr that may go away under it.

A daemon's stderr is a pipe (`hwtune daemon 2>&1 | tee`, a supervisor) or a terminal as often
as the journal, and either can vanish while it runs: the reader exits (EPIPE; Python ignores
SIGPIPE, so the write fails instead of killing the process) or the terminal hangs up (EIO).
A failed line cannot be logged anywhere, so it is dropped; but it stays in the stream's
buffer, the interpreter's last flush at exit fails on it again, and Python then exits 120
("Exception ignored ... BrokenPipeError") where the daemon returned 0 after SIGTERM. Once the
reader is known to be gone the stream's descriptor is pointed at /dev/null (as the Python docs
advise for SIGPIPE, "Note on SIGPIPE"), so the buffered text is discarded and the exit status
is the daemon's.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from typing import TextIO

# The other end is gone for good: a reader that exited, a terminal that hung up.
_GONE = (errno.EPIPE, errno.EIO)


def write_line(stream: TextIO | None, line: str) -> None:
    """Print and flush `line`; never raises (a log that fails must not end the daemon)."""
    try:
        print(line, file=stream, flush=True)
    except OSError as err:
        if err.errno in _GONE:
            discard(stream)
    except ValueError:  # closed by someone in this process
        pass


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


def discard(stream: TextIO | None) -> None:
    """Point `stream`'s descriptor at /dev/null (inheritable, as stderr is)."""
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
