"""hwtune's standard streams, in whatever state the process was started with them.

Python makes a stream the process was started without (`>&-`, `2>&-`) None, and
`print(..., file=None)` writes to sys.stdout. So with stderr closed, errors and warnings went
to stdout, and `eval "$(hwtune env 2>&-)"` ran them as shell code: an error quotes the bad
value, Python quotes a value holding `'` in double quotes, and a `$(…)` in it was executed.
A stdout that could not be written (closed, a full disk, EIO, an encoding without "·") ended
in a traceback.

The CLI therefore wraps both streams (`guard_stdout`, `guard_stderr`). A failed write to stdout
becomes an `OutputError` that names stdout and the reason. A gone reader (EPIPE) stays a
BrokenPipeError, because `hwtune detect | head` is not an error. Diagnostics that stderr cannot
take are dropped: there is nowhere else to send them. Library code that warns on sys.stderr
uses `warn`, which never falls back to stdout.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, TextIO, cast

from hwtune.errors import HwtuneError

_HINT = "give hwtune a stdout it can write, or redirect it to /dev/null"
# The other end is gone for good: a reader that exited, a terminal that hung up.
READER_GONE = (errno.EPIPE, errno.EIO)


class OutputError(HwtuneError):
    """stdout cannot take hwtune's output (closed, a full disk, an I/O error)."""

    code = "output-failed"


class _Guarded:
    """A text stream over `stream` (None: the process has no such stream), passing on
    `isatty`, `fileno` and `buffer` so that callers can still tell what it is."""

    def __init__(self, stream: TextIO | None, name: str) -> None:
        self.stream = stream
        self.name = name

    @property
    def buffer(self) -> BinaryIO:
        found = getattr(self.stream, "buffer", None)
        if found is None:  # getattr(stream, "buffer", None) then says there is none
            raise AttributeError("buffer")
        return cast(BinaryIO, found)

    def isatty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        if self.stream is None:
            raise OSError(errno.EBADF, f"{self.name} is closed")
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, errors, line_buffering…
        return getattr(self.stream, name)


class _Stdout(_Guarded):
    def write(self, text: str) -> int:
        if self.stream is None:
            raise OutputError("cannot write to stdout: it is closed", hint=_HINT)
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _failed(err) from err
        except UnicodeEncodeError as err:
            # A stdout in a non-UTF-8 encoding (PYTHONIOENCODING=ascii, a Latin-1 locale) cannot
            # hold "·", "—" or "≥": say so, rather than a traceback or replaced characters in
            # output meant for scripts (JSON, env files).
            encoding = getattr(self.stream, "encoding", None) or err.encoding
            raise OutputError(
                f"cannot write to stdout: its encoding ({encoding}) cannot hold "
                f"{err.object[err.start : err.end]!r}",
                hint="use a UTF-8 locale (LANG=C.UTF-8) or set PYTHONIOENCODING=utf-8",
            ) from err

    def flush(self) -> None:
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _failed(err) from err


class _Stderr(_Guarded):
    """Drops what stderr cannot take. Where its reader is gone (`2>&1 | head -1`) the text
    stays in the stream's buffer and the interpreter's last flush fails on it again, turning
    the exit status into 120: the descriptor then goes to /dev/null (`discard`)."""

    def write(self, text: str) -> int:
        self._try(lambda stream: stream.write(text))
        return len(text)

    def flush(self) -> None:
        self._try(lambda stream: stream.flush())

    def _try(self, action: Callable[[TextIO], object]) -> None:
        if self.stream is None:
            return
        try:
            action(self.stream)
        except OSError as err:
            if err.errno in READER_GONE:
                discard(self.stream)
        except ValueError:  # closed by someone in this process
            pass


def discard(stream: TextIO | None) -> None:
    """Point `stream`'s descriptor at /dev/null (inheritable, as stderr is), so what is
    buffered and what follows can be written, to nowhere."""
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


def _failed(err: OSError) -> OutputError:
    return OutputError(f"cannot write to stdout: {err.strerror or err}", hint=_HINT)


def guard_stdout(stream: TextIO | None) -> TextIO:
    """`stream` (None: closed) with failed writes raised as OutputError."""
    return stream if isinstance(stream, _Stdout) else cast(TextIO, _Stdout(stream, "stdout"))


def guard_stderr(stream: TextIO | None) -> TextIO:
    """`stream` (None: closed) with what it cannot take dropped, never sent to stdout."""
    return stream if isinstance(stream, _Stderr) else cast(TextIO, _Stderr(stream, "stderr"))


def unguarded(stream: TextIO | None) -> TextIO | None:
    """The stream `guard_stdout` or `guard_stderr` wrapped (`stream` itself when not wrapped):
    for code that must see the errors the guard hides, as at exit (daemon.logstream)."""
    return stream.stream if isinstance(stream, _Guarded) else stream


def warn(text: str) -> None:
    """Print one line on sys.stderr; nothing when the process has no stderr or it fails
    (print(file=None) would write it to stdout)."""
    guard_stderr(sys.stderr).write(text + "\n")
