"""A trial's output, read while the workload writes it: its metric lines and its last lines.

Each stream of each instance goes to a pipe that a thread drains as it fills. What the tuner
uses of the output is kept, and nothing else: every `hwtune-metric:` line is parsed as it
passes (the last value of a name wins, as if the whole output were read at the end), and the
last TAIL_BYTES are kept for the report's tail of a failure. Before, the output went to files
in the trial's temporary directory and was read after the trial: a workload that logs for
hours (a progress line per step, a warning per batch) filled /tmp during a long tune, often a
tmpfs (memory). Now a stream costs at most a read (CHUNK), TAIL_BYTES and LINE_LIMIT of
memory, the pipe's buffer and MAX_NAMES metric values, whatever it prints, and nothing is
written to disk.

A pipe only ends when every process holding its write end has exited; the trial's process
groups and every process it left are stopped before the capture is read (trial.py), so
`finish` waits only briefly, and gives up rather than hang on a process it cannot see.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
from collections import deque

# `hwtune-metric: name=value` on a line of its own (surrounding blanks allowed). The value is
# the rest of the line: `x=100 samples/s` is a value that is no number, which the trial names,
# not a line it never saw.
METRIC_MARKER = "hwtune-metric:"
METRIC_LINE = re.compile(
    rf"^[ \t]*{re.escape(METRIC_MARKER)}[ \t]*([A-Za-z_][\w.\-]*)[ \t]*=[ \t]*(\S[^\n]*)$",
    re.MULTILINE,
)
_MARKER = METRIC_MARKER.encode()
# Only lines holding `hwtune-metric:` are parsed, and only up to this long (a metric line is a
# few dozen bytes): a longer line is someone's data, not a metric, and is never held whole.
LINE_LIMIT = 64 * 1024
# The report shows a failure's last 20 lines, at most 3000 characters (trial.TAIL_LINES,
# TAIL_CHARS): up to 12 kB of UTF-8. 64 KiB holds that many lines even when each is a few
# kilobytes (a TensorFlow warning with its stack, a progress bar redrawn with \r), and per
# trial that is 128 KiB per instance, however long it logs.
TAIL_BYTES = 64 * 1024
# The pipe's capacity and one read of it. A workload writing 500 MB of 100-byte lines in one
# trial (2-vCPU KVM VM, AMD EPYC) wrote them in 0.12-0.14 s to a file, then waited 2.4 s
# for the file to be scanned; through a pipe of the default 64 KiB (pipe(7), "Pipe
# capacity") it spent 0.7-1 s writing, through one of 256 KiB read in 256 KiB pieces
# 0.3-0.6 s, as with 1 MiB. Unprivileged processes may set up to pipe-max-size (1 MiB by
# default); where they may not (pipe-user-pages-soft reached) the default stays.
CHUNK = 256 * 1024
# How long `finish` waits for the pipe's end once the trial's processes are stopped.
FINISH_S = 3.0
# The metric names kept per stream: the first ones printed (the default metric is the first)
# and the one the tuner wants. A workload naming a metric per step (`loss_step_123=…`) for
# hours grew the table without bound, ~100 bytes a name; a real one prints a few names.
MAX_NAMES = 256


def metric_values(text: str) -> dict[str, str]:
    """Every `hwtune-metric:` line's value as printed, by name: the last one wins, the names in
    the order first printed. A carriage return ends a line, as a terminal shows it: a CRLF line
    ending, or a progress bar redrawn with \\r before the metric."""
    found: dict[str, str] = {}
    for name, raw in METRIC_LINE.findall(text.replace("\r", "\n")):
        found[name] = raw.rstrip(" \t")  # here: a lazy `\S.*?[ \t]*$` is quadratic in blanks
    return found


def number(raw: str) -> float | None:
    """A printed value as a number, None when it is none (`1,234.5`, `1234,5`, `fast`)."""
    try:
        return float(raw)
    except ValueError:
        return None


def parse_metrics(text: str) -> dict[str, float]:
    """Every `hwtune-metric:` line's value by name, the last one winning; a name whose last
    value is not a number is left out (a trial reports it: capture.values)."""
    found: dict[str, float] = {}
    for name, raw in metric_values(text).items():
        value = number(raw)
        if value is not None:
            found[name] = value
    return found


class Capture:
    """One stream of one workload process. `write_fd` goes to the child (Popen's stdout= or
    stderr=); `start` then closes this process's copy and starts draining; `finish` waits for
    the end. `close` releases what was not handed over (a child that could not start)."""

    def __init__(self, keep: str | None = None) -> None:
        self._keep = keep  # the metric wanted (--metric, or the first trial's): always kept
        self._read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._read_fd, fcntl.F_SETPIPE_SZ, CHUNK)
        self._lock = threading.Lock()
        self._values: dict[str, str] = {}  # the last value printed of each name, as printed
        # The last line holding `hwtune-metric:` that is no metric line, for the failure that
        # says none was printed (`INFO:root:hwtune-metric: x=1`, as logging's default shows).
        self.stray: str | None = None
        self._tail: deque[bytes] = (
            deque()
        )  # the last pieces read, TAIL_BYTES and less than one more
        self._tail_size = 0
        self._line = b""  # the line not ended yet: at most LINE_LIMIT + 1 bytes of it
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._close_write_end()  # the child has its own: the pipe ends when the child does
        self._thread = threading.Thread(target=self._drain, name="hwtune-trial-output")
        self._thread.daemon = True  # never keeps hwtune from exiting
        self._thread.start()

    def close(self) -> None:
        """For a capture never started; a started one closes its read end when drained."""
        self._close_write_end()
        if self._thread is None and self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1

    def finish(self, timeout: float = FINISH_S) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def values(self) -> dict[str, str]:
        """The last value of each metric name, as printed (a number or not), in the order
        the names were first printed."""
        with self._lock:
            return dict(self._values)

    def tail_bytes(self) -> bytes:
        with self._lock:
            return b"".join(self._tail)[-TAIL_BYTES:]

    def _close_write_end(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._read_fd, CHUNK):
                self._feed(chunk)
        except OSError:
            pass  # nothing more can be read: what was is kept
        finally:
            os.close(self._read_fd)
        self._feed(b"\n", kept=False)  # a last line without its newline counts too

    def _feed(self, chunk: bytes, *, kept: bool = True) -> None:
        """Parse the metric lines `chunk` ends, keep its end. Searched in place: a piece
        without `hwtune-metric:` is neither split nor copied (one holding a \\r is copied
        once, to end its lines there)."""
        found: dict[str, str] = {}
        stray: str | None = None
        kept_chunk = chunk
        # A carriage return ends a line too (metric_values): a progress bar redrawn with \r
        # for hours is many short lines, not one too long to hold the metric printed after it.
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r", b"\n")
        first = chunk.find(b"\n")
        if first < 0:  # no line ends here: the current one only grows
            if len(self._line) <= LINE_LIMIT:
                self._line = (self._line + chunk)[: LINE_LIMIT + 1]
        else:
            if len(self._line) + first <= LINE_LIMIT:  # longer: too long to be a metric line
                stray = _take(self._line + chunk[:first], found) or stray
            last = chunk.rfind(b"\n")
            if chunk.find(_MARKER, first + 1, last) >= 0:
                for line in chunk[first + 1 : last].split(b"\n"):
                    stray = _take(line, found) or stray
            self._line = chunk[last + 1 : last + 2 + LINE_LIMIT]
        with self._lock:
            self.stray = stray or self.stray
            for name, raw in found.items():
                if name in self._values or len(self._values) < MAX_NAMES or name == self._keep:
                    self._values[name] = raw
            if kept:
                piece = kept_chunk[-TAIL_BYTES:]
                self._tail.append(piece)
                self._tail_size += len(piece)
                while self._tail_size - len(self._tail[0]) >= TAIL_BYTES:
                    self._tail_size -= len(self._tail.popleft())


def _take(line: bytes, found: dict[str, str]) -> str | None:
    """Add the metric `line` holds to `found`; the line, when it holds `hwtune-metric:` but
    does not read as a metric line (a logging prefix before it, a name with blanks)."""
    if len(line) > LINE_LIMIT or _MARKER not in line:
        return None
    text = line.decode("utf-8", "replace")
    values = metric_values(text)
    found.update(values)
    return None if values else text.strip()
